#!/usr/bin/env python3
"""From a one-agent `bench ttft --trace` file: the normal turns of each lookahead run during
which a warm-up chunk was in flight, against the same step of the synchronous run of the same
repeat (one agent runs the same steps in both modes). Prints, per strategy, how many such turns
there were and how much longer they took than synchronously (mean), and the chunks' share.

    python scripts/turns_beside_chunks.py docs/results/diagnostics/keep_recent_1agent_trace.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from typing import Any


def beside_chunks(trace: dict[str, Any]) -> dict[str, dict[str, float]]:
    runs = {(run["strategy"], run["mode"], run["repeat"]): run for run in trace["runs"]}
    excess: dict[str, list[float]] = defaultdict(list)
    waited: dict[str, list[float]] = defaultdict(list)
    for (strategy, mode, repeat), run in runs.items():
        sync = runs.get((strategy, "sync", repeat))
        if mode != "lookahead" or sync is None:
            continue
        sync_turns = {turn["step"]: turn for turn in sync["turns"]}
        for turn in run["turns"]:
            chunk_s = turn["wait_s"].get("warm_up", 0.0)
            same = sync_turns.get(turn["step"])
            if turn["commit"] != "none" or chunk_s <= 0 or same is None or same["commit"] != "none":
                continue
            excess[strategy].append(turn["ttft_s"] - same["ttft_s"])
            waited[strategy].append(chunk_s)
    return {
        strategy: {
            "turns": len(values),
            "mean_excess_s": statistics.mean(values),
            "mean_chunk_in_flight_s": statistics.mean(waited[strategy]),
        }
        for strategy, values in excess.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    args = parser.parse_args()
    with open(args.trace) as file:
        trace = json.load(file)
    for strategy, row in beside_chunks(trace).items():
        print(
            f"{strategy}: {row['turns']} normal turns with a chunk in flight, "
            f"{row['mean_excess_s']:+.3f} s against sync (mean), "
            f"chunk in flight {row['mean_chunk_in_flight_s']:.3f} s"
        )


if __name__ == "__main__":
    main()

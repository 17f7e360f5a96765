#!/usr/bin/env python3
"""From a one-agent trace (`bench ttft --trace`, or the demo's trace.json): the normal turns of
each lookahead run, against the same step of the synchronous run of the same repeat (one agent
runs the same steps in both modes), split by whether a warm-up chunk was in flight during the
turn. Prints, per strategy and repeat, for each group: how many turns, the median of their
lookahead / sync TTFT ratios, how much longer they took than synchronously (mean) and, for the
turns beside a chunk, the seconds the chunk was in flight (mean).

    python scripts/turns_beside_chunks.py docs/results/diagnostics/keep_recent_demo_rerun_trace.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TurnGroup:
    ratios: list[float] = field(default_factory=list)
    excess_s: list[float] = field(default_factory=list)
    chunk_s: list[float] = field(default_factory=list)

    def add(self, look_s: float, sync_s: float, chunk_s: float) -> None:
        self.ratios.append(look_s / sync_s)
        self.excess_s.append(look_s - sync_s)
        self.chunk_s.append(chunk_s)


# (strategy, repeat, beside a chunk) -> its normal turns
Groups = dict[tuple[str, int, bool], TurnGroup]


def normal_turn_groups(trace: dict[str, Any]) -> Groups:
    runs = {(run["strategy"], run["mode"], run["repeat"]): run for run in trace["runs"]}
    groups: Groups = defaultdict(TurnGroup)
    for (strategy, mode, repeat), run in runs.items():
        sync = runs.get((strategy, "sync", repeat))
        if mode != "lookahead" or sync is None:
            continue
        sync_turns = {turn["step"]: turn for turn in sync["turns"]}
        for turn in run["turns"]:
            same = sync_turns.get(turn["step"])
            if turn["commit"] != "none" or same is None or same["commit"] != "none":
                continue
            chunk_s = turn["wait_s"].get("warm_up", 0.0)
            groups[(strategy, repeat, chunk_s > 0)].add(turn["ttft_s"], same["ttft_s"], chunk_s)
    return dict(groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    args = parser.parse_args()
    with open(args.trace) as file:
        trace = json.load(file)
    for (strategy, repeat, beside), group in sorted(normal_turn_groups(trace).items()):
        where = "with a chunk in flight" if beside else "with none in flight"
        line = (
            f"{strategy} repeat {repeat}: {len(group.ratios)} normal turns {where}, "
            f"median {statistics.median(group.ratios):.3f}x sync, "
            f"{statistics.mean(group.excess_s):+.3f} s against sync (mean)"
        )
        if beside:
            line += f", chunk in flight {statistics.mean(group.chunk_s):.3f} s"
        print(line)


if __name__ == "__main__":
    main()

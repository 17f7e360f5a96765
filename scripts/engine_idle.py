#!/usr/bin/env python3
"""From `bench ttft --trace` / `demo --out` trace files: per run, the seconds no request to the
engine was in flight (`timeline.engine_idle_s`), against the run's wall time. A synchronous run
that leaves little idle time cannot hide a lookahead's extra engine work: what the lookahead
adds beyond that idle time lengthens the run. Also where the idle time lies: in the first and
last tenth of the run (before any lookahead exists; the last agent alone), and how much of it
ended with a warm-up going out within 50 ms (work that was waiting for it).

    python scripts/engine_idle.py docs/results/diagnostics/keep_recent_4agents_no_small_batches_trace.json
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from lookahead_sdk.client.timeline import TimelineEntry, engine_idle_gaps

WAITING_WORK_S = 0.05  # a warm-up sent this soon after an idle gap ends was waiting for it


def entries(run: dict[str, Any]) -> list[TimelineEntry]:
    """The run's requests on its own clock (seconds from its start)."""
    return [
        TimelineEntry(
            request["kind"],
            request["program_id"],
            request["path"],
            request["sent_s"],
            request["first_output_s"],
            request["ended_s"],
        )
        for request in run["requests"]
    ]


def idle_rows(trace: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for run in trace["runs"]:
        wall = run["duration_s"]
        gaps = engine_idle_gaps(entries(run), started_at=0.0, ended_at=wall)
        idle = sum(b - a for a, b in gaps)
        warm_ups = [r["sent_s"] for r in run["requests"] if r["kind"] == "warm_up"]
        rows.append(
            {
                "strategy": run["strategy"],
                "mode": run["mode"],
                "repeat": run["repeat"],
                "wall_s": wall,
                "idle_s": idle,
                "idle_share": idle / wall if wall else 0.0,
                "first_tenth_s": sum(max(0.0, min(b, wall / 10) - a) for a, b in gaps),
                "last_tenth_s": sum(max(0.0, b - max(a, wall * 0.9)) for a, b in gaps),
                "ended_by_warm_up_s": sum(
                    b - a for a, b in gaps if any(b <= t <= b + WAITING_WORK_S for t in warm_ups)
                ),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    args = parser.parse_args()
    print(
        f"{'trace':44} {'strategy':12} {'mode':9} {'rep':>3} {'wall s':>7} {'idle s':>7} "
        f"{'idle':>6} {'first 10%':>9} {'last 10%':>9} {'then warm-up':>12}"
    )
    for path in args.traces:
        with open(path) as file:
            trace = json.load(file)
        name = path.rsplit("/", 1)[-1].removesuffix(".json")
        for row in idle_rows(trace):
            print(
                f"{name[:44]:44} {row['strategy']:12} {row['mode']:9} {row['repeat']:>3} "
                f"{row['wall_s']:7.1f} {row['idle_s']:7.1f} {row['idle_share']:6.1%} "
                f"{row['first_tenth_s']:9.1f} {row['last_tenth_s']:9.1f} "
                f"{row['ended_by_warm_up_s']:12.1f}"
            )


if __name__ == "__main__":
    main()

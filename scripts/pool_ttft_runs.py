#!/usr/bin/env python3
"""Per-run and pooled transform-turn figures of several `lookahead-sdk bench ttft` JSON files.

One run of four agents has 15 offload transform turns, so its p50 moves by 0.3 s from one run
to the next on a shared CPU. Pooling puts every run's raw lists together and takes the p50 of
the union (sync and lookahead from the same runs, so the ratio stays side by side).

    python scripts/pool_ttft_runs.py docs/results/ttft_4agents.json docs/results/ttft_4agents_offload_run*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Lists:
    """The raw lists one strategy contributes, from one run or pooled over several."""

    sync_transform: list[float] = field(default_factory=list)
    lookahead_transform: list[float] = field(default_factory=list)
    lookahead_normal: list[float] = field(default_factory=list)

    def add(self, strategy: dict) -> None:
        self.sync_transform += strategy["sync"]["transform_ttft_s"]
        self.lookahead_transform += strategy["lookahead"]["transform_ttft_s"]
        self.lookahead_normal += strategy["lookahead"]["normal_ttft_s"]

    def row(self, label: str) -> str:
        sync = statistics.median(self.sync_transform)
        lookahead = statistics.median(self.lookahead_transform)
        normal = statistics.median(self.lookahead_normal)
        return (
            f"{label:48s} n={len(self.lookahead_transform):3d}  sync T {sync:6.2f} s  "
            f"lookahead T {lookahead:5.2f} s  ratio {lookahead / sync:.3f}  "
            f"N {normal:5.2f} s  T/N {lookahead / normal:.2f}"
        )


def pool(paths: Sequence[Path]) -> str:
    pooled: dict[str, Lists] = {}
    lines = []
    for path in paths:
        for name, strategy in json.loads(path.read_text())["strategies"].items():
            run = Lists()
            run.add(strategy)
            lines.append(run.row(f"{name} {path.name}"))
            pooled.setdefault(name, Lists()).add(strategy)
    lines += [lists.row(f"{name} pooled") for name, lists in pooled.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="bench ttft JSON files")
    print(pool(parser.parse_args().runs))


if __name__ == "__main__":
    main()

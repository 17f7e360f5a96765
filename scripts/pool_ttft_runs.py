#!/usr/bin/env python3
"""The transform-turn targets of several `lookahead-sdk bench ttft` JSON files, per run, with
the pool of the runs beside them (the same tables `lookahead-sdk report` puts into the docs).

    python scripts/pool_ttft_runs.py docs/results/history/e87096b/ttft_4agents*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from lookahead_sdk.bench.ttft_targets import targets_tables


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="bench ttft JSON files")
    runs = [(path.stem, json.loads(path.read_text())) for path in parser.parse_args().runs]
    console = Console(width=110)
    for table in targets_tables(runs):
        console.print(table)


if __name__ == "__main__":
    main()

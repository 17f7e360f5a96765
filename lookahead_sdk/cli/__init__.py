"""The `lookahead-sdk` command line: each concern registers its own sub-commands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module exposes `register(subparsers)`, adding its sub-command(s) with a `func(args) -> int`.
COMMAND_MODULES: tuple[str, ...] = (
    "lookahead_sdk.cli.engine",
    "lookahead_sdk.cli.demo",
    "lookahead_sdk.cli.bench",
    "lookahead_sdk.cli.scheduling",
    "lookahead_sdk.cli.sim",
    "lookahead_sdk.cli.sglang",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lookahead-sdk",
        description="Lookahead context engineering and program-aware serving for LLM agents.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

"""The `lookahead-sdk` command line: each concern registers its own sub-commands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from lookahead_sdk._version import __version__
from lookahead_sdk.base.args import CommandParser
from lookahead_sdk.errors import ConfigurationError, LookaheadError

# Each module exposes `register(subparsers)`, adding its sub-command(s) with a `func(args) -> int`.
COMMAND_MODULES: tuple[str, ...] = (
    "lookahead_sdk.cli.engine",
    "lookahead_sdk.cli.demo",
    "lookahead_sdk.cli.bench",
    "lookahead_sdk.cli.scheduling",
    "lookahead_sdk.cli.sim",
    "lookahead_sdk.cli.router",
    "lookahead_sdk.cli.sglang",
    "lookahead_sdk.bench.report",
)


# Top-level packages of the optional extras: a command missing one names the extra to install.
EXTRA_OF_PACKAGE: dict[str, str] = {
    "numpy": "calibrate",
    "matplotlib": "plot",
    "fastapi": "router",
    "uvicorn": "router",
    "starlette": "router",
    "aiohttp": "router",
    "langchain": "langchain",
    "langchain_core": "langchain",
    "langchain_openai": "langchain",
    "langgraph": "langchain",
    "llama_index": "llamaindex",
    "autogen_agentchat": "autogen",
    "autogen_core": "autogen",
    "autogen_ext": "autogen",
}


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="lookahead-sdk",
        description="Lookahead context engineering and program-aware serving for LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"lookahead-sdk {__version__}")
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
    except ModuleNotFoundError as error:
        package = (error.name or "").split(".")[0]
        extra = EXTRA_OF_PACKAGE.get(package)
        if extra is None:
            raise
        print(
            f"{args.command_prog}: needs {package}, which is not installed; "
            f"install it with: pip install 'lookahead-sdk[{extra}]'",
            file=sys.stderr,
        )
        return 2
    except LookaheadError as error:
        print(f"{args.command_prog}: {error}", file=sys.stderr)
        # A setting that cannot work is a usage error, as argparse reports one.
        return 2 if isinstance(error, ConfigurationError) else 1


if __name__ == "__main__":
    raise SystemExit(main())

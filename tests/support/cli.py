"""`lookahead-sdk ARGV` run in process, for tests of the command line."""

from __future__ import annotations

import pytest

from lookahead_sdk.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr); argparse's exits included."""
    try:
        code = main(argv)
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err

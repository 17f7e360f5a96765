from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path

import pytest

from lookahead_sdk.cli import engine as cli


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="lookahead-sdk")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_status_without_an_engine_reports_not_running(
    isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("engine", "status", "--port", "18301") == 1
    assert json.loads(capsys.readouterr().out) == {
        "port": 18301,
        "running": False,
        "healthy": False,
    }


def test_start_on_a_taken_port_fails_with_the_fix_in_the_message(
    isolated_cache: Path, free_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", free_port))
        listener.listen()
        assert run("engine", "start", "--port", str(free_port)) == 1
    error = capsys.readouterr().err
    assert f"port {free_port}" in error and "--port" in error


def test_invalid_slots_is_reported_not_raised(
    isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("engine", "start", "--slots", "0") == 1
    assert "slots" in capsys.readouterr().err


def test_stop_without_an_engine_succeeds(
    isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("engine", "stop", "--port", "18302") == 0
    assert "no engine" in capsys.readouterr().out

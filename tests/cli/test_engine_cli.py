from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from lookahead_sdk.cli import engine as cli
from lookahead_sdk.engine import paths


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
    with pytest.raises(SystemExit) as exit:  # rejected when parsed, before anything starts
        run("engine", "start", "--slots", "0")
    assert exit.value.code == 2 and "--slots" in capsys.readouterr().err


def test_stop_without_an_engine_succeeds(
    isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("engine", "stop", "--port", "18302") == 0
    assert "no engine" in capsys.readouterr().out


def test_engine_commands_find_our_engine_behind_a_corrupt_state_file(
    isolated_cache: Path,
    serving_fake_llama_server: subprocess.Popen[bytes],
    free_port: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pid = serving_fake_llama_server.pid
    state_file = paths.state_file(free_port)
    state_file.parent.mkdir(parents=True)
    state_file.write_text('{"pid": ')

    assert run("engine", "status", "--port", str(free_port)) == 0
    captured = capsys.readouterr()
    status = json.loads(captured.out)
    assert status["running"] and status["healthy"] and status["pid"] == pid
    assert str(state_file) in captured.err

    assert run("engine", "start", "--port", str(free_port), "--timeout", "10") == 0
    captured = capsys.readouterr()
    assert f"already running: http://127.0.0.1:{free_port}/v1 (pid {pid}" in captured.out
    assert "another program" not in captured.err

    assert run("engine", "stop", "--port", str(free_port)) == 0
    assert f"engine on port {free_port} stopped" in capsys.readouterr().out
    assert serving_fake_llama_server.wait(timeout=10) is not None


def test_stop_that_cannot_stop_our_engine_fails_saying_why(
    isolated_cache: Path,
    fake_llama_server: subprocess.Popen[bytes],
    free_port: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    with monkeypatch.context() as patch:
        patch.setattr(os, "kill", refuse)
        assert run("engine", "stop", "--port", str(free_port)) == 1
    error = capsys.readouterr().err
    assert f"pid {fake_llama_server.pid}" in error and "not permitted" in error

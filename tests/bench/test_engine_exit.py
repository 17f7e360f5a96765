"""`demo` and `bench ttft` when the embedded engine dies mid-run: one line saying the engine
stopped, naming its log, and a non-zero exit; no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead_sdk import cli
from lookahead_sdk.bench import ttft
from lookahead_sdk.engine import paths
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.server import EngineHandle, stop_engine
from lookahead_sdk.engine.state import is_engine_process, read_state

COMMANDS = {
    "demo": lambda out: ["demo", "--out", str(out)],
    "bench ttft": lambda out: ["bench", "ttft", "--json", str(out / "ttft.json")],
}


def engine_stopped_line(command: str, pid: int, port: int) -> str:
    return (
        f"lookahead-sdk {command}: the engine stopped: llama-server (pid {pid}) on "
        f"port {port} exited during the run; see its log {paths.engine_log_file(port)}"
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_an_engine_dying_mid_run_ends_the_command_in_one_line(
    command: str,
    isolated_cache: Path,
    fake_llama_server: subprocess.Popen[bytes],
    free_port: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    handle = EngineHandle(
        pid=fake_llama_server.pid,
        config=EngineConfig(port=free_port),
        model_path=Path("model.gguf"),
        log_path=paths.engine_log_file(free_port),
        started_at=time.time(),
    )

    def start(engine: ttft.EmbeddedEngine) -> str:
        engine.handle = handle
        return handle.base_url

    async def engine_dies(*args: Any, **kwargs: Any) -> None:
        fake_llama_server.kill()
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.")

    monkeypatch.setattr(ttft.EmbeddedEngine, "restart", start)
    monkeypatch.setattr(
        ttft, "server_facts", lambda url: {"model": "m", "window_tokens": 2048, "engine": "x"}
    )
    monkeypatch.setattr(ttft, "run_agents", engine_dies)

    async def no_warm_up(*args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(ttft, "warm_client_stack", no_warm_up)

    argv = [*COMMANDS[command](tmp_path), "--port", str(free_port), "--strategies", "keep_recent"]
    assert cli.main(argv) == 1
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors[-1] == engine_stopped_line(command, fake_llama_server.pid, free_port)


def test_a_failure_while_the_engine_runs_is_not_blamed_on_it(
    isolated_cache: Path,
    fake_llama_server: subprocess.Popen[bytes],
    free_port: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handle = EngineHandle(
        pid=fake_llama_server.pid,
        config=EngineConfig(port=free_port),
        model_path=Path("model.gguf"),
        log_path=paths.engine_log_file(free_port),
        started_at=time.time(),
    )
    assert handle.exit_error(wait_s=0.1) is None
    fake_llama_server.kill()
    fake_llama_server.wait()
    stopped = handle.exit_error(wait_s=0.1)
    assert stopped is not None and str(paths.engine_log_file(free_port)) in str(stopped)


def test_the_first_run_gets_a_fresh_engine_not_one_left_on_the_port(
    isolated_cache: Path,
    fake_llama_server: subprocess.Popen[bytes],
    free_port: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine an earlier (or killed) bench left on the port still holds that run's prompts
    in its RAM prompt cache, which erasing its slots keeps: the bench's first run would find
    its prompts cached. It is stopped and a fresh one started."""
    from lookahead_sdk.engine import server

    started: list[int | None] = []

    def start(config: EngineConfig) -> EngineHandle:
        # The one left there has exited by now (an exiting process leaves /proc a moment
        # before its parent can reap it: wait for that, do not sample it).
        try:
            started.append(fake_llama_server.wait(timeout=10))
        except subprocess.TimeoutExpired:
            started.append(None)
        return EngineHandle(
            pid=os.getpid(),
            config=config,
            model_path=Path("model.gguf"),
            log_path=paths.engine_log_file(free_port),
            started_at=time.time(),
        )

    monkeypatch.setattr(server, "ensure_engine", start)
    ttft.EmbeddedEngine(agents=1, port=free_port).restart()
    assert started and started[0] is not None, "the engine left on the port should be stopped"


# -- the real engine, killed after the first turn ------------------------------------------------
def wait_for(condition: Any, what: str, process: subprocess.Popen[str], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert process.poll() is None, f"the command ended before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:.0f} s"
        time.sleep(0.1)
    return value


def tokens_predicted(base_url: str) -> float:
    """llama-server's count of generated tokens (it grows when a request completes)."""
    try:
        metrics = httpx.get(f"{base_url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    return next(
        (
            float(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith("llamacpp:tokens_predicted_total ")
        ),
        0.0,
    )


@pytest.mark.engine
@pytest.mark.parametrize("command", COMMANDS)
def test_killing_the_real_engine_after_the_first_turn(
    command: str, free_port: int, tmp_path: Path
) -> None:
    argv = [
        *COMMANDS[command](tmp_path),
        *("--port", str(free_port), "--strategies", "keep_recent", "--steps", "12"),
        *("--tool-latency", "1"),
    ]
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "lookahead_sdk", *argv],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    try:
        state = wait_for(
            lambda: (found := read_state(free_port)) and is_engine_process(found) and found,
            "engine start",
            process,
            timeout_s=300,
        )
        base_url = f"http://127.0.0.1:{free_port}"
        wait_for(lambda: tokens_predicted(base_url) > 0, "first turn", process, timeout_s=300)
        os.kill(state.pid, signal.SIGKILL)
        assert process.wait(timeout=120) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        stop_engine(free_port)
    errors = stderr_path.read_text()
    assert "Traceback" not in errors
    assert errors.strip().splitlines()[-1] == engine_stopped_line(command, state.pid, free_port)

"""Engine management without a real llama-server: errors, state handling, signalling."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from lookahead_sdk.engine import model, paths
from lookahead_sdk.engine.build import EngineBinaries
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.errors import (
    EngineConflictError,
    EngineStopError,
    ModelNotFoundError,
    PortInUseError,
)
from lookahead_sdk.engine.model import INSTALL_HINT
from lookahead_sdk.engine.server import (
    config_from_command,
    engine_status,
    ensure_engine,
    port_in_use,
    server_command,
    start_engine,
    stop_engine,
)
from lookahead_sdk.engine.state import EngineState, read_state, write_state


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def record(pid: int, config: EngineConfig) -> None:
    write_state(
        EngineState(
            pid=pid,
            port=config.port,
            config=config,
            binary="llama-server",
            model_path="model.gguf",
            log_path=str(paths.engine_log_file(config.port)),
            started_at=time.time(),
        )
    )


def test_port_taken_by_another_program_gives_a_clear_error(
    isolated_cache: Path, free_port: int
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", free_port))
        listener.listen()
        assert port_in_use("127.0.0.1", free_port)
        with pytest.raises(PortInUseError, match=rf"port {free_port}.*--port"):
            start_engine(EngineConfig(port=free_port), show_progress=False)
        with pytest.raises(PortInUseError):
            ensure_engine(EngineConfig(port=free_port), show_progress=False)
    assert not port_in_use("127.0.0.1", free_port)


def test_missing_model_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError, match=INSTALL_HINT.replace(".", r"\.")):
        model.shipped_model_path()


def test_package_without_the_gguf_names_where_it_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(ModelNotFoundError, match=str(tmp_path)):
        model.model_path("q4_1")


def test_unknown_quantization_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="quantization"):
        model.model_path("q2_k")


def test_server_command_gives_each_slot_its_context() -> None:
    config = EngineConfig(port=9001, slots=3, ctx_per_slot=2048, threads=2)
    command = server_command(config, EngineBinaries(Path("srv"), Path("q")), Path("m.gguf"))

    def value(option: str) -> str:
        return command[command.index(option) + 1]

    assert int(value("--ctx-size")) == 3 * 2048
    assert value("--parallel") == "3"
    assert value("--port") == "9001"
    assert value("--flash-attn") == "off"
    assert value("--batch-size") == "128"
    assert {"--jinja", "--metrics", "--slots", "--cache-prompt"} <= set(command)
    # Otherwise each task llama-server starts first copies every changed idle slot (a
    # lookahead branch, the live context while a warm-up runs) into its RAM prompt cache.
    assert "--no-cache-idle-slots" in command


def test_stop_without_state_does_nothing(isolated_cache: Path) -> None:
    assert stop_engine(18201) is False
    assert engine_status(18201) is None


def test_stop_never_signals_a_pid_that_is_not_our_llama_server(isolated_cache: Path) -> None:
    # The recorded pid now belongs to another program (this test process).
    record(os.getpid(), EngineConfig(port=18202))
    assert stop_engine(18202) is False
    assert pid_alive(os.getpid())
    assert read_state(18202) is None  # the stale record is cleaned up


def test_stop_terminates_the_recorded_llama_server(
    isolated_cache: Path, fake_llama_server: subprocess.Popen[bytes], free_port: int
) -> None:
    record(fake_llama_server.pid, EngineConfig(port=free_port))
    status = engine_status(free_port)
    assert status is not None and status.running and not status.healthy
    assert stop_engine(free_port) is True
    assert fake_llama_server.wait(timeout=10) is not None
    assert read_state(free_port) is None


def test_stop_removes_the_engines_slot_copies_and_only_its_own(
    isolated_cache: Path, fake_llama_server: subprocess.Popen[bytes], free_port: int
) -> None:
    ours, other = paths.slot_save_dir(free_port), paths.slot_save_dir(free_port + 1)
    for directory in (ours, other):
        directory.mkdir(parents=True)
        (directory / "branch-1.bin").write_bytes(b"kv" * 1000)
    record(fake_llama_server.pid, EngineConfig(port=free_port))
    assert stop_engine(free_port) is True
    assert not ours.exists()
    assert (other / "branch-1.bin").read_bytes() == b"kv" * 1000


def test_ensure_refuses_our_engine_with_another_config(
    isolated_cache: Path, fake_llama_server: subprocess.Popen[bytes], free_port: int
) -> None:
    record(fake_llama_server.pid, EngineConfig(port=free_port, slots=2))
    with pytest.raises(EngineConflictError, match=r"slots: running 2, requested 4.*engine stop"):
        ensure_engine(EngineConfig(port=free_port, slots=4), show_progress=False)
    with pytest.raises(EngineConflictError, match="already runs"):
        start_engine(EngineConfig(port=free_port, slots=2), show_progress=False)
    assert fake_llama_server.poll() is None  # refusing does not touch the running engine


def test_stale_state_is_dropped_before_starting(
    isolated_cache: Path, free_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    record(finished.pid, EngineConfig(port=free_port))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(
        "lookahead_sdk.engine.server.ensure_binaries",
        lambda **_: EngineBinaries(Path("srv"), Path("q")),
    )
    with pytest.raises(ModelNotFoundError):
        ensure_engine(EngineConfig(port=free_port), show_progress=False)
    assert read_state(free_port) is None


def state_file_text(kind: str, port: int) -> str:
    """A state file for ``port`` spoiled in the way ``kind`` names."""
    data = EngineState(
        pid=1,
        port=port,
        config=EngineConfig(port=port),
        binary="llama-server",
        model_path="model.gguf",
        log_path=str(paths.engine_log_file(port)),
        started_at=time.time(),
    ).to_dict()
    if kind == "truncated JSON":
        return json.dumps(data)[:40]
    if kind == "not an object":
        return json.dumps([data])
    if kind == "wrong types":
        data["pid"], data["config"] = "1234", "q8_0"
    elif kind == "missing fields":
        del data["config"], data["log_path"]
    elif kind == "a pid that is not ours":
        data["pid"] = os.getpid()
    return json.dumps(data)


CORRUPT = ["truncated JSON", "not an object", "wrong types", "missing fields"]


def spoil_state(kind: str, port: int) -> Path:
    target = paths.state_file(port)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(state_file_text(kind, port))
    return target


@pytest.mark.parametrize("kind", [*CORRUPT, "a pid that is not ours"])
def test_a_bad_state_file_does_not_orphan_our_running_engine(
    isolated_cache: Path,
    fake_llama_server: subprocess.Popen[bytes],
    free_port: int,
    kind: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    state_file = spoil_state(kind, free_port)
    status = engine_status(free_port)
    assert status is not None and status.running and status.pid == fake_llama_server.pid
    assert str(state_file) in caplog.text  # reported, naming the file
    repaired = read_state(free_port)
    assert repaired is not None and repaired.pid == fake_llama_server.pid
    assert stop_engine(free_port) is True
    assert fake_llama_server.wait(timeout=10) is not None
    assert read_state(free_port) is None


@pytest.mark.parametrize("kind", CORRUPT)
def test_a_corrupt_state_file_without_an_engine_is_reported_and_removed(
    isolated_cache: Path, free_port: int, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    state_file = spoil_state(kind, free_port)
    assert stop_engine(free_port) is False
    assert not state_file.exists()
    assert str(state_file) in caplog.text and "removed" in caplog.text


def test_start_reuses_our_engine_behind_a_corrupt_state_file(
    isolated_cache: Path, serving_fake_llama_server: subprocess.Popen[bytes], free_port: int
) -> None:
    spoil_state("truncated JSON", free_port)
    handle = ensure_engine(EngineConfig(port=free_port), timeout_s=10, show_progress=False)
    assert handle.reused and handle.pid == serving_fake_llama_server.pid
    with pytest.raises(EngineConflictError, match="already runs"):
        start_engine(EngineConfig(port=free_port), show_progress=False)
    assert serving_fake_llama_server.poll() is None


def test_stop_says_why_it_cannot_stop_our_engine(
    isolated_cache: Path,
    fake_llama_server: subprocess.Popen[bytes],
    free_port: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record(fake_llama_server.pid, EngineConfig(port=free_port))

    def refuse(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    with (
        monkeypatch.context() as patch,
        pytest.raises(EngineStopError, match=rf"pid {fake_llama_server.pid}.*not permitted"),
    ):
        patch.setattr(os, "kill", refuse)
        stop_engine(free_port)
    assert fake_llama_server.poll() is None
    assert read_state(free_port) is not None  # it still runs: the record stays


def test_the_config_is_read_back_from_the_server_command() -> None:
    config = EngineConfig(
        host="0.0.0.0",
        port=9002,
        slots=3,
        ctx_per_slot=2048,
        threads=2,
        quantization="q4_1",
        cache_ram_mib=0,
        slot_copies=False,
        flash_attn="on",
        batch_tokens=256,
        extra_args=("--temp", "0"),
    )
    for variant in (config, EngineConfig(port=9003)):
        model_file = Path(f"/m/SmolLM2-135M-Instruct.{variant.quantization.upper()}.gguf")
        command = server_command(variant, EngineBinaries(Path("srv"), Path("q")), model_file)
        assert config_from_command(command) == variant.resolved()

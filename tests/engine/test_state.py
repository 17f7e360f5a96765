from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from lookahead_sdk.engine import paths
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.errors import EngineStateFileError
from lookahead_sdk.engine.state import (
    EngineState,
    find_engine_process,
    is_engine_process,
    process_command_line,
    read_state,
    remove_state,
    write_state,
)


def make_state(pid: int, port: int, config: EngineConfig | None = None) -> EngineState:
    return EngineState(
        pid=pid,
        port=port,
        config=config or EngineConfig(port=port),
        binary="/somewhere/llama-server",
        model_path="/somewhere/model.gguf",
        log_path="/somewhere/engine.log",
        started_at=time.time(),
    )


def test_state_round_trips_through_the_cache_dir(isolated_cache: Path) -> None:
    state = make_state(pid=1234, port=18123, config=EngineConfig(port=18123, slots=3, threads=2))
    written = write_state(state)
    assert written.is_relative_to(isolated_cache)
    assert read_state(18123) == state
    remove_state(18123)
    assert read_state(18123) is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not JSON"),
        ("", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"pid": 1}', "'port' is missing"),
        ('{"pid": "1234", "port": 18124}', "'pid' must be"),
        ('{"pid": -1, "port": 18124}', "'pid' must be"),
    ],
)
def test_an_unreadable_state_file_is_an_error_naming_it(
    isolated_cache: Path, content: str, problem: str
) -> None:
    target = paths.state_file(18124)
    target.parent.mkdir(parents=True)
    target.write_text(content)
    with pytest.raises(EngineStateFileError, match=re.escape(problem)) as error:
        read_state(18124)
    assert str(target) in str(error.value)


def test_a_state_file_with_a_bad_config_is_an_error_naming_the_field(
    isolated_cache: Path,
) -> None:
    data = make_state(pid=1234, port=18128).to_dict()
    data["config"]["slots"] = "four"
    paths.state_file(18128).parent.mkdir(parents=True)
    paths.state_file(18128).write_text(json.dumps(data))
    with pytest.raises(EngineStateFileError, match="slots"):
        read_state(18128)


def test_missing_state_reads_as_none(isolated_cache: Path) -> None:
    assert read_state(18125) is None


def test_live_non_llama_process_is_not_taken_for_the_engine(isolated_cache: Path) -> None:
    # Our own pid is alive but is Python, as after pid reuse by an unrelated program.
    assert not is_engine_process(make_state(pid=os.getpid(), port=18126))


def test_exited_process_is_not_the_engine(isolated_cache: Path) -> None:
    process = subprocess.Popen(["true"])
    process.wait()
    assert process_command_line(process.pid) is None
    assert not is_engine_process(make_state(pid=process.pid, port=18127))


def test_fake_llama_server_is_recognised_only_on_its_port(
    fake_llama_server: subprocess.Popen[bytes], free_port: int
) -> None:
    assert is_engine_process(make_state(pid=fake_llama_server.pid, port=free_port))
    assert not is_engine_process(make_state(pid=fake_llama_server.pid, port=free_port + 1))


def test_our_llama_server_is_found_in_the_process_table_by_its_port(
    fake_llama_server: subprocess.Popen[bytes], free_port: int
) -> None:
    found = find_engine_process(free_port)
    assert found is not None and found[0] == fake_llama_server.pid
    assert find_engine_process(free_port + 1) is None


def test_a_llama_server_outside_our_cache_is_not_ours(
    fake_llama_server: subprocess.Popen[bytes], free_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(paths.CACHE_ENV_VAR, "/elsewhere")
    assert find_engine_process(free_port) is None


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="zombie detection reads /proc")
def test_zombie_is_not_alive() -> None:
    process = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{process.pid}").exists():
        if process_command_line(process.pid) is None:
            break
        time.sleep(0.01)
    assert process_command_line(process.pid) is None  # exited but not yet reaped
    process.wait()

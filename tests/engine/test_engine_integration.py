"""The real llama-server: start, chat, inspect slots, reuse, stop (builds it first if needed)."""

from __future__ import annotations

import time

import httpx
import pytest
from openai import OpenAI

from lookahead_sdk.engine import (
    EngineConfig,
    EngineStartError,
    engine_status,
    ensure_engine,
    stop_engine,
)
from lookahead_sdk.engine.server import port_in_use
from lookahead_sdk.engine.state import process_command_line, read_state
from tests.support.engine import engine_fixture

pytestmark = pytest.mark.engine


def wait_until_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process_command_line(pid) is None:
            return True
        time.sleep(0.05)
    return False


def test_engine_lifecycle_with_a_real_chat_completion(free_port: int) -> None:
    config = EngineConfig(port=free_port, slots=2, ctx_per_slot=2048)
    handle = ensure_engine(config, show_progress=False)
    try:
        assert not handle.reused
        client = OpenAI(base_url=handle.openai_base_url, api_key="unused")
        reply = client.chat.completions.create(
            model=handle.model,
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=8,
            temperature=0,
        )
        assert reply.usage is not None and reply.usage.completion_tokens >= 1
        assert reply.choices[0].message.content

        slots = httpx.get(f"{handle.base_url}/slots", timeout=10).json()
        assert [slot["id"] for slot in slots] == [0, 1]
        assert all(slot["n_ctx"] == config.ctx_per_slot for slot in slots)

        again = ensure_engine(config, show_progress=False)
        assert again.reused and again.pid == handle.pid

        # A session fixture finding the engine running reuses it and leaves it running.
        fixture = engine_fixture(port=free_port, slots=2, ctx_per_slot=2048)
        assert next(fixture).pid == handle.pid
        fixture.close()
        status = engine_status(free_port)
        assert status is not None and status.healthy and status.pid == handle.pid
    finally:
        stopped = stop_engine(free_port)
    assert stopped
    assert wait_until_gone(handle.pid)
    assert read_state(free_port) is None
    assert not port_in_use("127.0.0.1", free_port)


def test_server_exiting_during_startup_reports_its_log(free_port: int) -> None:
    config = EngineConfig(port=free_port, slots=1, extra_args=("--no-such-option",))
    with pytest.raises(EngineStartError, match=r"(?s)exited during startup.*no-such-option"):
        ensure_engine(config, show_progress=False)
    assert read_state(free_port) is None

"""A pytest fixture that serves the embedded engine to a whole test session.

Register it from a conftest with ``pytest_plugins = ["tests.support.engine"]`` (or import
``embedded_engine``). The engine starts once per session on a dedicated port (default 18089,
override with ``$LOOKAHEAD_SDK_TEST_ENGINE_PORT``) and is stopped at the end only if this session
started it; an engine already running there with the same config is reused and left running.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.server import EngineHandle, ensure_engine

TEST_ENGINE_PORT_ENV = "LOOKAHEAD_SDK_TEST_ENGINE_PORT"
DEFAULT_TEST_ENGINE_PORT = 18089
DEFAULT_TEST_ENGINE_SLOTS = 4


def fresh_prompt(units: int) -> str:
    """A prompt of ~3 tokens per unit under a fresh prefix, so no slot or host cache holds any
    of it."""
    return f"{uuid.uuid4().hex} " + " ".join(f"item{i % 97} is next" for i in range(units))


def engine_fixture(
    port: int | None = None, slots: int = DEFAULT_TEST_ENGINE_SLOTS, **config: Any
) -> Iterator[EngineHandle]:
    """Generator for a fixture: ensure the engine, yield its handle, stop it if we started it."""
    if port is None:
        port = int(os.environ.get(TEST_ENGINE_PORT_ENV, DEFAULT_TEST_ENGINE_PORT))
    handle = ensure_engine(EngineConfig(port=port, slots=slots, **config))
    try:
        yield handle
    finally:
        if not handle.reused:
            handle.stop()


@pytest.fixture(scope="session")
def embedded_engine() -> Iterator[EngineHandle]:
    """The embedded engine (4 slots) shared by the test session; use ``.openai_base_url``."""
    yield from engine_fixture()

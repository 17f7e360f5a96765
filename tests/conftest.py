"""Shared fixtures. The embedded engine fixture starts one real llama-server per test session."""

from __future__ import annotations

import os

import pytest

from lookahead_sdk.base.tokens import ApproxTokenCounter, CachedTokenCounter
from lookahead_sdk.engine.config import ENGINE_THREADS_ENV, usable_cpus

pytest_plugins = ["tests.support.engine", "tests.support.engine_fixtures"]

# Every engine the tests start (in this process or through a command) leaves one CPU to the
# tests themselves and to whatever else the CI machine runs: ggml's spinning threads slow
# 25-90x when a core they count on is busy (docs/engine.md, "Threads"). The tests assert
# behaviour, not speed.
os.environ.setdefault(ENGINE_THREADS_ENV, str(max(1, usable_cpus() - 1)))


@pytest.fixture
def approx_counter() -> CachedTokenCounter:
    return CachedTokenCounter(ApproxTokenCounter())

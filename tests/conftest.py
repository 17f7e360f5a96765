"""Shared fixtures. The embedded engine fixture starts one real llama-server per test session."""

from __future__ import annotations

import pytest

from lookahead_sdk.base.tokens import ApproxTokenCounter, CachedTokenCounter

pytest_plugins = ["tests.support.engine", "tests.support.engine_fixtures"]


@pytest.fixture
def approx_counter() -> CachedTokenCounter:
    return CachedTokenCounter(ApproxTokenCounter())

"""Shared fixtures. The embedded engine fixture starts one real llama-server per test session."""

from __future__ import annotations

import pytest

pytest_plugins = ["lookahead_sdk.engine.testing"]

from lookahead_sdk.tokens import ApproxTokenCounter, CachedTokenCounter


@pytest.fixture
def approx_counter() -> CachedTokenCounter:
    return CachedTokenCounter(ApproxTokenCounter())

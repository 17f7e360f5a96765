"""One `RuntimeConfig` for the runtime, the reference agent and every adapter: each setting is
checked once, by name, before anything is built."""

from __future__ import annotations

import asyncio

import pytest

from lookahead_sdk import (
    ConfigurationError,
    LookaheadRuntime,
    RequestTags,
    RuntimeConfig,
    SyncLookaheadRuntime,
)
from lookahead_sdk.strategies import KeepRecent, Summarize

from .policies import RecordingWarmer


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"mode": "eager"}, "mode must be 'lookahead' or 'sync'"),
        ({"window_tokens": 0}, "window_tokens must be"),
        ({"window_tokens": "8192"}, "window_tokens must be"),
        ({"window_tokens": True}, "window_tokens must be"),
        ({"summarizer": object()}, "summarizer must be a CompletionClient"),
        ({"warmer": object()}, r"warmer must be a Warmer \(subclass lookahead_sdk\.Warmer\)"),
        ({"tags": "agent-7"}, "tags must be a RequestTags"),
        ({"tags": RequestTags()}, "tags.program_id is required"),
        ({"token_counter": 3}, "token_counter must have count_text"),
        ({"transform_timeout_s": "10"}, "transform_timeout_s must be a finite number > 0"),
        ({"transform_timeout_s": 0}, "transform_timeout_s must be a finite number > 0"),
        ({"sync_transform_timeout_s": -1}, "sync_transform_timeout_s must be"),
        ({"warmup_wait_timeout_s": float("inf")}, "warmup_wait_timeout_s must be"),
        ({"warm_suffix": "yes"}, "warm_suffix must be True or False"),
    ],
)
def test_a_bad_setting_is_named_with_its_fix(fields: dict, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RuntimeConfig(**fields)
    with pytest.raises(ConfigurationError, match=match):  # the same check through a runtime
        LookaheadRuntime(KeepRecent(), **fields)


def test_overrides_replace_fields_and_unknown_names_are_refused() -> None:
    base = RuntimeConfig(window_tokens=4096)
    assert base.with_overrides(mode="sync") == RuntimeConfig(window_tokens=4096, mode="sync")
    with pytest.raises(ConfigurationError, match=r"unknown runtime setting.*window"):
        base.with_overrides(window=4096)
    with pytest.raises(ConfigurationError, match="config must be a RuntimeConfig"):
        LookaheadRuntime(KeepRecent(), {"window_tokens": 4096})  # type: ignore[arg-type]


def test_a_policy_that_is_not_a_policy_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="needs a policy"):
        LookaheadRuntime()
    with pytest.raises((ConfigurationError, TypeError), match="policy"):
        LookaheadRuntime("summarize")  # type: ignore[arg-type]


def test_runtime_and_sync_runtime_take_the_same_config(approx_counter) -> None:
    warmer = RecordingWarmer()
    config = RuntimeConfig(window_tokens=4096, token_counter=approx_counter, warmer=warmer)

    async def build() -> LookaheadRuntime:
        return LookaheadRuntime(KeepRecent(), config, mode="sync")

    runtime = asyncio.run(build())
    assert (
        runtime.mode == "sync" and runtime.warmer is warmer and runtime.config.window_tokens == 4096
    )
    with SyncLookaheadRuntime(KeepRecent(), config) as sync_runtime:
        assert sync_runtime.runtime.config == config


def test_adapters_validate_their_config_at_construction() -> None:
    from lookahead_sdk.adapters.langchain import LookaheadMiddleware

    with pytest.raises(ConfigurationError, match="window_tokens"):
        LookaheadMiddleware(Summarize(), window_tokens=-5)
    middleware = LookaheadMiddleware(Summarize(), RuntimeConfig(window_tokens=4096))
    assert middleware.settings.config.window_tokens == 4096
    swapped = middleware.with_context_policy(KeepRecent())
    assert swapped.settings.config == middleware.settings.config  # a swap keeps the settings

"""Bad input gets a clear error naming the field and the fix, and changes nothing."""

from __future__ import annotations

import pytest

from lookahead_sdk import LookaheadRuntime, MainState, Pipeline, context_policy
from lookahead_sdk.strategies import Isolate, KeepRecent, Offload, Summarize

from .policies import CountingPolicy


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Summarize(lookahead_at=0.5, hard_limit=0.4), "lookahead_at"),
        (lambda: Summarize(lookahead_at=4000, hard_limit=3000), "lookahead_at"),
        (lambda: KeepRecent(budget=-10), "budget"),
        (lambda: Offload(threshold=-1), "threshold"),
        (lambda: Offload(threshold=1.5), "threshold"),
        (lambda: KeepRecent(max_turns=0), "max_turns"),
        (lambda: Summarize(summary_tokens=0), "summary_tokens"),
        (lambda: Summarize(hard_limit="15K"), "hard_limit"),
        (lambda: Isolate(subagent_system=42), "subagent_system"),
        (lambda: Pipeline(), "at least one"),
        (lambda: Pipeline(Offload(), "summarize"), "ContextPolicy"),
        (lambda: Pipeline(Offload(), Isolate(subagent_system="x")), "spawning"),
        (lambda: Pipeline(Isolate(subagent_system="x")), "spawning"),
        (lambda: Summarize(instruction=None), "instruction"),
        (lambda: Summarize(summary_tokens=True), "summary_tokens"),
        (lambda: Summarize(lead_turns=float("nan")), "lead_turns"),
        (lambda: KeepRecent(lead_turns="6"), "lead_turns"),
        (lambda: KeepRecent(max_turns=True), "max_turns"),
        (lambda: Offload(lead_turns=None), "lead_turns"),
        (lambda: Offload(commit_ahead="no"), "commit_ahead"),
        (lambda: Isolate(subagent_system="x", chunk_chars="64"), "chunk_chars"),
        (lambda: Isolate(subagent_system="x", delegate_tool=5), "delegate_tool"),
        (lambda: context_policy("summarize"), "ContextPolicy"),
    ],
)
def test_bad_settings_name_the_field(build, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        build()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"policy": Summarize(lookahead_at=3000, hard_limit=3500), "window_tokens": 2048},
            "hard_limit",
        ),
        ({"policy": Summarize(lookahead_at=3000), "window_tokens": 4096}, "lookahead_at"),
        ({"policy": KeepRecent(budget=5000, hard_limit=0.5), "window_tokens": 8192}, "budget"),
        ({"policy": CountingPolicy(), "window_tokens": -5}, "window_tokens"),
        ({"policy": CountingPolicy(), "mode": "eager"}, "mode"),
        ({"policy": CountingPolicy(), "transform_timeout_s": 0}, "transform_timeout_s"),
        ({}, "policy"),
    ],
)
def test_bad_runtime_settings_name_the_field(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LookaheadRuntime(**kwargs)


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ("hello", r"messages\[1\] must be a dict"),
        ({"content": "x"}, r"messages\[1\]\.role"),
        ({"role": "robot", "content": "x"}, r"messages\[1\]\.role"),
        ({"role": "user", "content": 5}, r"messages\[1\]\.content"),
        ({"role": "tool", "content": "x"}, r"messages\[1\]\.tool_call_id"),
        ({"role": "user", "content": "x", "tool_calls": []}, r"messages\[1\]\.tool_calls"),
        ({"role": "assistant", "tool_calls": [{"function": {}}]}, r"messages\[1\]\.tool_calls"),
        ({"role": "user"}, r"messages\[1\]\.content"),
    ],
)
def test_malformed_messages_are_rejected_and_nothing_is_appended(
    message, match: str, approx_counter
) -> None:
    state = MainState([{"role": "user", "content": "ok"}], token_counter=approx_counter)
    version = state.version
    with pytest.raises((ValueError, TypeError), match=match):
        state.append(message)
    assert len(state) == 1 and state.version == version


def test_messages_must_be_a_list() -> None:
    from lookahead_sdk.base.messages import validate_messages

    with pytest.raises(TypeError, match="list"):
        validate_messages({"role": "user", "content": "x"})

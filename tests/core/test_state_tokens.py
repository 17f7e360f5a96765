from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk import MainState
from lookahead_sdk.base.messages import content_text
from lookahead_sdk.base.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    ApproxTokenCounter,
    CachedTokenCounter,
    TiktokenCounter,
    auto_token_counter,
)

COUNTER = CachedTokenCounter(ApproxTokenCounter())
message = st.builds(
    lambda role, text: {"role": role, "content": text},
    st.sampled_from(["user", "assistant", "system"]),
    st.text(max_size=200),
)


@settings(max_examples=100, deadline=None)
@given(
    first=st.lists(message, max_size=20),
    edits=st.lists(st.tuples(st.integers(0, 40), message), max_size=5),
    more=st.lists(message, max_size=10),
)
def test_incremental_bookkeeping_matches_a_full_recount(first, edits, more) -> None:
    state = MainState(first, token_counter=COUNTER)
    versions = [state.version]
    for index, replacement in edits:
        if len(state):
            state.edit(index % len(state), replacement)
            versions.append(state.version)
    state.append(*more)
    if more:
        versions.append(state.version)
    fresh = MainState(list(state.messages), token_counter=COUNTER)
    assert (
        state.tokens
        == fresh.tokens
        == sum(
            COUNTER.count_text(content_text(m)) + MESSAGE_OVERHEAD_TOKENS for m in state.messages
        )
    )
    assert all(
        state.prefix_signature(i) == fresh.prefix_signature(i) for i in range(len(state) + 1)
    )
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


def test_signatures_identify_prefixes_and_detect_edits() -> None:
    state = MainState(
        [{"role": "user", "content": str(i)} for i in range(5)], token_counter=COUNTER
    )
    before = [state.prefix_signature(i) for i in range(6)]
    state.edit(3, {"role": "user", "content": "changed"})
    after = [state.prefix_signature(i) for i in range(6)]
    assert before[:4] == after[:4] and all(
        b != a for b, a in zip(before[4:], after[4:], strict=True)
    )
    assert state.prefix_signature(99) is None


def test_callers_cannot_mutate_history_behind_its_back() -> None:
    original = {"role": "user", "content": "text", "meta": {"k": [1]}}
    state = MainState([original], token_counter=COUNTER)
    signature = state.prefix_signature(1)
    original["content"] = "mutated"
    original["meta"]["k"].append(2)
    assert state.messages[0]["content"] == "text" and state.prefix_signature(1) == signature


def test_turns_count_assistant_messages_and_survive_a_commit() -> None:
    state = MainState([{"role": "user", "content": "t"}], token_counter=COUNTER)
    state.append(
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"},
    )
    assert state.turn == 2
    state.replace([{"role": "assistant", "content": "summary"}])
    assert state.turn == 2


def test_tiktoken_counter_loads_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args, **kwargs):
        raise AssertionError("token counting tried to reach the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    counter = TiktokenCounter()
    text = "def add(a, b):\n    return a + b  # <|endoftext|> stays text"
    assert counter.count_text(text) == len(
        reference_cl100k(monkeypatch).encode(text, disallowed_special=())
    )


def reference_cl100k(monkeypatch: pytest.MonkeyPatch):
    """tiktoken's own cl100k_base, loaded through its cache directory (the copy llama-index ships)."""
    import tiktoken

    from lookahead_sdk.base.tokens import find_tiktoken_file

    path = find_tiktoken_file("cl100k_base")
    assert path is not None
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(path.parent))
    return tiktoken.get_encoding("cl100k_base")


def test_auto_counter_falls_back_without_a_server_or_bpe_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("lookahead_sdk.base.tokens.find_tiktoken_file", lambda encoding: None)
    counter = auto_token_counter("http://127.0.0.1:9")  # nothing listens there
    assert counter.name == "approx-bytes/4"
    assert counter.count_text("abcdefgh") == 2

"""A delegation that streamed but did not end as one (the model called another tool, the stream
was dropped and retried later): the sub-agent context its lookahead made belongs to the history
of then. A later delegation must spawn the context a synchronous commit makes of the history of
now (Isolate's prompt may be a function of the main history)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from lookahead_sdk import CommitKind, CommitOutcome, LookaheadRuntime, RuntimeConfig
from lookahead_sdk.base.messages import Message
from lookahead_sdk.core.config import RuntimeMode
from lookahead_sdk.core.state import LookaheadStatus
from lookahead_sdk.errors import InvalidInputError
from lookahead_sdk.strategies import Isolate

from ..core.policies import RecordingWarmer

HISTORY: list[Message] = [
    {"role": "system", "content": "main"},
    {"role": "user", "content": "review m.py"},
]
STREAMED = '{"instruction": "Review m.py'


def subagent_prompt(history: Sequence[Message]) -> str:
    return f"You review code. The main agent saw {len(history)} messages, last: {history[-1]}"


def call(name: str, call_id: str, arguments: dict[str, str]) -> Message:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


async def delegate(
    mode: RuntimeMode, counter: object, *, abandoned: bool, streamed_again: bool
) -> CommitOutcome:
    runtime = LookaheadRuntime(
        Isolate(subagent_system=subagent_prompt),
        RuntimeConfig(mode=mode, token_counter=counter, warmer=RecordingWarmer()),
        messages=HISTORY,
    )
    async with runtime:
        if abandoned:
            # The model starts a delegation, but the turn ends as a read.
            await runtime.stream_boundary(STREAMED, tool_name="delegate")
            await runtime.settle(5)
            runtime.append(
                call("read", "r1", {"path": "m.py"}),
                {"role": "tool", "tool_call_id": "r1", "content": "def f(): pass"},
            )
            await runtime.boundary()
            await runtime.settle(5)
        if streamed_again:
            await runtime.stream_boundary(STREAMED, tool_name="delegate")
            await runtime.settle(5)
        runtime.append(call("delegate", "d1", {"instruction": "Review m.py for bugs"}))
        return await runtime.commit()


@pytest.mark.parametrize("streamed_again", [True, False])
async def test_a_delegation_after_an_abandoned_one_spawns_what_sync_spawns(
    approx_counter, streamed_again: bool
) -> None:
    synchronous = await delegate(
        "sync", approx_counter, abandoned=True, streamed_again=streamed_again
    )
    outcome = await delegate(
        "lookahead", approx_counter, abandoned=True, streamed_again=streamed_again
    )
    assert outcome.messages == synchronous.messages
    assert "saw 4 messages" in outcome.messages[0]["content"]
    # Streamed again, the delegation is prefilled from the history of now: still a hit.
    assert outcome.kind is (CommitKind.HIT if streamed_again else CommitKind.FALLBACK)


async def test_a_streamed_delegation_still_commits_its_lookahead(approx_counter) -> None:
    outcome = await delegate("lookahead", approx_counter, abandoned=False, streamed_again=True)
    synchronous = await delegate("sync", approx_counter, abandoned=False, streamed_again=True)
    assert outcome.kind is CommitKind.HIT
    assert outcome.messages == synchronous.messages


async def test_a_restored_result_of_an_abandoned_delegation_is_not_spawned(approx_counter) -> None:
    def runtime() -> LookaheadRuntime:
        return LookaheadRuntime(
            Isolate(subagent_system=subagent_prompt),
            RuntimeConfig(token_counter=approx_counter, window_tokens=8192),
            messages=HISTORY,
        )

    original = runtime()
    async with original:
        await original.stream_boundary(STREAMED, tool_name="delegate")
        await original.settle(5)
        saved = json.loads(json.dumps(original.save_state()))
    assert saved["lookahead"]["status"] == "ready"
    restored = runtime()
    async with restored:
        restored.load_state(saved)
        # Restored, the result still prefills the instruction open, as the original's did.
        assert restored.lookahead.covered_partial == original.lookahead.covered_partial
        restored.append(
            call("read", "r1", {"path": "m.py"}),
            {"role": "tool", "tool_call_id": "r1", "content": "def f(): pass"},
        )
        await restored.boundary()
        restored.append(call("delegate", "d1", {"instruction": "Review m.py for bugs"}))
        outcome = await restored.commit()
    assert outcome.kind is CommitKind.FALLBACK
    assert "saw 4 messages" in outcome.messages[0]["content"]


async def test_a_saved_streaming_instruction_that_does_not_fit_is_refused(approx_counter) -> None:
    original = LookaheadRuntime(
        Isolate(subagent_system="You review code."),
        RuntimeConfig(token_counter=approx_counter, window_tokens=8192),
        messages=HISTORY,
    )
    async with original:
        await original.stream_boundary(STREAMED, tool_name="delegate")
        await original.settle(5)
        saved = original.save_state()
        saved["lookahead"]["covered_partial"] = {"text": 3, "tool_name": None}
        with pytest.raises(InvalidInputError, match=r"state\.lookahead"):
            original.load_state(saved)
        assert original.lookahead.status is LookaheadStatus.READY  # unchanged

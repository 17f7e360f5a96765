"""A rejected operation leaves everything exactly as it was: the history, its token sums and
prefix signatures, the turn count, the stats and the lookahead. Built in, not patched case by
case: every edit validates and prepares its messages before it changes anything, a commit
applies its context before it records anything, and `load_state` reads the whole state before
it swaps it in. The property test injects random invalid inputs into random operation
sequences and checks the state after each rejection, then that the runtime still commits."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_sdk import (
    CommitKind,
    InvalidInputError,
    LookaheadRuntime,
    MainState,
    TransformContext,
    TransformResult,
)
from lookahead_sdk.base.messages import Message
from lookahead_sdk.strategies import KeepRecent

from .policies import CountingPolicy, drop_middle, user

INVALID_MESSAGES: list[Any] = [
    {"role": "robot", "content": "x"},
    {"role": "user", "content": "x", "meta": {1}},  # a set: not JSON
    {"role": "user", "content": "lone \ud800 surrogate"},
    {"role": "user", "content": "x", "blob": b"bytes"},
    {"role": "tool", "content": "no call id"},
    {"role": "user", "content": 5},
    {"role": "user"},
    "hello",
    None,
]


def fingerprint(runtime: LookaheadRuntime) -> tuple[Any, ...]:
    main = runtime.main
    return (
        json.dumps(list(main.messages), sort_keys=True),
        [main.tokens_between(0, end) for end in range(len(main) + 1)],
        [main.prefix_signature(end) for end in range(len(main) + 1)],
        main.turn,
        asdict(runtime.stats),
        runtime.lookahead.status,
        runtime.lookahead.last_segment_end,
    )


class InvalidOutputPolicy(CountingPolicy):
    """Its transform returns an invalid message when told to (a buggy custom policy)."""

    broken: bool = False
    broken_calls: int = 0

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        if self.broken:
            self.broken_calls += 1
            return TransformResult([{"role": "robot", "content": "?"}, *messages[-2:]])
        return await super().transform(messages, ctx)


def corrupted_states(saved: dict[str, Any]) -> list[dict[str, Any]]:
    """Saved states broken one field at a time, each in a way a reader could meet."""
    variants: list[Callable[[dict[str, Any]], None]] = [
        lambda s: s.pop("messages"),
        lambda s: s.pop("turn"),
        lambda s: s.pop("stats"),
        lambda s: s.pop("lookahead"),
        lambda s: s.__setitem__("turn", "three"),
        lambda s: s.__setitem__("turn", -1),
        lambda s: s.__setitem__("messages", "not a list"),
        lambda s: s["messages"].append({"role": "robot", "content": "x"}),
        lambda s: s.__setitem__("commit_due_at", [3, "zz-not-hex"]),
        lambda s: s.__setitem__("commit_due_at", [3]),
        lambda s: s.__setitem__("model_calls_made", -1),
        lambda s: s.__setitem__("model_calls_made", "two"),
        lambda s: s["stats"].__setitem__("hits", "many"),
        lambda s: s["stats"].__setitem__("unknown_stat", 1),
        lambda s: s["stats"].__setitem__("commits", -2),
        lambda s: s.__setitem__("lookahead", {"status": "ready"}),
        lambda s: s.__setitem__(
            "lookahead",
            {
                "status": "ready",
                "messages": [user("x")],
                "last_segment_end": 1,
                "covered_signature": "nothex",
                "group_id": "g",
                "strategy_data": {},
            },
        ),
        lambda s: s.__setitem__(
            "lookahead",
            {
                "status": "ready",
                "messages": [{"role": "robot"}],
                "last_segment_end": 1,
                "covered_signature": "00" * 16,
                "group_id": "g",
                "strategy_data": {},
            },
        ),
        lambda s: s.__setitem__(
            "lookahead",
            {
                "status": "ready",
                "messages": [user("x")],
                "last_segment_end": 1,
                "covered_signature": "00" * 16,
                "group_id": "g",
                "strategy_data": {},
                "kept_from": -1,
            },
        ),
        lambda s: s["growth"].__setitem__("held_for_model_call", "yes"),
        lambda s: s["growth"].__setitem__("marks_reply_boundaries", 1),
        lambda s: s.__setitem__("version", 99),
        lambda s: s.__setitem__("policy", "other"),
        lambda s: s.clear(),
    ]
    broken = []
    for mutate in variants:
        state = copy.deepcopy(saved)
        mutate(state)
        broken.append(state)
    return broken


async def runtime_at_soft_limit(approx_counter: Any) -> LookaheadRuntime:
    runtime = LookaheadRuntime(
        InvalidOutputPolicy(soft=5, hard=9), messages=[user("task")], token_counter=approx_counter
    )
    runtime.append(*[user(f"a{i}") for i in range(5)])
    await runtime.boundary()
    await runtime.settle()
    return runtime


async def test_every_corrupted_saved_state_is_refused_and_changes_nothing(approx_counter) -> None:
    runtime = await runtime_at_soft_limit(approx_counter)
    saved = json.loads(json.dumps(runtime.save_state()))
    runtime.append(user("after the save"))
    before = fingerprint(runtime)
    for state in corrupted_states(saved):
        with pytest.raises(InvalidInputError):
            runtime.load_state(state)
        assert fingerprint(runtime) == before, state
    runtime.load_state(saved)  # a good one still loads
    assert runtime.main.messages[-1] == saved["messages"][-1]
    await runtime.aclose()


@pytest.mark.parametrize("bad", INVALID_MESSAGES, ids=repr)
def test_a_rejected_edit_leaves_the_history_as_it_was(bad: Any, approx_counter) -> None:
    main = MainState([user(f"m{i}") for i in range(6)], token_counter=approx_counter)
    before = (list(main.messages), main.tokens, main.prefix_signature(6), main.version)
    for operation in (
        lambda: main.append(user("fine"), bad),
        lambda: main.edit(2, bad),
        lambda: main.replace([user("a"), bad]),
    ):
        with pytest.raises((TypeError, ValueError)):
            operation()
        assert (list(main.messages), main.tokens, main.prefix_signature(6), main.version) == before
    assert main.prefix_signature(7) is None  # nothing half-appended


@pytest.mark.parametrize("mode", ["sync", "lookahead"])
async def test_a_transform_returning_invalid_messages_fails_the_commit_not_the_history(
    mode: str, approx_counter
) -> None:
    policy = InvalidOutputPolicy(soft=5, hard=9)
    runtime = LookaheadRuntime(
        policy,
        mode=mode,
        messages=[user("task")],
        token_counter=approx_counter,  # type: ignore[arg-type]
    )
    runtime.append(*[user(f"a{i}") for i in range(5)])
    policy.broken = True
    await runtime.boundary()  # lookahead mode: its result is invalid, so it fails
    await runtime.settle()
    runtime.append(*[user(f"b{i}") for i in range(4)])
    before = fingerprint(runtime)
    with pytest.raises(ValueError, match="role must be one of"):
        await runtime.commit()
    assert fingerprint(runtime) == before  # 10 messages still, no commit counted
    policy.broken = False
    outcome = await runtime.commit()  # the next commit works on the intact history
    assert outcome.kind in (CommitKind.SYNC, CommitKind.FALLBACK)
    assert outcome.messages == drop_middle(before_messages := json.loads(before[0]))
    assert len(before_messages) == 10
    await runtime.aclose()


async def test_a_hung_synchronous_transform_is_bounded_and_changes_nothing(approx_counter) -> None:
    policy = CountingPolicy(soft=100, hard=4, delays=[3600.0])
    runtime = LookaheadRuntime(
        policy, messages=[user("t")], token_counter=approx_counter, sync_transform_timeout_s=0.2
    )
    runtime.append(*[user(f"a{i}") for i in range(4)])
    before = fingerprint(runtime)
    with pytest.raises(TimeoutError, match="sync_transform_timeout_s"):
        await asyncio.wait_for(runtime.commit(), timeout=5)
    assert fingerprint(runtime)[:5] == before[:5]
    await runtime.aclose()


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("bad_append"), st.sampled_from(range(len(INVALID_MESSAGES)))),
        st.tuples(st.just("bad_edit"), st.sampled_from(range(len(INVALID_MESSAGES)))),
        st.tuples(st.just("bad_replace"), st.sampled_from(range(len(INVALID_MESSAGES)))),
        st.tuples(st.just("bad_load"), st.integers(0, 18)),
        st.tuples(st.just("broken_commit"), st.just(0)),
        st.tuples(st.just("boundary"), st.just(0)),
        st.tuples(st.just("commit"), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=OPERATIONS, mode=st.sampled_from(["sync", "lookahead"]))
def test_rejected_operations_never_change_the_state(
    operations: list[tuple[str, int]], mode: str, approx_counter
) -> None:
    async def scenario() -> None:
        policy = InvalidOutputPolicy(soft=5, hard=9)
        runtime = LookaheadRuntime(
            policy,
            mode=mode,
            messages=[user("task")],
            token_counter=approx_counter,  # type: ignore[arg-type]
        )
        saved = json.loads(json.dumps(runtime.save_state()))
        count = 0
        for name, arg in operations:
            await runtime.settle()  # compare states with no background work in flight
            before = fingerprint(runtime)
            rejected = True
            try:
                if name == "append":
                    for _ in range(arg):
                        count += 1
                        runtime.append(user(f"m{count}"))
                    rejected = False
                elif name == "bad_append":
                    runtime.append(user("fine"), INVALID_MESSAGES[arg])
                elif name == "bad_edit":
                    runtime.main.edit(len(runtime.main) // 2, INVALID_MESSAGES[arg])
                elif name == "bad_replace":
                    runtime.main.replace([user("x"), INVALID_MESSAGES[arg]])
                elif name == "bad_load":
                    runtime.load_state(corrupted_states(saved)[arg])
                elif name == "broken_commit":
                    if not policy.should_commit(runtime.main, runtime.lookahead):
                        continue
                    policy.broken = True
                    calls = policy.broken_calls
                    try:
                        await runtime.commit()
                    finally:
                        policy.broken = False
                    # A hit on a result transformed before the policy broke needs no transform.
                    rejected = policy.broken_calls > calls
                else:
                    rejected = False
                    await (runtime.boundary() if name == "boundary" else runtime.commit())
            except (TypeError, ValueError):
                assert rejected, f"{name} raised"
                await runtime.settle()
                after = fingerprint(runtime)
                # A lookahead may have failed meanwhile (the broken transform): the history,
                # sums, signatures, turns and commit counts are what must not move.
                assert after[:4] == before[:4], name
                assert after[4]["commits"] == before[4]["commits"], name
                continue
            assert not rejected, f"{name} was accepted"
        # The runtime still commits correctly afterwards.
        runtime.append(*[user(f"z{i}") for i in range(9)])
        history = list(runtime.main.messages)
        outcome = await runtime.commit()
        assert outcome.committed and len(outcome.messages) < len(history)
        if outcome.kind is not CommitKind.HIT:
            assert outcome.messages == drop_middle(history)
        await runtime.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize(("text", "tool_name"), [(12345, None), ("{", 7)])
def test_a_rejected_stream_boundary_changes_nothing(text: Any, tool_name: Any) -> None:
    async def scenario() -> None:
        async with LookaheadRuntime(
            KeepRecent(budget=200, hard_limit=400), messages=[{"role": "user", "content": "t"}]
        ) as runtime:
            before = (runtime.main.partial_output, runtime.stats.boundaries)
            with pytest.raises(InvalidInputError, match="stream_boundary"):
                await runtime.stream_boundary(text, tool_name=tool_name)
            assert (runtime.main.partial_output, runtime.stats.boundaries) == before

    asyncio.run(scenario())


def test_what_prepare_and_save_state_hand_out_is_the_callers_to_edit() -> None:
    """Editing it (a cache breakpoint added in place, say) leaves the history, its signatures and
    token counts as they were."""

    async def scenario() -> None:
        history = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "ok"}]
        async with LookaheadRuntime(
            KeepRecent(budget=200, hard_limit=400), messages=history
        ) as runtime:
            signature, tokens = runtime.main.prefix_signature(2), runtime.main.tokens
            for handed_out in (await runtime.prepare(), runtime.save_state()["messages"]):
                handed_out[0]["content"] = "edited " * 50
            assert list(runtime.main.messages) == history
            # Unchanged content: the signatures and counts still describe the history.
            assert MainState(history).prefix_signature(2) == signature
            assert runtime.main.prefix_signature(2) == signature
            assert runtime.main.tokens == tokens

    asyncio.run(scenario())

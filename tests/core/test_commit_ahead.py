"""`commit_ahead`: the commit is decided when the model's turn ends, before its tool outputs exist."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk import CommitKind, LookaheadRuntime, OffloadStore
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tokens import ApproxTokenCounter, CachedTokenCounter
from lookahead_sdk.core.policy import ContextPolicy
from lookahead_sdk.core.state import LookaheadState, MainState
from lookahead_sdk.strategies import KeepRecent, Offload, Summarize

from .policies import RecordingWarmer

COUNTER = CachedTokenCounter(ApproxTokenCounter())
HARD = 4000
WINDOW = 8192
START: list[Message] = [
    {"role": "system", "content": "You analyze code."},
    {"role": "user", "content": "Review the repository."},
]


def workload_runtime(policy: ContextPolicy, mode: str, **overrides: Any) -> LookaheadRuntime:
    """A runtime for these workloads: the task's two messages, `WINDOW`, `COUNTER`;
    `overrides`: other runtime config fields."""
    return LookaheadRuntime(
        policy, mode=mode, messages=START, window_tokens=WINDOW, token_counter=COUNTER, **overrides
    )


def model_turn(step: int) -> Message:
    call = {"id": f"c{step}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def tool_output(step: int, tokens: int) -> Message:
    return {"role": "tool", "tool_call_id": f"c{step}", "content": "word" * tokens}


@dataclass
class FirstCommit:
    step: int | None = None
    decided_ahead: bool = False
    tokens_at_call: int = 0  # the live history when the committing call was prepared


async def first_commit(policy: ContextPolicy, mode: str, outputs: list[int]) -> FirstCommit:
    """The reference loop's boundary sequence, up to its first commit."""
    async with workload_runtime(policy, mode) as runtime:
        for step, size in enumerate(outputs):
            tokens = runtime.main.tokens
            outcome = await runtime.commit()
            if outcome.committed:
                return FirstCommit(step, outcome.decided_ahead, tokens)
            runtime.append(model_turn(step))
            await runtime.boundary()
            runtime.append(tool_output(step, size))
            await runtime.boundary()
    return FirstCommit()


def keep_recent(**kwargs: bool) -> KeepRecent:
    return KeepRecent(budget=2000, hard_limit=HARD, lookahead_at=2400, **kwargs)


SIZES = (60, 120, 400)


@settings(max_examples=60, deadline=None)
@given(outputs=st.lists(st.sampled_from(SIZES), min_size=4, max_size=60))
def test_the_commit_turn_does_not_depend_on_the_output_it_brings(outputs: list[int]) -> None:
    first = asyncio.run(first_commit(keep_recent(), "sync", outputs))
    assert asyncio.run(first_commit(keep_recent(), "lookahead", outputs)).step == first.step
    if first.step is None or not first.decided_ahead:
        return
    # The output that arrives between the decision and the commit call could be any size.
    for size in SIZES:
        other = [*outputs[: first.step - 1], size, *outputs[first.step :]]
        assert asyncio.run(first_commit(keep_recent(), "sync", other)).step == first.step


def test_without_commit_ahead_a_large_output_picks_the_commit_turn() -> None:
    outputs = [120, 120, 120, 400] * 15
    late = asyncio.run(first_commit(keep_recent(commit_ahead=False), "sync", outputs))
    assert late.step is not None and late.tokens_at_call >= HARD
    assert outputs[late.step - 1] == 400  # the large read took the history over the limit
    smaller = [*outputs[: late.step - 1], 60, *outputs[late.step :]]
    assert asyncio.run(first_commit(keep_recent(commit_ahead=False), "sync", smaller)).step != (
        late.step
    )
    ahead = asyncio.run(first_commit(keep_recent(), "sync", outputs))
    assert ahead.decided_ahead and ahead.step is not None and ahead.step <= late.step


def test_the_reserve_is_the_largest_recent_turn_capped_at_an_eighth_of_the_limit() -> None:
    main = MainState(START, window_tokens=8192, token_counter=COUNTER)
    policy = Summarize(lookahead_at=1000, hard_limit=HARD, recent_budget=500)
    assert policy.next_turn_reserve(main) == 0  # no turn seen yet
    for step, size in enumerate([50, 200, 50]):
        main.append(model_turn(step), tool_output(step, size))
    main.append(model_turn(3))
    largest = main.largest_recent_turn_tokens
    assert largest is not None and largest > 200
    assert policy.next_turn_reserve(main) == largest
    # The lookahead starts earlier by as much as the commit may come earlier.
    assert policy.soft_tokens(main) <= 1000 - largest
    main.append(tool_output(3, 5000), model_turn(4))
    assert policy.next_turn_reserve(main) == HARD // 8
    assert Summarize(hard_limit=HARD, commit_ahead=False).next_turn_reserve(main) == 0


def test_offload_commits_ahead_only_if_the_next_call_has_something_to_offload(
    tmp_path: Path,
) -> None:
    policy = Offload(
        store=OffloadStore(tmp_path), threshold=300, hard_limit=HARD, commit_ahead=True
    )
    near = [*START]
    for step in range(25):
        near += [model_turn(step), tool_output(step, 150)]
    near.append(model_turn(25))
    main = MainState(near, window_tokens=8192, token_counter=COUNTER)
    assert main.tokens + policy.next_turn_reserve(main) >= HARD
    assert not policy.should_commit_ahead(main, LookaheadState())  # all outputs below 300
    big = [*near[:-2], tool_output(24, 400), model_turn(25)]
    main = MainState(big, window_tokens=8192, token_counter=COUNTER)
    # The 400-token output is the newest now, not at the next call: it will be offloaded then.
    assert policy.should_commit_ahead(main, LookaheadState())


def test_the_decision_survives_save_and_load() -> None:
    async def run() -> CommitKind:
        policy = KeepRecent(budget=1000, hard_limit=HARD, lookahead_at=1200)
        history = [*START]
        for step in range(30):
            history += [model_turn(step), tool_output(step, 120)]
        async with LookaheadRuntime(
            policy, mode="sync", messages=history, window_tokens=8192, token_counter=COUNTER
        ) as first:
            first.append(model_turn(30))
            await first.boundary()
            saved = first.save_state()
        async with LookaheadRuntime(
            policy, mode="sync", window_tokens=8192, token_counter=COUNTER
        ) as second:
            second.load_state(saved)
            second.append(tool_output(30, 10))
            assert second.main.tokens < HARD
            return (await second.commit()).kind

    assert asyncio.run(run()) is CommitKind.SYNC


def test_a_commit_decided_ahead_warms_the_model_turn_and_leaves_the_output_to_the_commit() -> None:
    async def run() -> None:
        warmer = RecordingWarmer()
        async with LookaheadRuntime(
            keep_recent(), messages=START, window_tokens=8192, token_counter=COUNTER, warmer=warmer
        ) as runtime:

            async def segment(message: Message) -> int:
                runtime.append(message)
                await runtime.boundary()
                await runtime.settle()  # let the background work finish
                return len(warmer.warmed)

            for step in range(60):
                before = len(warmer.warmed)
                after_model = await segment(model_turn(step))
                if runtime.commit_due:
                    break
                await segment(tool_output(step, 120))
            else:
                raise AssertionError("the commit was never decided ahead")
            assert after_model == before + 1 and warmer.warmed[-1][-1] == model_turn(step)
            # A small output: the history stays below the limit, the commit was decided ahead.
            assert await segment(tool_output(step, 10)) == after_model  # left to the commit
            assert runtime.main.tokens < HARD
            outcome = await runtime.commit()
            assert outcome.kind is CommitKind.HIT and outcome.decided_ahead
            assert outcome.messages[-1] == tool_output(step, 10)

    asyncio.run(run())


def test_a_decision_made_on_a_history_since_rewritten_does_not_commit() -> None:
    async def run() -> CommitKind:
        history = [*START]
        for step in range(30):
            history += [model_turn(step), tool_output(step, 120)]
        async with LookaheadRuntime(
            keep_recent(), mode="sync", messages=history, window_tokens=8192, token_counter=COUNTER
        ) as runtime:
            runtime.append(model_turn(30))
            await runtime.boundary()
            assert runtime.commit_due
            runtime.main.replace(START)  # e.g. the framework cleared its memory
            runtime.append(model_turn(30), tool_output(30, 10))
            assert not runtime.commit_due
            return (await runtime.commit()).kind

    assert asyncio.run(run()) is CommitKind.NONE

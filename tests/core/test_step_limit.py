"""`model_calls_left`: the agent's step limit bounds the run, so no lookahead starts that the
run would end before committing (each agent of the four-agent bench threw its last one away)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk import CommitKind, LookaheadRuntime
from lookahead_sdk.core.config import RuntimeConfig
from lookahead_sdk.core.policy import ContextPolicy
from lookahead_sdk.core.state import LookaheadStatus
from lookahead_sdk.core.sync_runtime import SyncLookaheadRuntime
from lookahead_sdk.errors import ConfigurationError, InvalidInputError

from ..support.clock import VirtualClock
from .policies import FakeSummarizer, RecordingWarmer
from .test_commit_ahead import START, WINDOW, model_turn, tool_output, workload_runtime
from .test_commit_size import OUTPUT_SIZES, policy_named


@dataclass
class Ended:
    kinds: list[CommitKind]
    started: int  # lookaheads started (redos included)
    out_of_reach: int
    wasted_tokens: int
    left_over: LookaheadStatus  # the lookahead when the run ended
    starts_with_no_call_left: int  # lookaheads started at a boundary after the last call


Limit = Literal["none", "loop", "config"]


async def run(
    policy: ContextPolicy,
    mode: str,
    outputs: list[int],
    *,
    limit: Limit,
    steps: int | None = None,
) -> Ended:
    """The reference loop with a step limit of `steps` (default: len(outputs)); the runtime
    knows it unless `limit` is "none": told the model calls left at each step as the reference
    loop does ("loop"), or from `RuntimeConfig.model_call_limit` ("config"). Virtual time,
    background work finishing between boundaries."""
    steps = len(outputs) if steps is None else steps
    clock = VirtualClock()
    kinds: list[CommitKind] = []
    late_starts = 0
    async with workload_runtime(
        policy,
        mode,
        warmer=RecordingWarmer(),
        summarizer=FakeSummarizer(),
        model_call_limit=steps if limit == "config" else None,
    ) as runtime:
        runtime.clock = clock
        for step in range(steps):
            if limit == "loop":
                runtime.model_calls_left = steps - step - 1
            outcome = await runtime.commit()
            if outcome.committed:
                kinds.append(outcome.kind)
            for message in (model_turn(step), tool_output(step, outputs[step])):
                clock.now += 1.0
                started = runtime.stats.lookaheads_started
                runtime.append(message)
                await runtime.boundary()
                await runtime.settle()
                if runtime.model_calls_left == 0:
                    late_starts += runtime.stats.lookaheads_started - started
        left_over = runtime.lookahead.status
        stats = runtime.stats
    return Ended(
        kinds,
        stats.lookaheads_started,
        stats.out_of_reach_starts,
        stats.wasted_prompt_tokens,
        left_over,
        late_starts,
    )


def test_the_last_lookahead_the_run_cannot_commit_is_not_started() -> None:
    """Even growth: the limit is set so the run ends a turn or two after a lookahead would
    start. Without the limit that lookahead's warm-up is thrown away; with it, it never starts,
    and every commit is the same as before."""
    outputs = [300] * 40
    unlimited = asyncio.run(
        run(policy_named("keep_recent", True), "lookahead", outputs, limit="none")
    )
    # Find a run length that ends between a lookahead's start and its commit.
    for steps in range(20, 40):
        without = asyncio.run(
            run(policy_named("keep_recent", True), "lookahead", outputs, limit="none", steps=steps)
        )
        if without.left_over is LookaheadStatus.READY and without.wasted_tokens > 0:
            break
    else:
        pytest.fail(f"no run length left a lookahead uncommitted: {unlimited}")
    limited = asyncio.run(
        run(policy_named("keep_recent", True), "lookahead", outputs, limit="loop", steps=steps)
    )
    assert limited.out_of_reach >= 1
    assert limited.wasted_tokens == 0
    assert limited.left_over is LookaheadStatus.IDLE
    assert limited.kinds == without.kinds
    assert all(kind is CommitKind.HIT for kind in limited.kinds)


POLICY_NAMES = st.sampled_from(["keep_recent", "summarize"])
OUTPUTS = st.lists(st.sampled_from(OUTPUT_SIZES), min_size=6, max_size=50)


@settings(max_examples=60, deadline=None)
@given(name=POLICY_NAMES, outputs=OUTPUTS)
def test_a_step_limit_changes_no_commit_and_starts_nothing_after_the_last_call(
    name: str, outputs: list[int]
) -> None:
    """Whatever the outputs (bursts included): nothing is lost (a commit no lookahead was
    started for transforms synchronously), the run commits as often as a synchronous one
    within the one commit that a hit's turn of slack can move (a lookahead started later, with
    bursts yet to come, keeps up to a turn more), and no background work starts once no model
    call is left."""
    synced = asyncio.run(run(policy_named(name, True), "sync", outputs, limit="loop"))
    limited = asyncio.run(run(policy_named(name, True), "lookahead", outputs, limit="loop"))
    assert abs(len(limited.kinds) - len(synced.kinds)) <= 1
    assert set(limited.kinds) <= {CommitKind.HIT, CommitKind.FALLBACK}
    assert limited.starts_with_no_call_left == 0


@settings(max_examples=40, deadline=None)
@given(name=POLICY_NAMES, outputs=OUTPUTS)
def test_a_configured_model_call_limit_counts_the_calls_as_the_loop_would(
    name: str, outputs: list[int]
) -> None:
    """`RuntimeConfig.model_call_limit`, for agents whose loop cannot tell the runtime (framework
    adapters): the runtime counts its commits and decides exactly as when the loop sets
    `model_calls_left` at every step."""
    told = asyncio.run(run(policy_named(name, True), "lookahead", outputs, limit="loop"))
    counted = asyncio.run(run(policy_named(name, True), "lookahead", outputs, limit="config"))
    assert counted == told


def test_a_configured_limit_is_carried_by_saved_state() -> None:
    """A runtime restored mid-run (a framework thread rebuilt from its checkpoint) goes on
    counting from the calls the saved one had made."""

    async def check() -> None:
        policy = policy_named("keep_recent", True)
        async with workload_runtime(policy, "lookahead", model_call_limit=6) as first:
            assert first.model_calls_left == 6
            for step in range(4):
                await first.commit()
                first.append(model_turn(step), tool_output(step, 120))
                await first.boundary()
            assert first.model_calls_left == 2
            saved = first.save_state()
        async with workload_runtime(policy, "lookahead", model_call_limit=6) as second:
            second.load_state(saved)
            assert second.model_calls_left == 2
            await second.commit()
            await second.commit()
            assert second.model_calls_left == 0
            await second.commit()  # a call beyond the limit: still 0, never negative
            assert second.model_calls_left == 0
        async with workload_runtime(policy, "lookahead") as unlimited:
            unlimited.load_state(saved)  # no limit configured: the count is not a limit
            assert unlimited.model_calls_left is None

    asyncio.run(check())


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "8"])
def test_a_bad_model_call_limit_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(ConfigurationError, match="model_call_limit must be an int >= 1"):
        RuntimeConfig(model_call_limit=value)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    size=st.sampled_from((120, 250, 400)),
    steps=st.integers(min_value=8, max_value=45),
)
def test_with_even_growth_every_lookahead_started_is_committed(size: int, steps: int) -> None:
    """Growth as expected: the forecast is exact, so no lookahead is thrown away at the end and
    no commit falls back for want of one."""
    ended = asyncio.run(
        run(policy_named("keep_recent", True), "lookahead", [size] * steps, limit="loop")
    )
    assert ended.wasted_tokens == 0, ended
    assert ended.left_over is LookaheadStatus.IDLE, ended
    assert all(kind is CommitKind.HIT for kind in ended.kinds), ended


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"])
def test_a_bad_step_limit_is_refused_and_changes_nothing(value: object) -> None:
    async def check() -> None:
        async with LookaheadRuntime(
            policy_named("keep_recent", True), messages=START, window_tokens=WINDOW
        ) as runtime:
            runtime.model_calls_left = 4
            with pytest.raises(InvalidInputError, match="model_calls_left must be an int >= 0"):
                runtime.model_calls_left = value  # type: ignore[assignment]
            assert runtime.model_calls_left == 4
            runtime.model_calls_left = None
            assert runtime.model_calls_left is None

    asyncio.run(check())


def test_the_sync_runtime_takes_the_step_limit_too() -> None:
    with SyncLookaheadRuntime(
        policy_named("keep_recent", True), messages=START, window_tokens=WINDOW
    ) as runtime:
        runtime.model_calls_left = 2
        assert runtime.runtime.model_calls_left == 2
        with pytest.raises(InvalidInputError, match="model_calls_left"):
            runtime.model_calls_left = -2
        assert runtime.model_calls_left == 2

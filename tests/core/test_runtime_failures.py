"""Failure injection: failing / hanging transforms and warm-ups fall back to the same result, and
nothing is left running after close."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from lookahead_sdk import (
    CommitKind,
    LookaheadRuntime,
    LookaheadStatus,
    RequestShape,
    TransformContext,
    TransformResult,
)
from lookahead_sdk.base.messages import Message, orphaned_results
from lookahead_sdk.core.runtime import ORPHANED_RESULT
from lookahead_sdk.core.warmer import WarmupResult, WarmupSpend

from .policies import CountingPolicy, RecordingWarmer, drop_middle, user


def history(n: int) -> list[Message]:
    return [{"role": "system", "content": "s"}, *(user(f"m{i}") for i in range(n))]


def runtime_with(warmer: object, counter: object, *, hard: int = 9) -> LookaheadRuntime:
    """A runtime whose lookahead starts at 5 tokens and commits at `hard`, warming with `warmer`."""
    policy = CountingPolicy(soft=5, hard=hard)
    return LookaheadRuntime(policy, messages=history(0), token_counter=counter, warmer=warmer)


async def drive_to_commit(runtime: LookaheadRuntime, *, settle: bool = True) -> list[Message]:
    """Grow the history past the soft trigger, let the lookahead run, then reach the hard limit."""
    for i in range(6):
        runtime.append(user(f"a{i}"))
    await runtime.boundary()
    if settle:
        await runtime.settle()
    await asyncio.sleep(0.01)  # let a just-started lookahead begin running
    for i in range(3):
        runtime.append(user(f"b{i}"))
    return list(runtime.main.messages)


def assert_no_tasks_left() -> None:
    pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    assert pending == []


async def test_transform_that_raises_falls_back_to_the_same_result(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9)
    snapshot = history(0) + [user(f"a{i}") for i in range(6)]
    from .policies import digest

    policy.fail_on = {digest(snapshot)}
    runtime = LookaheadRuntime(policy, messages=history(0), token_counter=approx_counter)
    before = await drive_to_commit(runtime)
    assert runtime.lookahead.status is LookaheadStatus.FAILED
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.FALLBACK and outcome.reason == "failed"
    assert outcome.messages == drop_middle(before)
    assert runtime.stats.failures == 1 and runtime.stats.fallbacks == 1
    await runtime.aclose()
    assert_no_tasks_left()


async def test_transform_timeout_falls_back(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9, delays=[10.0, 0.0])
    runtime = LookaheadRuntime(
        policy, messages=history(0), token_counter=approx_counter, transform_timeout_s=0.05
    )
    before = await drive_to_commit(runtime)
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.FALLBACK
    assert outcome.messages == drop_middle(before)
    assert isinstance(runtime.stats.failures, int) and runtime.stats.failures == 1
    await runtime.aclose()
    assert_no_tasks_left()


async def test_running_lookahead_is_promoted_and_awaited_at_commit(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9, delays=[0.2])
    runtime = LookaheadRuntime(policy, messages=history(0), token_counter=approx_counter)
    before = await drive_to_commit(runtime, settle=False)
    assert runtime.lookahead.status is LookaheadStatus.RUNNING
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.HIT and outcome.waited_s > 0
    assert runtime.stats.promotions == 1
    end = outcome.covered_end
    assert outcome.messages == drop_middle(before[:end]) + before[end:]
    await runtime.aclose()


async def test_commit_wait_timeout_abandons_a_stuck_lookahead(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9, delays=[30.0, 0.0])
    runtime = LookaheadRuntime(
        policy, messages=history(0), token_counter=approx_counter, commit_wait_timeout_s=0.05
    )
    before = await drive_to_commit(runtime, settle=False)
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.FALLBACK and outcome.messages == drop_middle(before)
    await runtime.aclose()
    assert_no_tasks_left()


async def test_policy_can_refuse_promotion_and_take_the_sync_path(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9, delays=[30.0, 0.0])
    policy.should_promote = lambda main, lookahead: False  # type: ignore[method-assign]
    runtime = LookaheadRuntime(policy, messages=history(0), token_counter=approx_counter)
    before = await drive_to_commit(runtime, settle=False)
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.FALLBACK and outcome.messages == drop_middle(before)
    assert runtime.stats.abandoned == 1
    await runtime.aclose()
    assert_no_tasks_left()


@pytest.mark.parametrize(
    "warmer", [RecordingWarmer(fail=True), RecordingWarmer(hang=True)], ids=["raises", "hangs"]
)
async def test_failed_or_hung_warmup_still_commits_the_same_context(warmer, approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9)
    runtime = LookaheadRuntime(
        policy,
        messages=history(0),
        token_counter=approx_counter,
        warmer=warmer,
        warmup_wait_timeout_s=0.05,
    )
    for i in range(6):
        runtime.append(user(f"a{i}"))
    await runtime.boundary()
    await asyncio.sleep(0.01)
    for i in range(3):
        runtime.append(user(f"b{i}"))
    before = list(runtime.main.messages)
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.HIT
    end = outcome.covered_end
    assert outcome.messages == drop_middle(before[:end]) + before[end:]
    await runtime.aclose()
    assert_no_tasks_left()


class ChunkedWarmer(RecordingWarmer):
    """Sends two 40-token chunks, then hangs in the third (the engine is computing it)."""

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        assert spend is not None
        for _ in range(3):
            spend.prefilled_tokens += 40
            await asyncio.sleep(0)
        await asyncio.sleep(3600)
        raise AssertionError("cancelled before this")


async def test_a_warmup_cancelled_by_the_commit_still_counts_the_chunks_it_sent(
    approx_counter,
) -> None:
    runtime = runtime_with(ChunkedWarmer(), approx_counter)
    await drive_to_commit(runtime, settle=False)
    assert (await runtime.commit()).kind is CommitKind.HIT
    assert runtime.stats.background_prompt_tokens == 120
    assert runtime.stats.warmups == 0  # it never completed
    await runtime.aclose()
    assert_no_tasks_left()


async def test_warmup_prefills_what_the_commit_will_send_including_the_suffix(
    approx_counter,
) -> None:
    warmer = RecordingWarmer()
    runtime = runtime_with(warmer, approx_counter, hard=12)
    for i in range(6):
        runtime.append(user(f"a{i}"))
    await runtime.boundary()
    await runtime.settle()
    for step in range(2):
        runtime.append(user(f"b{step}"), user(f"c{step}"))
        await runtime.boundary()
        await runtime.settle()
    runtime.append(user("last"))
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.HIT
    # The last warm-up covered everything but the newest message: the commit only prefills that.
    assert warmer.warmed[-1] == outcome.messages[:-1]
    assert runtime.stats.warmups == 3
    await runtime.aclose()


async def test_close_cancels_a_running_lookahead_and_rejects_further_use(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9, delays=[30.0])
    runtime = LookaheadRuntime(policy, messages=history(0), token_counter=approx_counter)
    await drive_to_commit(runtime, settle=False)
    assert runtime.busy
    await runtime.aclose()
    assert not runtime.busy
    assert_no_tasks_left()
    with pytest.raises(RuntimeError, match="closed"):
        runtime.append(user("late"))


async def test_edit_inside_the_covered_prefix_makes_the_result_stale(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9)
    runtime = LookaheadRuntime(policy, messages=history(0), token_counter=approx_counter)
    await drive_to_commit(runtime)
    assert runtime.lookahead.status is LookaheadStatus.READY
    runtime.main.edit(2, user("rewritten"))
    before = list(runtime.main.messages)
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.FALLBACK and outcome.reason == "stale"
    assert outcome.messages == drop_middle(before)
    assert runtime.stats.stale == 1
    await runtime.aclose()


async def test_newer_boundaries_coalesce_while_a_lookahead_runs(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=50, delays=[0.05])
    runtime = LookaheadRuntime(policy, messages=history(5), token_counter=approx_counter)
    await runtime.boundary()
    for i in range(4):
        runtime.append(user(f"n{i}"))
        await runtime.boundary()
    assert runtime.stats.lookaheads_started == 1
    assert runtime.stats.superseded_boundaries == 3  # four boundaries pending, one kept
    await runtime.aclose()


class FinishingWarmer(RecordingWarmer):
    """Warms in 50 ms chunks; told a commit waits (`finish_warm_up`), it ends after the chunk
    in flight, as `LlamaCppWarmer` does."""

    def __init__(self) -> None:
        super().__init__()
        self.finishing = False
        self.chunks_done = 0
        self.finish_calls: list[str] = []

    def finish_warm_up(self, program_id: str) -> bool:
        self.finish_calls.append(program_id)
        self.finishing = True
        return True

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        self.finishing = False
        for _ in range(100):
            if self.finishing:
                break
            await asyncio.sleep(0.05)
            self.chunks_done += 1
        self.warmed.append(list(messages))
        return WarmupResult(prompt_tokens=10 * self.chunks_done, cached_tokens=0, seconds=0.0)


async def test_a_commit_lets_the_warm_up_chunk_in_flight_finish_then_stops_it(
    approx_counter,
) -> None:
    warmer = FinishingWarmer()
    runtime = runtime_with(warmer, approx_counter)
    await drive_to_commit(runtime, settle=False)
    await asyncio.sleep(0.12)  # the transform is done, the warm-up is in its third chunk
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.HIT
    assert warmer.finish_calls == [runtime.tags.program_id]
    assert 2 <= warmer.chunks_done <= 4  # it ended after the chunk in flight, not 100 chunks
    assert runtime.stats.warmups == 1  # completed (stopped early), not cancelled
    assert 0 < outcome.waited_s < 0.2
    await runtime.aclose()
    assert_no_tasks_left()


class DropsTheWaitingTurn(CountingPolicy):
    """Its lookahead keeps only the system prompt, dropping a turn still waiting for its tool
    results; its synchronous transform changes nothing."""

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        self.seen_inputs.append((ctx.is_lookahead, list(messages)))
        if ctx.is_lookahead:
            return TransformResult([messages[0], user("dropped")])
        return TransformResult(list(messages))


def test_a_result_that_would_orphan_a_tool_result_falls_back(approx_counter) -> None:
    """Committed as it is, the result would put the turn's tool result after no call of its own
    (servers reject that): the commit falls back to the synchronous transform instead."""

    async def scenario() -> None:
        policy = DropsTheWaitingTurn(soft=3, hard=5)
        start = [{"role": "system", "content": "s"}, user("task")]
        async with LookaheadRuntime(
            policy, messages=start, token_counter=approx_counter
        ) as runtime:
            call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            runtime.append({"role": "assistant", "content": None, "tool_calls": [call]})
            await runtime.boundary()
            await runtime.settle()
            assert runtime.lookahead.status is LookaheadStatus.READY
            runtime.append({"role": "tool", "tool_call_id": "c1", "content": "out"}, user("go"))
            live = list(runtime.main.messages)
            outcome = await runtime.commit()
            assert outcome.kind is CommitKind.FALLBACK
            assert outcome.reason == ORPHANED_RESULT
            assert outcome.messages == live
            assert orphaned_results(runtime.main.messages) == []

    asyncio.run(scenario())


class CancelledFromOutside(CountingPolicy):
    """Its first lookahead awaits a call that another party cancels (an LLM call on an event
    loop that shut down), not the runtime."""

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        if ctx.is_lookahead and not self.seen_inputs:
            self.seen_inputs.append((True, list(messages)))
            call = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(call.cancel)
            await call
        return await super().transform(messages, ctx)


def test_a_lookahead_cancelled_from_outside_fails_and_the_next_one_starts(approx_counter) -> None:
    async def scenario() -> None:
        policy = CancelledFromOutside(soft=3, hard=9)
        async with LookaheadRuntime(
            policy, messages=[user("task")], token_counter=approx_counter
        ) as runtime:
            runtime.append(user("a"), user("b"))
            await runtime.boundary()
            await runtime.settle()
            assert runtime.lookahead.status is LookaheadStatus.FAILED
            assert runtime.stats.failures == 1
            runtime.append(user("c"))
            await runtime.boundary()
            await runtime.settle()
            assert runtime.lookahead.status is LookaheadStatus.READY

    asyncio.run(scenario())

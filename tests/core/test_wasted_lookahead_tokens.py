"""A lookahead that fails or goes stale and is superseded by the next one is never committed:
its background tokens count as wasted, and the runtime keeps no record of it afterwards (a run
of thousands of lookaheads would otherwise keep one per failure for good)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lookahead_sdk import LookaheadRuntime, TransformContext, TransformResult
from lookahead_sdk.base.messages import Message
from lookahead_sdk.core.state import LookaheadStatus

from .policies import CountingPolicy, user

SPENT = 100  # uncached prompt tokens each lookahead transform reports


@dataclass
class SpendingPolicy(CountingPolicy):
    """Each lookahead transform reports `SPENT` prompt tokens; with `fail_every_other`, the
    first, third, ... lookahead raises after spending them."""

    fail_every_other: bool = False
    lookaheads: int = 0

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        if ctx.is_lookahead:
            ctx.usage.prompt_tokens += SPENT
            self.lookaheads += 1
            if self.fail_every_other and self.lookaheads % 2:
                raise RuntimeError("injected transform failure")
        return await super().transform(messages, ctx)


async def grow_until_commit(runtime: LookaheadRuntime) -> None:
    while not runtime.policy.should_commit(runtime.main, runtime.lookahead):
        runtime.append(user(f"m{len(runtime.main)}"))
        await runtime.boundary()
        await runtime.settle(5)


async def test_failed_lookaheads_superseded_by_a_new_one_count_as_wasted(approx_counter) -> None:
    policy = SpendingPolicy(soft=4, hard=8, fail_every_other=True)
    runtime = LookaheadRuntime(policy, window_tokens=100_000, token_counter=approx_counter)
    async with runtime:
        for _ in range(40):
            await grow_until_commit(runtime)
            await runtime.commit()
        stats = runtime.stats
        assert stats.failures >= 20 and stats.hits >= 10
        # Every lookahead either failed (wasted) or was committed (not wasted).
        assert stats.background_prompt_tokens == SPENT * stats.lookaheads_started
        assert stats.wasted_prompt_tokens == SPENT * stats.failures
        assert len(runtime._spent_by_group) <= 1  # only the lookahead of the moment, if any


async def test_a_stale_result_superseded_by_a_new_lookahead_counts_as_wasted(
    approx_counter,
) -> None:
    policy = SpendingPolicy(soft=4, hard=12)
    runtime = LookaheadRuntime(policy, window_tokens=100_000, token_counter=approx_counter)
    async with runtime:
        for cycle in range(20):
            while runtime.lookahead.status is not LookaheadStatus.READY:
                if runtime.policy.should_commit(runtime.main, runtime.lookahead):
                    await runtime.commit()  # at the limit: a lookahead starts after it
                runtime.append(user(f"m{len(runtime.main)}"))
                await runtime.boundary()
                await runtime.settle(5)
            # A framework rewrites its history (adapters replace it): the result is stale.
            runtime.main.replace([user(f"edited {cycle}"), *runtime.main.messages[1:]])
            await grow_until_commit(runtime)
            await runtime.commit()
        stats = runtime.stats
        # Most stale results were superseded by a new lookahead before the commit.
        assert stats.stale == 20 and stats.hits >= 10
        # Every lookahead went stale (wasted) or was committed (not wasted).
        assert stats.lookaheads_started == stats.stale + stats.hits
        assert stats.wasted_prompt_tokens == SPENT * stats.stale
        assert len(runtime._spent_by_group) <= 1

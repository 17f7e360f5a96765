"""A burst (one tool output that alone crosses the limit) gets a ready lookahead when bursts
have come before: the trigger leads the limit by the growth distribution's tail, not only by a
few average turns."""

from __future__ import annotations

import asyncio

import pytest

from lookahead_sdk import CommitKind, LookaheadRuntime
from lookahead_sdk.core.policy import ContextPolicy
from lookahead_sdk.strategies import KeepRecent, Summarize

from ..support.clock import VirtualClock
from .test_commit_ahead import COUNTER, START, model_turn, tool_output
from .test_commit_size import SlowSummarizer

# Small reads, then a 1,800-token output that takes the history from ~2.6K over 4K, four times.
BURSTY = [100] * 14 + ([1800] + [100] * 6) * 3 + [1800] + [100] * 4


async def commits(policy: ContextPolicy) -> list[tuple[int, CommitKind, str]]:
    """(the size of the output the commit turn brought, kind, reason) per commit. In virtual
    time (a second per boundary, a summary half a second, anything else none), so the
    growth rate and the lookahead's duration that its start decision weighs are the same on
    every machine."""
    found = []
    clock = VirtualClock()
    async with LookaheadRuntime(
        policy,
        messages=START,
        window_tokens=8192,
        token_counter=COUNTER,
        summarizer=SlowSummarizer(clock, 0.5),
    ) as runtime:
        runtime.clock = clock
        for step, size in enumerate(BURSTY):
            outcome = await runtime.commit()
            if outcome.committed:
                found.append((BURSTY[step - 1], outcome.kind, outcome.reason))
            for message in (model_turn(step), tool_output(step, size)):
                clock.now += 1.0
                runtime.append(message)
                await runtime.boundary()
                await runtime.settle()
    return found


@pytest.mark.parametrize(
    "policy",
    [
        KeepRecent(budget=2000, hard_limit=4000),
        Summarize(recent_budget=1200, hard_limit=4000, lookahead_at=None),
    ],
    ids=["keep_recent", "summarize"],
)
def test_a_burst_like_an_earlier_one_finds_its_lookahead_ready(policy: ContextPolicy) -> None:
    found = asyncio.run(commits(policy))
    after_bursts = [(kind, reason) for size, kind, reason in found if size == 1800]
    assert len(after_bursts) >= 2
    # Averages alone (3 turns x ~300 tokens) started nothing before the second burst
    # ("not started" fallback); the tail of the last 32 turns starts it in time.
    assert all(kind is CommitKind.HIT for kind, _ in after_bursts), found

"""KeepRecent's paced lead: its lookahead starts as many turns ahead of the commit as the newest
one took to be warm, counted in the agent's tool waits, plus one, within [min_lead_turns,
lead_turns]. A fast engine (warm within a tool wait) gets the short lead; one whose warm-ups
outlast the lead, or a loop that shows no tool waits, the long one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from lookahead_sdk import MainState
from lookahead_sdk.base.messages import Message
from lookahead_sdk.core.warmer import RequestShape, Warmer, WarmupResult, WarmupSpend
from lookahead_sdk.strategies import KeepRecent

from ..support.clock import VirtualClock
from .test_commit_ahead import model_turn, tool_output, workload_runtime

IDLE_S = 1.0  # a model call, then its tool call: a second each (the tool call is the idle)


class TimedWarmer(Warmer):
    """A warm-up that is done `seconds` of virtual time after it starts (None: never, until a
    commit cancels it); the test calls `advance` after moving the clock."""

    def __init__(self, clock: VirtualClock, seconds: float | None) -> None:
        self.clock, self.seconds = clock, seconds
        self._pending: list[tuple[float, asyncio.Event]] = []

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        done = asyncio.Event()
        if self.seconds is not None:
            self._pending.append((self.clock.now + self.seconds, done))
            self.advance()
        await done.wait()
        return WarmupResult(len(messages), 0, self.seconds or 0.0)

    def advance(self) -> None:
        for due, done in self._pending:
            if due <= self.clock.now:
                done.set()
        self._pending = [(due, done) for due, done in self._pending if not done.is_set()]


@dataclass
class Leads:
    """Per commit, the turns between the start of the lookahead it took and the commit."""

    turns_ahead: list[int] = field(default_factory=list)
    lookahead_turns: list[float | None] = field(default_factory=list)  # at each commit
    timed: list[float] = field(default_factory=list)  # `lookahead_turns_timed`, at the end


async def leads(
    policy: KeepRecent, warm_s: float | None, steps: int = 120, *, reply_boundary: bool = True
) -> Leads:
    """The reference loop (`reply_boundary`: a boundary after the model's reply, and one after
    its tool output), or the one-boundary pattern (only after the tool output)."""
    clock = VirtualClock()
    result = Leads()
    started_at: int | None = None
    warmer = TimedWarmer(clock, warm_s)
    async with workload_runtime(policy, "lookahead", warmer=warmer) as runtime:
        runtime.clock = clock
        for step in range(steps):
            outcome = await runtime.commit()
            if outcome.committed and started_at is not None:
                result.turns_ahead.append(step - started_at)
                result.lookahead_turns.append(runtime.main.lookahead_turns)
                started_at = None
            for message in (model_turn(step), tool_output(step, 120)):
                clock.now += IDLE_S
                warmer.advance()
                before = runtime.stats.lookaheads_started
                runtime.append(message)
                if message["role"] == "assistant" and not reply_boundary:
                    continue
                await runtime.boundary()
                for _ in range(20):  # let the background work see the new time
                    await asyncio.sleep(0)
                if runtime.stats.lookaheads_started > before and started_at is None:
                    started_at = step
        result.timed = runtime.lookahead_turns_timed
    return result


def policy(**fields: float | None) -> KeepRecent:
    return KeepRecent(budget=2000, hard_limit=4000, lookahead_at=None, **fields)  # type: ignore[arg-type]


def test_a_lookahead_warm_within_its_turn_shortens_the_next_lead_to_the_minimum() -> None:
    runs = asyncio.run(leads(policy(), warm_s=0.0))
    assert len(runs.turns_ahead) >= 4, runs
    first, *later = runs.turns_ahead
    # The first lead is untimed (lead_turns, 6); the next ones start min_lead_turns (3) ahead.
    assert all(lead == first - 3 for lead in later), runs
    assert all(taken == 0.0 for taken in runs.lookahead_turns), runs


def test_a_warm_up_taking_three_tool_waits_leads_by_four() -> None:
    runs = asyncio.run(leads(policy(), warm_s=3 * IDLE_S))
    assert len(runs.turns_ahead) >= 4, runs
    assert runs.lookahead_turns == [pytest.approx(3.0)] * len(runs.lookahead_turns), runs
    assert len(runs.timed) >= len(runs.turns_ahead), runs
    assert all(turns == pytest.approx(3.0) for turns in runs.timed), runs
    first, *later = runs.turns_ahead
    assert all(lead == first - 2 for lead in later), runs  # 6 -> 4 turns ahead


def test_a_warm_up_the_commit_overtakes_keeps_the_longest_lead() -> None:
    """Never warm before its commit: it took at least the turns it ran (a lower bound), so the
    next lead stays at lead_turns; and with min_lead_turns=None the lead never moves."""
    slow = asyncio.run(leads(policy(), warm_s=None))
    fixed = asyncio.run(leads(policy(min_lead_turns=None), warm_s=0.0))
    for runs in (slow, fixed):
        assert len(runs.turns_ahead) >= 4, runs
        assert len(set(runs.turns_ahead)) == 1, runs
    assert slow.turns_ahead == fixed.turns_ahead
    assert all(taken is not None and taken >= 6 for taken in slow.lookahead_turns), slow


def test_a_loop_with_no_boundary_between_reply_and_tools_keeps_the_longest_lead() -> None:
    """Its tool waits are invisible (each reply ends at the boundary before the next call), so
    nothing is timed and the lead stays at lead_turns even on a fast engine."""
    simple = asyncio.run(leads(policy(), warm_s=0.0, reply_boundary=False))
    assert len(simple.turns_ahead) >= 4, simple
    assert len(set(simple.turns_ahead)) == 1, simple
    assert simple.timed == [], simple


@pytest.mark.parametrize(
    ("taken", "lead"), [(None, 6.0), (0.0, 3.0), (2.5, 3.5), (4.2, 5.2), (9.0, 6.0)]
)
def test_keep_recent_leads_by_the_turns_its_newest_lookahead_took(
    taken: float | None, lead: float
) -> None:
    main = MainState([{"role": "system", "content": "s"}], window_tokens=8192)
    main.tokens_per_turn = 100.0
    main.lookahead_turns = taken
    paced = KeepRecent(hard_limit=3840, commit_ahead=False)
    assert paced.lead_turns_for(main) == pytest.approx(lead)
    assert paced.soft_tokens(main) == 3840 - round(lead * 100)
    assert KeepRecent(min_lead_turns=None).lead_turns_for(main) == 6.0


@pytest.mark.parametrize("bad", [0, -1.0, 6.5, "3", True])
def test_a_min_lead_outside_zero_to_lead_turns_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ValueError, match="min_lead_turns"):
        KeepRecent(min_lead_turns=bad)  # type: ignore[arg-type]

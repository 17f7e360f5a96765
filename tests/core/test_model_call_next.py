"""At a boundary after which the model is called (the user's message, or the last tool output
of a turn), the runtime tells its warmer first: background work started there must not reach the
engine ahead of that call (`Warmer.model_call_next`, `ForegroundRegistry.expect`)."""

from __future__ import annotations

import asyncio
import time

import pytest

from lookahead_sdk import LookaheadRuntime
from lookahead_sdk.base.messages import Message
from lookahead_sdk.core.state import MainState, PartialOutput
from lookahead_sdk.strategies import KeepRecent

from ..support.clock import VirtualClock
from .policies import RecordingWarmer
from .test_commit_ahead import COUNTER, HARD, START, model_turn, tool_output


class AnnouncementWarmer(RecordingWarmer):
    def __init__(self) -> None:
        super().__init__()
        self.announced = 0

    def model_call_next(self, program_id: str) -> None:
        self.announced += 1


def two_calls(step: int) -> Message:
    turn = model_turn(step)
    second = {**turn["tool_calls"][0], "id": f"c{step}b"}
    return {**turn, "tool_calls": [*turn["tool_calls"], second]}


def test_the_model_call_is_announced_after_the_last_tool_output_only() -> None:
    async def run() -> list[int]:
        warmer = AnnouncementWarmer()
        seen: list[int] = []
        async with LookaheadRuntime(
            KeepRecent(budget=2000, hard_limit=HARD),
            messages=START[:1],
            window_tokens=8192,
            token_counter=COUNTER,
            warmer=warmer,
        ) as runtime:
            for message in (
                START[1],  # the user's task: the model is called next
                two_calls(0),  # the tools run next
                tool_output(0, 10),  # one of two outputs
                {**tool_output(0, 10), "tool_call_id": "c0b"},  # the last one: the model next
                {"role": "assistant", "content": "Done."},  # a final answer
            ):
                runtime.append(message)
                await runtime.boundary()
                seen.append(warmer.announced)
            await runtime.stream_boundary("Still writ")  # the model's call is in flight
            seen.append(warmer.announced)
        return seen

    assert asyncio.run(run()) == [1, 1, 1, 2, 2, 2]


def test_a_streaming_model_output_is_not_a_call_to_come() -> None:
    main = MainState([*START, model_turn(0), tool_output(0, 5)], token_counter=COUNTER)
    assert main.awaits_model_call()
    main.set_partial_output(PartialOutput("Reading"))
    assert not main.awaits_model_call()
    assert not MainState(START[:1], token_counter=COUNTER).awaits_model_call()


def test_the_lookahead_work_knows_when_its_commit_is_due() -> None:
    """The slack gate keeps work for a commit far off to idle time (`BackgroundWork.due_at`):
    the runtime sets it from the distance to the trigger at the history's growth rate, and
    brings it nearer at each boundary."""

    async def run() -> list[float]:
        clock = VirtualClock()
        left: list[float] = []
        policy = KeepRecent(budget=2000, hard_limit=HARD, lookahead_at=1200)
        async with LookaheadRuntime(
            policy, messages=START, window_tokens=8192, token_counter=COUNTER
        ) as runtime:
            runtime.clock = clock
            for step in range(12):
                runtime.append(model_turn(step))
                await runtime.boundary()
                runtime.append(tool_output(step, 200))
                clock.now += 2.0  # the tool call
                await runtime.boundary()
                work = runtime.lookahead.work
                if work is not None and work.due_at is not None:
                    remaining = policy.tokens_until_commit(runtime.main)
                    assert remaining is not None
                    rate = runtime.main.tokens / clock.now  # steady growth since the start
                    assert work.due_at - time.monotonic() == pytest.approx(
                        remaining / rate, rel=0.35, abs=0.5
                    )
                    left.append(work.due_at - time.monotonic())
        return left

    left = asyncio.run(run())
    assert len(left) >= 2 and left == sorted(left, reverse=True)

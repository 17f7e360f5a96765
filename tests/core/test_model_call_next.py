"""At a boundary after which the model is called (the user's message, or the last tool output
of a turn), the runtime tells its warmer first: background work started there must not reach the
engine ahead of that call (`Warmer.model_call_next`, `ForegroundRegistry.expect`)."""

from __future__ import annotations

import asyncio

from lookahead_sdk import LookaheadRuntime
from lookahead_sdk.base.messages import Message
from lookahead_sdk.core.state import MainState, PartialOutput
from lookahead_sdk.strategies import KeepRecent

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

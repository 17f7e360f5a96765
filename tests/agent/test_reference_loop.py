"""The reference agent loop feeds the runtime every segment: the model's turn is a boundary, so a
ready lookahead warms it while the tools run and the commit turn prefills only the newest output."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from lookahead_sdk import CommitKind, RuntimeConfig
from lookahead_sdk.agent.loop import ReferenceAgent
from lookahead_sdk.agent.workload import Delegation, PlannedCall
from lookahead_sdk.base.completion import ChatResult, Completion
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tools import Tool, ToolRegistry
from lookahead_sdk.strategies import Isolate, KeepRecent

from ..core.policies import RecordingWarmer

STEPS = 12


class ScriptedLLM:
    """Answers every turn with a short assistant message (the plan supplies the tool calls)."""

    model = "scripted"

    def __init__(self) -> None:
        self.prompts: list[list[Message]] = []

    async def complete(self, messages: Sequence[Message], **_: Any) -> Completion:
        return Completion("summary")

    async def chat(self, messages: Sequence[Message], **_: Any) -> ChatResult:
        self.prompts.append(list(messages))
        await asyncio.sleep(0.01)  # the model takes time: background work runs meanwhile
        message = {"role": "assistant", "content": f"reading part {len(self.prompts)}"}
        return ChatResult(message, 0.0, 0.0, 0, 0, 0)


async def test_model_turn_is_warmed_while_its_tools_run(approx_counter) -> None:
    warmer = RecordingWarmer()
    warmed_while_tool_ran: list[Message | None] = []

    async def probe(part: int) -> str:
        await asyncio.sleep(0.02)  # a tool takes time: the warm-up of the turn runs meanwhile
        warmed_while_tool_ran.append(warmer.warmed[-1][-1] if warmer.warmed else None)
        return f"part {part}: " + "source line " * 60

    tool = Tool("probe", "read a part", {"type": "object", "properties": {}}, probe)
    llm = ScriptedLLM()
    agent = ReferenceAgent(
        llm,  # type: ignore[arg-type]
        ToolRegistry([tool]),
        policy=KeepRecent(budget=400, lookahead_at=700, hard_limit=1200),
        config=RuntimeConfig(warmer=warmer, token_counter=approx_counter, window_tokens=4096),
    )
    plan = [PlannedCall("probe", {"part": step}) for step in range(STEPS)]
    run = await agent.run("system", "task", plan=plan)

    assert run.stats.hits >= 1 and run.stats.fallbacks == 0
    # Each completed step is two segments: the model's turn and its tool output.
    assert run.stats.boundaries == 2 * STEPS
    # Once a lookahead was ready, the warm-up running during a tool call had the model's call.
    warmed_calls = [
        message
        for message in warmed_while_tool_ran
        if message is not None and message.get("role") == "assistant"
    ]
    assert warmed_calls and all(message.get("tool_calls") for message in warmed_calls)
    hit_turns = [turn for turn in run.turns if turn.commit is CommitKind.HIT]
    assert len(hit_turns) == run.stats.hits


class SilentLLM(ScriptedLLM):
    """Writes nothing (no streamed delta) on every turn: an empty delegation instruction."""

    async def chat(self, messages: Sequence[Message], **_: Any) -> ChatResult:
        self.prompts.append(list(messages))
        await asyncio.sleep(0.01)
        return ChatResult({"role": "assistant", "content": None}, 0.0, 0.0, 0, 0, 0)


async def test_a_delegation_warms_the_subagent_before_its_instruction_streams(
    approx_counter,
) -> None:
    warmer = RecordingWarmer()
    handover = "You review one module. " + "Handover notes. " * 40
    agent = ReferenceAgent(
        SilentLLM(),  # type: ignore[arg-type]
        ToolRegistry([]),
        policy=Isolate(subagent_system=handover),
        config=RuntimeConfig(warmer=warmer, token_counter=approx_counter, window_tokens=4096),
    )
    plan = [Delegation("m.py", "Delegate the review of m.py.", handover, ())]
    run = await agent.run("system", "task", plan=plan)

    # The model wrote no instruction, yet the sub-agent's context was prefilled from the start
    # of the delegation turn, and its first call committed it.
    assert run.stats.hits == 1 and run.stats.fallbacks == 0
    assert warmer.warmed[0] == [
        {"role": "system", "content": handover},
        {"role": "user", "content": ""},
    ]
    assert [turn.commit for turn in run.turns if turn.agent == "sub"] == [CommitKind.HIT]


async def test_the_plan_length_bounds_the_run_so_no_lookahead_is_thrown_away(
    approx_counter,
) -> None:
    """The loop tells the runtime how many model calls its plan (or `max_steps`) leaves: a
    lookahead the run would end before committing is not started, whatever the plan's length."""
    skipped = 0
    for steps in range(STEPS, STEPS + 8):

        async def probe(part: int) -> str:
            return f"part {part}: " + "source line " * 60

        tool = Tool("probe", "read a part", {"type": "object", "properties": {}}, probe)
        agent = ReferenceAgent(
            ScriptedLLM(),  # type: ignore[arg-type]
            ToolRegistry([tool]),
            policy=KeepRecent(budget=400, lookahead_at=700, hard_limit=1200),
            config=RuntimeConfig(
                warmer=RecordingWarmer(), token_counter=approx_counter, window_tokens=4096
            ),
        )
        plan = [PlannedCall("probe", {"part": step}) for step in range(steps)]
        run = await agent.run("system", "task", plan=plan)
        assert run.stats.hits >= 1 and run.stats.fallbacks == 0, steps
        assert run.stats.wasted_prompt_tokens == 0, (steps, run.stats)
        skipped += run.stats.out_of_reach_starts > 0
    assert skipped >= 1

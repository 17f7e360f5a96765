"""`model_call_limit=` on each framework adapter: a one-task agent stopped by its framework's own
step limit (LangChain `ModelCallLimitMiddleware`, AutoGen `max_tool_iterations`, LlamaIndex
`max_iterations`) starts no lookahead it would stop before committing. Real framework agents,
each framework's own fake model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from autogen_agentchat.agents import AssistantAgent
from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware
from langchain_core.messages import HumanMessage
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.workflow.errors import WorkflowRuntimeError

from lookahead_sdk.adapters.autogen import LookaheadModelClient
from lookahead_sdk.core.runtime import CommitKind, LookaheadRuntime
from lookahead_sdk.core.state import LookaheadStatus

from . import test_autogen_adapter as autogen_fakes
from . import test_langchain_adapter as langchain_fakes
from . import test_llamaindex_adapter as llamaindex_fakes

RUN_LENGTHS = range(3, 15)


@dataclass(frozen=True)
class Ended:
    commits: list[CommitKind]  # per model call
    started: int
    out_of_reach: int
    left_over: LookaheadStatus  # the lookahead when the run ended

    @classmethod
    def of(cls, commits: list[CommitKind], runtime: LookaheadRuntime) -> Ended:
        stats = runtime.stats
        return cls(
            commits, stats.lookaheads_started, stats.out_of_reach_starts, runtime.lookahead.status
        )


def langchain_run(steps: int, limit: int | None) -> Ended:
    model = langchain_fakes.fake_model(
        [{"name": "read", "args": {"n": i}} for i in range(steps + 4)]
    )
    lookahead = langchain_fakes.middleware(
        langchain_fakes.small_keep_recent(), release_after_agent=False, model_call_limit=limit
    )
    stop = ModelCallLimitMiddleware(run_limit=steps, exit_behavior="end")
    agent = create_agent(
        model, [langchain_fakes.read_tool()], system_prompt="analyze", middleware=[lookahead, stop]
    )
    try:
        agent.invoke({"messages": [HumanMessage("go")]})
        return Ended.of([c.commit for c in lookahead.calls], lookahead.runtime_for().runtime)
    finally:
        lookahead.close()


def autogen_run(steps: int, limit: int | None) -> Ended:
    ctx = autogen_fakes.context(
        autogen_fakes.KeepRecent(budget=400, lookahead_at=600, hard_limit=900, commit_ahead=False),
        model_call_limit=limit,
    )
    agent = AssistantAgent(
        "analyst",
        LookaheadModelClient(autogen_fakes.replay(steps + 4), context=ctx),
        tools=[autogen_fakes.read],
        system_message="analyze",
        model_context=ctx,
        max_tool_iterations=steps,
    )

    async def go() -> Ended:
        try:
            await agent.run(task="go")
            return Ended.of([c.commit for c in ctx.calls], ctx.runtime)
        finally:
            await ctx.aclose()

    return asyncio.run(go())


def llamaindex_run(steps: int, limit: int | None) -> Ended:
    llm = llamaindex_fakes.wrapped(
        llamaindex_fakes.Recorder(llamaindex_fakes.function_calls(steps + 4)),
        llamaindex_fakes.KeepRecent(
            budget=400, lookahead_at=600, hard_limit=900, commit_ahead=False
        ),
        model_call_limit=limit,
    )
    agent = FunctionAgent(tools=[llamaindex_fakes.read], llm=llm, system_prompt="analyze")

    async def go() -> Ended:
        try:
            # The default early stop ("force"): N calls, then the run raises. ("generate" adds a
            # call whose messages are not the history's continuation: the lookahead goes stale.)
            with pytest.raises(WorkflowRuntimeError, match="Max iterations"):
                await agent.run("go", memory=llm.memory(), max_iterations=steps)
            return Ended.of([c.commit for c in llm.calls], (await llm.asession()).runtime)
        finally:
            await llm.aclose()

    return asyncio.run(go())


# Each framework's run, and the model calls it makes for a step limit of N.
FRAMEWORKS: dict[str, tuple[Callable[[int, int | None], Ended], Callable[[int], int]]] = {
    "langchain": (langchain_run, lambda steps: steps),
    "autogen": (autogen_run, lambda steps: steps),
    "llamaindex": (llamaindex_run, lambda steps: steps),
}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_a_one_task_agent_starts_no_lookahead_its_step_limit_would_throw_away(
    framework: str,
) -> None:
    """Over several step limits: without `model_call_limit` some run ends with a lookahead it
    never commits; with it, no run does, and nothing is lost: every commit a hit or a fallback,
    as many hits as without (within the one segment by which a commit's size may vary)."""
    run, calls_for = FRAMEWORKS[framework]
    thrown_away = 0
    for steps in RUN_LENGTHS:
        without = run(steps, None)
        limited = run(steps, calls_for(steps))
        assert len(limited.commits) == calls_for(steps)  # the framework's limit stopped it
        assert set(limited.commits) <= {CommitKind.NONE, CommitKind.HIT, CommitKind.FALLBACK}
        hits = [ended.commits.count(CommitKind.HIT) for ended in (limited, without)]
        assert abs(hits[0] - hits[1]) <= 1, (steps, limited, without)
        assert limited.left_over is LookaheadStatus.IDLE, (steps, limited)
        thrown_away += without.left_over is not LookaheadStatus.IDLE
    assert thrown_away >= 2, "no run length left a lookahead uncommitted: the test shows nothing"

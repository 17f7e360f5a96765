"""End to end on the real embedded llama.cpp engine: the reference agent with each strategy,
lookahead vs sync, a recording proxy in front of the engine to see what the server received.

Prompts are kept small (150-180-token tool outputs, limits around 1K tokens) so the suite runs
in a few minutes on 2 CPU cores. What is asserted is behaviour, not speed: commits happen, the
lookahead result is committed, the warm-up made the commit request find its prefix cached, and
the tags arrived.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lookahead_sdk import (
    CommitKind,
    Endpoint,
    LlamaCppWarmer,
    LookaheadRuntime,
    OffloadStore,
    RuntimeConfig,
    ServerSession,
)
from lookahead_sdk.agent.driver import handover_from_history
from lookahead_sdk.agent.loop import AgentRun, ReferenceAgent
from lookahead_sdk.agent.workload import MAIN_SYSTEM_PROMPT, CodeAnalysisWorkload, workload_tools
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import program
from lookahead_sdk.base.tokens import auto_token_counter
from lookahead_sdk.base.tools import ToolRegistry
from lookahead_sdk.core.policy import ContextPolicy
from lookahead_sdk.strategies import Isolate, KeepRecent, Offload, Summarize

from ..support.recording_proxy import RecordingProxy

pytestmark = pytest.mark.engine

STEPS = 8
TOOL_OUTPUT_TOKENS = (150, 180)
# The largest tool output plus its assistant turn (a JSON tool call) and template tokens.
NEWEST_SEGMENT_MAX_TOKENS = TOOL_OUTPUT_TOKENS[1] + 80


def small_policy(strategy: str, store_dir: Path, workload: CodeAnalysisWorkload) -> ContextPolicy:
    limits = {"lookahead_at": 650, "hard_limit": 1000}
    if strategy == "offload":
        # Placeholders stay in the context: more room above them, or every step would commit.
        return Offload(
            threshold=100, store=OffloadStore(store_dir), **{**limits, "hard_limit": 1400}
        )
    if strategy == "keep_recent":
        return KeepRecent(budget=500, **limits)
    if strategy == "summarize":
        return Summarize(recent_budget=300, summary_tokens=24, **limits)
    return Isolate(subagent_system=handover_from_history(workload.delegation_plan()))


class SettlingAgent(ReferenceAgent):
    """The reference agent, remembering its runtime so its tools can wait on it."""

    def new_runtime(self, messages: Sequence[Message]) -> LookaheadRuntime:
        runtime = super().new_runtime(messages)
        self.tools.runtime = runtime  # type: ignore[attr-defined]
        return runtime


class SettlingTools(ToolRegistry):
    """Each tool call lasts until the runtime's background work is done: the test asserts what a
    finished warm-up leaves, so it waits for it instead of racing a busy machine for it."""

    runtime: LookaheadRuntime | None = None

    async def call(self, name: str, arguments: str | dict[str, Any]) -> str:
        output = await super().call(name, arguments)
        if self.runtime is not None:
            await self.runtime.settle(timeout_s=120)
        return output


def run_agent(base_url: str, strategy: str, mode: str, store_dir: Path) -> AgentRun:
    async def go() -> AgentRun:
        counter = auto_token_counter(base_url)
        workload = CodeAnalysisWorkload(
            seed=3,
            steps=STEPS if strategy != "isolate" else 2,
            token_counter=counter,
            tokens_per_output=TOOL_OUTPUT_TOKENS,
            large_output_every=0,
            handover_tokens=200,
            # Tools take time (a sandbox round trip): the slack the background work runs in.
            tool_latency_s=0.8 if mode == "lookahead" else 0.0,
        )
        plan = workload.delegation_plan() if strategy == "isolate" else workload.read_plan()
        session = await ServerSession.connect(base_url)
        llm = Endpoint.from_session(session, emulate_tool_calls=False).chat_client()
        warmer = LlamaCppWarmer(session) if mode == "lookahead" else None
        agent = SettlingAgent(
            llm,
            SettlingTools(workload_tools(workload)),
            policy=small_policy(strategy, store_dir, workload),
            config=RuntimeConfig(mode=mode, warmer=warmer, token_counter=counter),
            max_tokens=6,
            instruction_tokens=40,
        )
        try:
            async with program(f"e2e-{strategy}-{mode}", release_to=()):
                return await agent.run(MAIN_SYSTEM_PROMPT, workload.task(), plan=plan)
        finally:
            await llm.aclose()
            if warmer is not None:
                await warmer.aclose()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def proxy(embedded_engine):
    with RecordingProxy(upstream=embedded_engine.base_url) as recording:
        yield recording


@pytest.mark.parametrize("strategy", ["offload", "keep_recent", "summarize", "isolate"])
def test_lookahead_commits_a_prefilled_context(
    strategy: str, proxy: RecordingProxy, tmp_path: Path
) -> None:
    proxy.requests.clear()
    run = run_agent(proxy.url, strategy, "lookahead", tmp_path)
    transform_turns = [turn for turn in run.turns if turn.is_transform_turn]
    assert transform_turns, "the workload never reached the commit point"
    assert run.stats.hits >= 1 and run.stats.fallbacks == 0
    assert run.stats.warmups >= 1
    hits = [turn for turn in transform_turns if turn.commit is CommitKind.HIT]
    for turn in hits:
        # The warm-up pre-materialized the committed prefix: only the newest segment (the
        # tool output that arrived right before the commit, with its turn) is computed.
        assert not turn.cold_hit, turn
        assert turn.prompt_tokens - turn.cached_tokens <= NEWEST_SEGMENT_MAX_TOKENS, turn

    warmups = proxy.bodies("/completion")
    assert warmups and all(body["n_predict"] == 0 and body["cache_prompt"] for body in warmups)
    assert all(
        body["is_lookahead"]
        and body["priority_class"] in ("be", "lc")
        and body["program_id"] == f"e2e-{strategy}-lookahead"
        for body in warmups
    )
    main_program = f"e2e-{strategy}-lookahead"
    chats = proxy.bodies("/chat/completions")
    foreground = [body for body in chats if not body.get("is_lookahead")]
    assert foreground and all(body["priority_class"] == "lc" for body in foreground)
    programs = {body["program_id"] for body in foreground}
    headers = {
        r.headers.get("x-program-id")
        for r in proxy.requests
        if r.path.endswith("/chat/completions")
    }
    assert main_program in programs and headers == programs
    # Isolate's sub-agents are programs of their own, named under the parent; nothing else.
    expected_children = strategy == "isolate"
    children = programs - {main_program}
    assert all(child.startswith(f"{main_program}/sub") for child in children)
    assert bool(children) == expected_children, programs
    if strategy == "summarize":
        summaries = [body for body in chats if body.get("is_lookahead")]
        assert summaries and all(
            b["priority_class"] == "be" and b["temperature"] == 0 and b["max_tokens"] == 24
            for b in summaries
        )


@pytest.mark.parametrize("strategy", ["summarize", "isolate"])
def test_sync_mode_transforms_on_the_critical_path(
    strategy: str, proxy: RecordingProxy, tmp_path: Path
) -> None:
    proxy.requests.clear()
    run = run_agent(proxy.url, strategy, "sync", tmp_path)
    kinds = {turn.commit for turn in run.turns if turn.is_transform_turn}
    assert kinds == {CommitKind.SYNC}
    assert run.stats.warmups == 0 and not proxy.bodies("/completion")
    assert not any(body.get("is_lookahead") for body in proxy.bodies("/chat/completions"))

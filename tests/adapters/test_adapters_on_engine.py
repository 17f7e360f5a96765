"""Each adapter with its real framework on the real embedded engine, behind a recording proxy.

The model writes real tool calls (constrained decoding through the tool-call transport) that run
a real file reader. What the server received is asserted: after a commit the request carries the
committed context (system prompt, the summary, the recent turns verbatim), the next request
continues from it, and every request carries the program's tags. Prompts are small (12-line
reads, a 900-token hard limit) so each framework needs about six model calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from lookahead_sdk import RequestTags
from lookahead_sdk.bench import examples as demo
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.client.toolcalls import render_tool_calls
from lookahead_sdk.core.runtime import CommitKind, RuntimeStats
from lookahead_sdk.strategies import Summarize
from lookahead_sdk.strategies.summarize import SUMMARY_PREFIX

from ..support.recording_proxy import RecordingProxy

pytestmark = pytest.mark.engine

STEPS = 7
MAX_TOKENS = 80


def small_policy() -> Summarize:
    return Summarize(lookahead_at=600, hard_limit=900, recent_budget=300, summary_tokens=24)


@pytest.fixture(scope="module")
def proxy(embedded_engine: Any) -> Iterator[RecordingProxy]:
    with RecordingProxy(upstream=embedded_engine.base_url) as recording:
        yield recording


@pytest.fixture
def endpoint(proxy: RecordingProxy) -> Endpoint:
    proxy.requests.clear()
    return Endpoint.connect(proxy.url)


def foreground(proxy: RecordingProxy) -> list[dict[str, Any]]:
    """The agent's own model calls: tools offered, so the transport constrained them."""
    return [body for body in proxy.bodies("/chat/completions") if "response_format" in body]


def assert_commit_reached_the_server(
    proxy: RecordingProxy,
    commit_calls: list[int],
    program_id: str,
    stats: RuntimeStats,
    run_calls: int | None = None,
) -> None:
    """`run_calls`: how many of the recorded agent calls belong to the run checked (a later run,
    e.g. one resumed from saved state, may commit on its first call)."""
    # Every warm-up the server was asked for rendered (e.g. a history ending on a tool call).
    assert stats.warmup_failures == 0 and stats.failures == 0
    bodies = foreground(proxy)[:run_calls]
    assert commit_calls, "the agent never reached the hard limit"
    for i in commit_calls:
        sent, before = bodies[i]["messages"], bodies[i - 1]["messages"]
        assert sent[0] == before[0] and sent[0]["role"] == "system"
        assert sent[1]["role"] == "user" and sent[1]["content"].startswith(SUMMARY_PREFIX)
        assert len(sent) < len(before) + 2
        # After the summary come the recent turns verbatim: the end of the uncommitted history,
        # which is the previous request plus the model's call and the tool output since.
        assert [m["role"] for m in sent[-2:]] == ["assistant", "tool"]
        kept = sent[2:-2]
        assert kept == before[len(before) - len(kept) :]
        if i + 1 < len(bodies):  # the next call continues from the committed context
            assert bodies[i + 1]["messages"][: len(sent)] == sent
    assert all(
        body["program_id"] == program_id and body["priority_class"] == "lc" for body in bodies
    )
    summaries = [
        body for body in proxy.bodies("/chat/completions") if "response_format" not in body
    ]
    assert summaries and all(body["program_id"] == program_id for body in summaries)
    warmups = proxy.bodies("/completion")
    assert all(body["is_lookahead"] and body["program_id"] == program_id for body in warmups)


def commit_indices(kinds: list[CommitKind]) -> list[int]:
    return [i for i, kind in enumerate(kinds) if kind is not CommitKind.NONE]


def test_langchain_middleware_on_the_engine(endpoint: Endpoint, proxy: RecordingProxy) -> None:
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelCallLimitMiddleware
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI

    from lookahead_sdk.adapters.langchain import LookaheadMiddleware

    gate = endpoint.slack_gate()
    middleware = LookaheadMiddleware(
        small_policy(),
        summarizer=endpoint.chat_client(gate),
        warmer=endpoint.warmer(gate),
        token_counter=endpoint.token_counter(),
        tags=RequestTags(program_id="lc-engine"),
        release_after_agent=False,  # the test reads the thread's runtime after the run
    )
    model = ChatOpenAI(
        model=endpoint.model,
        base_url=endpoint.openai_base_url,
        api_key="x",
        temperature=0,
        max_tokens=MAX_TOKENS,
        http_async_client=endpoint.async_http_client(),
        streaming=True,
    )
    agent = create_agent(
        model,
        [StructuredTool.from_function(coroutine=demo.source_reader(lines=12))],
        system_prompt=demo.SYSTEM_PROMPT,
        middleware=[middleware, ModelCallLimitMiddleware(run_limit=STEPS, exit_behavior="end")],
    )

    async def go() -> RuntimeStats:
        try:
            await agent.ainvoke({"messages": [{"role": "user", "content": demo.task()}]})
            return middleware.runtime_for().runtime.stats
        finally:
            await middleware.aclose()

    stats = asyncio.run(go())
    assert_commit_reached_the_server(
        proxy, commit_indices([c.commit for c in middleware.calls]), "lc-engine", stats
    )
    tool_messages = [
        m for body in foreground(proxy) for m in body["messages"] if m["role"] == "tool"
    ]
    assert any(m["content"].startswith("# ") for m in tool_messages)  # real source was read


def test_llamaindex_llm_on_the_engine(endpoint: Endpoint, proxy: RecordingProxy) -> None:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.llms.openai_like import OpenAILike

    from lookahead_sdk.adapters.llamaindex import LookaheadLLM

    gate = endpoint.slack_gate()
    model = OpenAILike(
        model=endpoint.model,
        api_base=endpoint.openai_base_url,
        api_key="x",
        is_chat_model=True,
        is_function_calling_model=True,
        context_window=endpoint.window_tokens,
        temperature=0,
        max_tokens=MAX_TOKENS,
        async_http_client=endpoint.async_http_client(),
        max_retries=0,
    )
    llm = LookaheadLLM(
        model,
        small_policy(),
        summarizer=endpoint.chat_client(gate),
        warmer=endpoint.warmer(gate),
        token_counter=endpoint.token_counter(),
        tags=RequestTags(program_id="li-engine"),
    )
    agent = FunctionAgent(
        tools=[demo.source_reader(lines=12)], llm=llm, system_prompt=demo.SYSTEM_PROMPT
    )

    async def go() -> None:
        try:
            await agent.run(
                demo.task(),
                memory=llm.memory(),
                max_iterations=STEPS,
                early_stopping_method="generate",
            )
        finally:
            await llm.aclose()

    asyncio.run(go())
    assert_commit_reached_the_server(
        proxy, commit_indices([c.commit for c in llm.calls]), "li-engine", llm.session.runtime.stats
    )


def test_autogen_context_on_the_engine_and_its_state_round_trip(
    endpoint: Endpoint, proxy: RecordingProxy
) -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.models import ModelFamily
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from lookahead_sdk.adapters.autogen import (
        LookaheadChatCompletionContext,
        LookaheadModelClient,
        to_openai,
    )

    info = {
        "vision": False,
        "function_calling": True,
        "json_output": True,
        "structured_output": True,
        "family": ModelFamily.UNKNOWN,
    }
    client = OpenAIChatCompletionClient(
        model=endpoint.model,
        base_url=endpoint.openai_base_url,
        api_key="x",
        model_info=info,
        http_client=endpoint.async_http_client(),
        temperature=0,
        max_tokens=MAX_TOKENS,
        max_retries=0,
    )

    def new_context() -> LookaheadChatCompletionContext:
        gate = endpoint.slack_gate()
        return LookaheadChatCompletionContext(
            small_policy(),
            model_client=client,  # its server reports the window
            system_message=demo.SYSTEM_PROMPT,
            model=endpoint.model,
            summarizer=endpoint.chat_client(gate),
            warmer=endpoint.warmer(gate),
            token_counter=endpoint.token_counter(),
            tags=RequestTags(program_id="ag-engine"),
        )

    def agent(context: LookaheadChatCompletionContext, iterations: int) -> AssistantAgent:
        return AssistantAgent(
            "analyst",
            LookaheadModelClient(client, context=context),
            tools=[demo.source_reader(lines=12)],
            system_message=demo.SYSTEM_PROMPT,
            model_context=context,
            max_tool_iterations=iterations,
        )

    async def go() -> tuple[LookaheadChatCompletionContext, list[Any], list[Any], CommitKind]:
        first = new_context()
        try:
            await agent(first, STEPS).run(task=demo.task())
            state = await first.save_state()
            saved = first.messages
        finally:
            await first.aclose()
        second = new_context()
        try:
            await second.load_state(state)
            restored = second.messages
            requests_before = len(foreground(proxy))
            await agent(second, 1).run(task="Continue with the next chunk.")
            resumed = foreground(proxy)[requests_before]["messages"]
        finally:
            await second.aclose()
            await client.close()
        assert restored == saved
        return first, saved, resumed, second.calls[0].commit

    first, saved, resumed, resumed_commit = asyncio.run(go())
    assert_commit_reached_the_server(
        proxy,
        commit_indices([c.commit for c in first.calls]),
        "ag-engine",
        first.runtime.stats,
        run_calls=len(first.calls),
    )
    # The resumed run's first request is built from the restored history plus the new task.
    system = {"role": "system", "content": demo.SYSTEM_PROMPT}
    expected = [
        m["content"]
        for m in render_tool_calls(
            [system, *[d for m in saved for d in to_openai(m, model=endpoint.model)]]
        )
    ]
    expected.append("Continue with the next chunk.")
    contents = [m["content"] for m in resumed]
    if resumed_commit is CommitKind.NONE:
        assert contents == expected
    else:  # the new task crossed the hard limit: the request is the commit of that history
        assert contents[0] == expected[0] and contents[1].startswith(SUMMARY_PREFIX)
        assert contents[2:] == expected[len(expected) - len(contents) + 2 :]


@pytest.mark.parametrize(
    "example", ["reference_agent", "langchain_agent", "llamaindex_agent", "autogen_agent"]
)
def test_examples_run_end_to_end(example: str, embedded_engine: Any, tmp_path: Any) -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / f"{example}.py"
    out = tmp_path / "rows.json"
    completed = subprocess.run(
        [
            sys.executable,
            str(script),
            "--base-url",
            embedded_engine.base_url,
            "--steps",
            "2",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    document = json.loads(out.read_text())
    rows = document["rows"]
    assert rows and all(row["context_tokens"] > 0 for row in rows)
    # Where each turn's TTFT went: every turn with a first token is on the request timeline, and
    # its causes add up to its TTFT.
    timed = [row for row in rows if row["ttft_s"] is not None]
    assert timed and all(row["first_token_at"] for row in timed)
    traced = sum(sum(causes.values()) for causes in document["turn_wait_s"].values())
    assert traced == pytest.approx(sum(row["ttft_s"] for row in timed), abs=1e-6)
    assert document["turn_wait_s"]["normal"]["alone"] > 0
    # One agent: no other request beside its turns (a request never seen to end would be).
    assert all(causes["other_foreground"] == 0 for causes in document["turn_wait_s"].values())
    assert set(document["background"]) == {"warm_up", "background_llm", "slot_copy"}


def test_a_framework_agent_through_the_endpoints_warmer_copies_its_live_context(
    endpoint: Endpoint, proxy: RecordingProxy, tmp_path: Any
) -> None:
    """On the embedded engine `Endpoint.warmer()` wraps the llama.cpp warmer for tool-call
    emulation; every hook must still reach it. Past Offload's trigger with nothing left to
    offload, each model turn's live context is copied into the program's branch slot while its
    tools run (llama.cpp slot save + restore, seen by the server) and the copies are counted."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelCallLimitMiddleware
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI

    from lookahead_sdk import OffloadStore
    from lookahead_sdk.adapters.langchain import LookaheadMiddleware
    from lookahead_sdk.strategies import Offload

    assert endpoint.emulate_tool_calls, "the embedded engine needs tool-call emulation"
    config = endpoint.runtime_config(tags=RequestTags(program_id="lc-copies"))
    spends: list[object] = []
    inner = config.warmer.inner  # type: ignore[union-attr]
    original = inner.warm

    async def recording_warm(*args: Any, **kwargs: Any) -> Any:
        spends.append(kwargs.get("spend"))
        return await original(*args, **kwargs)

    inner.warm = recording_warm  # type: ignore[method-assign]
    # Outputs of 12 lines stay below the offload threshold: nothing to offload, past the trigger.
    policy = Offload(
        threshold=2000, lookahead_at=300, hard_limit=6000, store=OffloadStore(tmp_path)
    )
    middleware = LookaheadMiddleware(policy, config, release_after_agent=False)
    model = ChatOpenAI(
        model=endpoint.model,
        base_url=endpoint.openai_base_url,
        api_key="x",
        temperature=0,
        max_tokens=MAX_TOKENS,
        http_async_client=endpoint.async_http_client(),
        streaming=True,
    )
    agent = create_agent(
        model,
        [StructuredTool.from_function(coroutine=demo.source_reader(lines=12, latency_s=0.5))],
        system_prompt=demo.SYSTEM_PROMPT,
        middleware=[middleware, ModelCallLimitMiddleware(run_limit=5, exit_behavior="end")],
    )

    async def go() -> RuntimeStats:
        try:
            await agent.ainvoke({"messages": [{"role": "user", "content": demo.task()}]})
            hosted = middleware.runtime_for().hosted
            await hosted.acall(_settled)
            return hosted.runtime.stats
        finally:
            await middleware.aclose()

    stats = asyncio.run(go())
    saves = [r.path for r in proxy.requests if r.path.startswith("/slots/")]
    assert stats.live_copies >= 1, "no live-context copy reached the engine"
    assert len(saves) >= 2 * stats.live_copies  # each copy: a save of the live slot, a restore
    assert all(spend is not None for spend in spends)  # warm-ups report what they computed


async def _settled(runtime: Any) -> None:
    await runtime.settle()

"""Each adapter as a user adopts it, with the real framework classes on the embedded engine:
the framework's own model object summarizes (no summarizer given), the window and the
tokenizer are learned from the server, commits come through the framework's own event channel,
and the agent's state resumes through the framework's own persistence in a new process.

The agents are `engine_agents.py`'s; behind a recording proxy, so what reached the server is
asserted too."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookahead_sdk import Endpoint
from lookahead_sdk.adapters._session import Discovered
from lookahead_sdk.strategies.summarize import DEFAULT_INSTRUCTION

from ..support.recording_proxy import RecordingProxy
from . import engine_agents as agents

pytestmark = pytest.mark.engine

STEPS = 7
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def proxy(embedded_engine: Any) -> Iterator[RecordingProxy]:
    with RecordingProxy(upstream=embedded_engine.base_url) as recording:
        yield recording


@pytest.fixture
def endpoint(proxy: RecordingProxy) -> Endpoint:
    proxy.requests.clear()
    return Endpoint.connect(proxy.url)


def assert_learned_from_the_server(found: Discovered | None, model: object) -> None:
    assert found is not None
    assert found.window_tokens == 8192  # the engine's n_ctx per slot, from /props
    assert "(llama.cpp)" in found.token_counter.name  # the engine's own /tokenize
    assert found.wire == "llamacpp" and found.config.warmer is not None  # warmer="auto"
    assert getattr(found.config.summarizer, "model", None) is model  # the agent's own model


def summaries_reached_the_server(proxy: RecordingProxy, program_id: str) -> list[dict[str, Any]]:
    bodies = [
        body
        for body in proxy.bodies("/chat/completions")
        if body["messages"][-1].get("content") == DEFAULT_INSTRUCTION
    ]
    assert bodies, "no summary request reached the server"
    assert all(body["program_id"] == program_id for body in bodies)
    return bodies


def resume_in_a_new_process(framework: str, base_url: str, saved: Path) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, "-m", "tests.adapters.engine_agents", framework, base_url, str(saved)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def assert_resumed(resumed: dict[str, Any], commits_before: int, *, summarized: bool) -> None:
    assert resumed["commits"] >= commits_before >= 1  # the saved stats came back
    assert resumed["continued"]  # the new turn went after the restored history
    assert resumed["summarized"] or not summarized  # the summary it held is still there
    assert resumed["window_tokens"] == 8192


def test_langchain(endpoint: Endpoint, proxy: RecordingProxy, tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from lookahead_sdk.adapters.langchain import LookaheadCallbackHandler

    handler = LookaheadCallbackHandler()
    saver = InMemorySaver()
    model, middleware, agent = agents.langchain_agent(endpoint, STEPS, saver, [handler])
    config = {"configurable": {"thread_id": agents.THREAD}, "callbacks": [handler]}

    async def go() -> int:
        try:
            await agent.ainvoke({"messages": [{"role": "user", "content": demo_task()}]}, config)
            return middleware.runtime_for(agents.THREAD).runtime.stats.commits
        finally:
            await middleware.aclose()

    commits = asyncio.run(go())
    assert_learned_from_the_server(middleware.discovered, model)
    assert any(e.type == "commit" for e in handler.lookahead_events)  # LangChain custom events
    assert any(call.name == "lookahead_summary" for call in handler.model_calls)  # traced
    summaries_reached_the_server(proxy, "lc-int/t1")
    saved = tmp_path / "checkpoints.pickle"
    agents.dump_saver(saver, saved)
    assert_resumed(resume_in_a_new_process("langchain", proxy.url, saved), commits, summarized=True)


def test_llamaindex(endpoint: Endpoint, proxy: RecordingProxy, tmp_path: Path) -> None:
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.events.llm import LLMChatStartEvent
    from llama_index.core.workflow import Context

    from lookahead_sdk.adapters.llamaindex import LookaheadCommitEvent

    seen: list[Any] = []

    class Events(BaseEventHandler):
        def handle(self, event: Any, **kwargs: Any) -> None:
            seen.append(event)

    model, llm, agent = agents.llamaindex_agent(endpoint)
    handler = Events()
    get_dispatcher().add_event_handler(handler)

    async def go() -> dict[str, Any]:
        try:
            ctx = Context(agent)
            await agent.run(
                demo_task(),
                ctx=ctx,
                memory=llm.memory(),
                max_iterations=STEPS,
                early_stopping_method="generate",
            )
            # A run stopped at max_iterations leaves its scratchpad in the Context, ending on the
            # model's unanswered tool call, which a resumed run would send after its new message
            # (LlamaIndex's own behaviour; a run that ends by itself clears it). Its final
            # answer was generated from the memory alone, which is what the history now holds.
            await ctx.store.set("scratchpad", [])
            return ctx.to_dict()
        finally:
            await llm.aclose()

    try:
        data = asyncio.run(go())
    finally:
        get_dispatcher().event_handlers.remove(handler)
    assert_learned_from_the_server(llm.discovered, model)
    assert any(isinstance(e, LookaheadCommitEvent) for e in seen)  # instrumentation events
    assert any(  # the summary is a chat call LlamaIndex instrumented
        isinstance(e, LLMChatStartEvent) and e.messages[-1].content == DEFAULT_INSTRUCTION
        for e in seen
    )
    summaries_reached_the_server(proxy, "li-int")
    saved = tmp_path / "context.json"
    saved.write_text(json.dumps(data))
    commits = llm.session.runtime.stats.commits
    resumed = resume_in_a_new_process("llamaindex", proxy.url, saved)
    assert_resumed(resumed, commits, summarized=False)


def test_autogen(
    endpoint: Endpoint, proxy: RecordingProxy, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from autogen_core import EVENT_LOGGER_NAME
    from autogen_core.logging import LLMCallEvent

    from lookahead_sdk.adapters.autogen import AutoGenLookaheadEvent

    client, tagged, context, agent = agents.autogen_agent(endpoint, STEPS)

    async def go() -> dict[str, Any]:
        try:
            await agent.run(task=demo_task())
            return {
                "state": await agent.save_state(),
                "context": context.dump_component().model_dump(mode="json"),
                "client": tagged.dump_component().model_dump(mode="json"),
            }
        finally:
            await context.aclose()
            await client.close()

    with caplog.at_level(logging.INFO, logger=EVENT_LOGGER_NAME):
        document = asyncio.run(go())
    assert_learned_from_the_server(context.discovered, client)
    logged = [r.msg for r in caplog.records]
    assert any(  # AutoGen's event logger
        isinstance(e, AutoGenLookaheadEvent) and e.event.type == "commit" for e in logged
    )
    assert any(  # the summary is an AutoGen model call, logged as one
        isinstance(e, LLMCallEvent) and DEFAULT_INSTRUCTION in str(e) for e in logged
    )
    summaries_reached_the_server(proxy, "ag-int")
    saved = tmp_path / "agent.json"
    saved.write_text(json.dumps(document))
    commits = context.runtime.stats.commits
    assert_resumed(resume_in_a_new_process("autogen", proxy.url, saved), commits, summarized=True)


def demo_task() -> str:
    return agents.demo.task()

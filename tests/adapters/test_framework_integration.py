"""The adapters as a framework user meets them, with the frameworks' own fake models (no engine):
their own model objects as summarizers, windows and token counters learned from the model or
its server, tags only where the server takes them, events through each framework's channel,
metrics, persistence through each framework's mechanism, and `@context_policy` on framework
agents. The same on the embedded engine: `test_integration_on_engine.py`."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from collections.abc import Sequence
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import EVENT_LOGGER_NAME
from autogen_core.models import CreateResult, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.llms.mock import MockFunctionCallingLLM, MockLLM
from llama_index.core.workflow import Context
from llama_index.llms.openai_like import OpenAILike
from openai import BadRequestError

from lookahead_sdk import ConfigurationError, StateError, Warmer, context_policy
from lookahead_sdk.adapters import autogen as ag
from lookahead_sdk.adapters import langchain as lc
from lookahead_sdk.adapters import llamaindex as li
from lookahead_sdk.base.tokens import ApproxTokenCounter, CalibratedTokenCounter
from lookahead_sdk.core.warmer import RequestShape, WarmupResult, WarmupSpend
from lookahead_sdk.strategies import KeepRecent, Offload, Summarize

from ..support.fake_servers import hosted_api, sglang_server, vllm_server
from .test_autogen_adapter import INFO, read, replay
from .test_langchain_adapter import fake_model, read_tool, small_keep_recent
from .test_llamaindex_adapter import Recorder, function_calls


class CountingWarmer(Warmer):
    """A warmer that prefills nothing but says it did (each warm-up completes at once)."""

    async def warm(
        self,
        messages: Sequence[Any],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        return WarmupResult(prompt_tokens=10 * len(messages), cached_tokens=0, seconds=0.001)


# -- 1. the framework's own model object as summarizer -----------------------------------------
def test_each_adapter_takes_its_frameworks_model_as_summarizer(monkeypatch: Any) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    chat = ChatOpenAI(model="gpt-4o-mini", api_key="x")
    middleware = lc.LookaheadMiddleware(Summarize(), summarizer=chat, window_tokens=8192)
    assert middleware.settings.config.summarizer.model is chat  # type: ignore[union-attr]
    by_name = lc.LookaheadMiddleware(Summarize(), summarizer="openai:gpt-4o-mini")
    assert isinstance(by_name.settings.config.summarizer, lc.LangChainCompletionClient)
    llm = li.LookaheadLLM(MockLLM(), Summarize(), summarizer=MockLLM(), window_tokens=8192)
    assert isinstance(llm._core.settings.config.summarizer, li.LlamaIndexCompletionClient)
    context = ag.LookaheadChatCompletionContext(Summarize(), summarizer=replay(0))
    assert isinstance(context.settings.config.summarizer, ag.AutoGenCompletionClient)


@pytest.mark.parametrize(
    ("build", "accepted"),
    [
        (lambda: lc.LookaheadMiddleware(Summarize(), summarizer=42), "BaseChatModel"),
        (lambda: lc.LookaheadMiddleware(Summarize(), summarizer="nope:x"), "init_chat_model"),
        (lambda: li.LookaheadLLM(MockLLM(), Summarize(), summarizer="gpt-4o"), "LlamaIndex LLM"),
        (
            lambda: ag.LookaheadChatCompletionContext(Summarize(), summarizer=MockLLM()),
            "ChatCompletionClient",
        ),
        (lambda: ag.LookaheadChatCompletionContext(Summarize(), model_client="m"), "model_client"),
        # No summarizer anywhere: refused now, not later in the background.
        (lambda: ag.LookaheadChatCompletionContext(Summarize()), "no summarizer"),
    ],
)
def test_wrong_summarizers_are_refused_at_construction(build: Any, accepted: str) -> None:
    with pytest.raises(ConfigurationError, match=accepted):
        build()


async def test_summaries_are_calls_of_the_framework_model_and_report_its_usage() -> None:
    from langchain_core.callbacks import BaseCallbackHandler

    runs: list[str] = []

    class Runs(BaseCallbackHandler):
        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            runs.append(kwargs.get("name") or "")

    usage = {"input_tokens": 40, "output_tokens": 5, "total_tokens": 45}
    chat = GenericFakeChatModel(
        messages=iter([AIMessage("the summary", usage_metadata=usage)]), callbacks=[Runs()]
    )
    done = await lc.LangChainCompletionClient(chat).complete(
        [{"role": "user", "content": "summarize"}], max_tokens=16, temperature=0.0
    )
    assert (done.text, done.prompt_tokens, done.completion_tokens) == ("the summary", 40, 5)
    assert runs == [lc.SUMMARY_RUN_NAME]  # traced by LangChain as its own run

    seen: list[str] = []

    class Events(BaseEventHandler):
        def handle(self, event: Any, **kwargs: Any) -> None:
            seen.append(event.class_name())

    handler = Events()
    get_dispatcher().add_event_handler(handler)
    try:
        done = await li.LlamaIndexCompletionClient(MockLLM()).complete(
            [{"role": "user", "content": "summarize"}], max_tokens=16, temperature=0.0
        )
    finally:
        get_dispatcher().event_handlers.remove(handler)
    assert done.text and "LLMChatStartEvent" in seen  # LlamaIndex instrumentation saw it

    client = replay(0)
    done = await ag.AutoGenCompletionClient(client).complete(
        [{"role": "user", "content": "summarize"}], max_tokens=16, temperature=0.0
    )
    assert done.text == "done" and client.received[0][0].content == "summarize"


# -- 2. window and tokenizer ---------------------------------------------------------------------
def test_windows_and_counters_come_from_the_model_or_its_server() -> None:
    middleware = lc.LookaheadMiddleware(KeepRecent())
    middleware._ready(ChatOpenAI(model="gpt-4o", api_key="x"))  # its LangChain profile
    found = middleware._core.discovered
    assert found is not None and found.window_tokens == 128000 and found.wire == "none"
    assert "count_tokens_approximately" in found.token_counter.name
    with vllm_server(32768) as server:
        middleware = lc.LookaheadMiddleware(KeepRecent())
        middleware._ready(ChatOpenAI(model="qwen", api_key="x", base_url=f"{server.url}/v1"))
        found = middleware._core.discovered
        assert found is not None and (found.window_tokens, found.wire) == (32768, "vllm")
        assert isinstance(found.token_counter, CalibratedTokenCounter)
        assert "(vllm)" in found.token_counter.name
    told = OpenAILike(model="m", api_base="http://127.0.0.1:9/v1", context_window=4096)
    assert li.model_facts(told).window_tokens == 4096
    with sglang_server(40960) as server:
        untold = OpenAILike(model="qwen", api_base=f"{server.url}/v1", is_chat_model=True)
        assert li.model_facts(untold).window_tokens is None  # LlamaIndex's 3900 placeholder
        llm = li.LookaheadLLM(untold, KeepRecent())
        assert llm.session.runtime.main.window_tokens == 40960
        llm.close()
    context = ag.LookaheadChatCompletionContext(
        KeepRecent(),
        model_client=replay(0).__class__([], model_info={**INFO, "context_window": 16384}),
    )
    assert context.runtime.main.window_tokens == 16384


def test_an_unknown_window_is_an_error_naming_window_tokens() -> None:
    middleware = lc.LookaheadMiddleware(small_keep_recent(), token_counter=ApproxTokenCounter())
    agent = create_agent(fake_model([]), [read_tool()], middleware=[middleware])
    with pytest.raises(ConfigurationError, match="window_tokens="):
        agent.invoke({"messages": [HumanMessage("go")]})
    middleware.close()


# -- 3. tags only where the server takes them ---------------------------------------------------
def test_an_agent_on_a_hosted_api_works_and_send_tags_forces_tags() -> None:
    with hosted_api() as server:

        def run(**settings: Any) -> Any:
            model = ChatOpenAI(model="m", api_key="k", base_url=f"{server.url}/v1", max_retries=0)
            middleware = lc.LookaheadMiddleware(KeepRecent(), window_tokens=8192, **settings)
            agent = create_agent(model, [], middleware=[middleware])
            try:
                return agent.invoke({"messages": [HumanMessage("hi")]})
            finally:
                middleware.close()

        assert run()["messages"][-1].content == "ok"  # no tag field reached the hosted API
        with pytest.raises(BadRequestError, match="Unrecognized request argument"):
            run(send_tags=True)


# -- 5. events and metrics -----------------------------------------------------------------------
def test_langchain_commit_and_warmup_events_reach_the_callback_handler() -> None:
    handler = lc.LookaheadCallbackHandler(ApproxTokenCounter())
    middleware = lc.LookaheadMiddleware(
        small_keep_recent(),
        window_tokens=8192,
        token_counter=ApproxTokenCounter(),
        warmer=CountingWarmer(),
    )
    agent = create_agent(
        fake_model([{"name": "read", "args": {"n": i}} for i in range(9)]),
        [read_tool()],
        middleware=[middleware],
    )
    server = middleware.serve_metrics()
    try:
        agent.invoke({"messages": [HumanMessage("go")]}, {"callbacks": [handler]})
        with urllib.request.urlopen(server.url) as reply:
            metrics = reply.read().decode()
    finally:
        middleware.close()
    kinds = [(e.type, e.kind) for e in handler.lookahead_events]
    assert ("commit", "hit") in kinds and ("warmup", "complete") in kinds
    hits = [e for e in handler.lookahead_events if e.type == "commit" and e.kind == "hit"]
    cold = sum(1 for e in hits if e.cold)  # a hit whose warm-up had not finished yet
    assert (
        f'lookahead_commits_total{{adapter="langchain",kind="hit"}} {len(hits) - cold}' in metrics
    )
    assert f'lookahead_commits_total{{adapter="langchain",kind="cold_hit"}} {cold}' in metrics
    assert "lookahead_wasted_prompt_tokens_total" in metrics
    assert "lookahead_commit_wait_seconds_total" in metrics


def test_llamaindex_events_are_instrumentation_events() -> None:
    seen: list[Any] = []

    class Events(BaseEventHandler):
        def handle(self, event: Any, **kwargs: Any) -> None:
            if isinstance(event, li.LookaheadCommitEvent | li.LookaheadWarmupEvent):
                seen.append(event)

    recorder = Recorder(function_calls(9))
    llm = li.LookaheadLLM(
        MockFunctionCallingLLM(response_generator=recorder, is_chat_model=True),
        KeepRecent(budget=400, lookahead_at=600, hard_limit=900, commit_ahead=False),
        window_tokens=8192,
        token_counter=ApproxTokenCounter(),
        warmer=CountingWarmer(),
    )
    agent = FunctionAgent(tools=[read], llm=llm, system_prompt="analyze")
    handler = Events()
    get_dispatcher().add_event_handler(handler)

    async def go() -> None:
        try:
            await agent.run("go", memory=llm.memory(), max_iterations=20)
        finally:
            await llm.aclose()

    try:
        asyncio.run(go())
    finally:
        get_dispatcher().event_handlers.remove(handler)
    assert any(isinstance(e, li.LookaheadCommitEvent) and e.kind == "hit" for e in seen)
    assert any(isinstance(e, li.LookaheadWarmupEvent) for e in seen)


def test_autogen_events_go_to_its_event_logger(caplog: pytest.LogCaptureFixture) -> None:
    client = replay(9)
    context = ag.LookaheadChatCompletionContext(
        KeepRecent(budget=400, lookahead_at=600, hard_limit=900),
        model_client=client,
        system_message="analyze",
        window_tokens=8192,
        token_counter=ApproxTokenCounter(),
        warmer=CountingWarmer(),
    )
    agent = AssistantAgent(
        "analyst",
        ag.LookaheadModelClient(client, context=context),
        tools=[read],
        system_message="analyze",
        model_context=context,
        max_tool_iterations=10,
    )

    async def go() -> None:
        try:
            await agent.run(task="go")
        finally:
            await context.aclose()

    with caplog.at_level(logging.INFO, logger=EVENT_LOGGER_NAME):
        asyncio.run(go())
    logged = [
        json.loads(str(r.msg))
        for r in caplog.records
        if isinstance(r.msg, ag.AutoGenLookaheadEvent)
    ]
    assert any(e["type"] == "LookaheadCommit" and e["kind"] == "hit" for e in logged)
    assert any(e["type"] == "LookaheadWarmup" for e in logged)


# -- 4. persistence through the framework's own mechanism (in process; across processes on the
# engine) -----------------------------------------------------------------------------------------
def test_a_released_langchain_thread_resumes_from_the_checkpointed_lookahead_state() -> None:
    words = " ".join(f"w{k}" for k in range(120))
    model = GenericFakeChatModel(messages=iter([AIMessage(f"a{n}: {words}") for n in range(6)]))
    middleware = lc.LookaheadMiddleware(
        KeepRecent(budget=200, lookahead_at=300, hard_limit=400, commit_ahead=False),
        window_tokens=8192,
        token_counter=ApproxTokenCounter(),
    )
    saver = InMemorySaver()
    agent = create_agent(model, [], middleware=[middleware], checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}
    try:
        for n in range(4):
            agent.invoke({"messages": [HumanMessage(f"q{n}")]}, config)
            saved = agent.get_state(config).values[lc.STATE_KEY]
            assert saved["messages"][-1]["content"].startswith(f"a{n}")  # the final turn's
        # Each invocation's runtime was released and rebuilt from the checkpointed state: the
        # commits made by earlier invocations are in the stats the last one carried on.
        assert saved["stats"]["commits"] >= 1 and saved["stats"]["boundaries"] > 4
        assert lc.STATE_KEY not in agent.invoke({"messages": [HumanMessage("q")]}, config)
    finally:
        middleware.close()


def test_autogen_context_and_client_round_trip_through_components() -> None:
    context = ag.LookaheadChatCompletionContext(
        Offload(threshold=200) | Summarize(),
        model_client=replay(0),
        system_message="analyze",
        window_tokens=8192,
        send_tags=False,
        warmer="auto",
        model_call_limit=24,
    )
    client = ag.LookaheadModelClient(replay(0), context=context)
    dumped = json.loads(context.dump_component().model_dump_json())
    restored = ag.LookaheadChatCompletionContext.load_component(dumped)
    assert restored.settings.policy.name == context.settings.policy.name == "offload+summarize"
    assert (restored.system_message, restored.settings.send_tags) == ("analyze", False)
    assert restored.settings.config.window_tokens == 8192 and restored.settings.auto_warmer
    assert restored.settings.config.model_call_limit == 24
    assert isinstance(restored.model_client, ReplayChatCompletionClient)
    again = ag.LookaheadModelClient.load_component(client.dump_component())
    assert isinstance(again.inner, ReplayChatCompletionClient)
    with pytest.raises(ConfigurationError, match="warmer"):
        ag.LookaheadChatCompletionContext(
            KeepRecent(), window_tokens=8192, warmer=CountingWarmer()
        ).dump_component()


def test_llamaindex_context_round_trips_with_the_lookahead_state() -> None:
    def new_llm(recorder: Recorder) -> li.LookaheadLLM:
        return li.LookaheadLLM(
            MockFunctionCallingLLM(response_generator=recorder, is_chat_model=True),
            KeepRecent(budget=400, lookahead_at=600, hard_limit=900),
            window_tokens=8192,
            token_counter=ApproxTokenCounter(),
        )

    first = new_llm(Recorder(function_calls(6)))
    agent = FunctionAgent(tools=[read], llm=first, system_prompt="analyze")

    async def run_first() -> dict[str, Any]:
        ctx = Context(agent)
        await agent.run("go", ctx=ctx, memory=first.memory(), max_iterations=20)
        return json.loads(json.dumps(ctx.to_dict()))

    data = asyncio.run(run_first())
    stats = first.session.runtime.stats
    first.close()
    assert stats.commits >= 1

    recorder = Recorder(function_calls(1))
    second = new_llm(recorder)
    resumed = FunctionAgent(tools=[read], llm=second, system_prompt="analyze")

    async def run_second() -> None:
        ctx = Context.from_dict(resumed, data, serializer=second.serializer())
        await resumed.run("continue", ctx=ctx, max_iterations=5)

    asyncio.run(run_second())
    try:
        assert second.session.runtime.stats.commits >= stats.commits  # carried on
        first_call = [m.content for m in recorder.received[0]]
        assert first_call[1] == "go" and "continue" in first_call  # the restored history
    finally:
        second.close()
    with pytest.raises(StateError, match="serializer"):
        li.LookaheadMemory.from_dict({"lookahead_state": {"version": 1}}).get()


# -- 6. the decorator on framework agents --------------------------------------------------------
def test_the_decorator_reaches_the_adapter_inside_a_framework_agent() -> None:
    middleware = lc.LookaheadMiddleware(KeepRecent(), window_tokens=8192)
    graph = create_agent(fake_model([]), [], middleware=[middleware])
    assert context_policy(Offload())(graph) is graph and isinstance(middleware.policy, Offload)
    with pytest.raises(TypeError, match="holds no lookahead adapter"):
        context_policy(Offload())(create_agent(fake_model([]), []))

    llm = li.LookaheadLLM(MockFunctionCallingLLM(), KeepRecent(), window_tokens=8192)
    context_policy(Offload())(FunctionAgent(tools=[read], llm=llm))
    assert isinstance(llm.policy, Offload)

    context = ag.LookaheadChatCompletionContext(KeepRecent(), window_tokens=8192)
    client = replay(0)
    context_policy(Offload())(AssistantAgent("a", client, model_context=context))
    assert isinstance(context.settings.policy, Offload)
    with pytest.raises(TypeError, match="holds no lookahead adapter"):
        context_policy(Offload())(AssistantAgent("b", client))


def test_decorating_an_adapter_an_agent_already_runs_takes_effect_or_raises() -> None:
    model = fake_model([{"name": "read", "args": {"n": 0}}])
    middleware = lc.LookaheadMiddleware(Summarize(), window_tokens=8192)
    agent = create_agent(model, [read_tool()], middleware=[middleware])
    context_policy(KeepRecent())(middleware)  # after create_agent: the agent runs KeepRecent
    try:
        agent.invoke({"messages": [HumanMessage("go")]})
        assert isinstance(middleware.runtime_for().runtime.policy, KeepRecent)
        with pytest.raises(StateError, match="already served"):
            context_policy(Offload())(middleware)
    finally:
        middleware.close()


def test_autogen_client_finds_the_context_without_a_link() -> None:
    """After `load_component` the client is not linked: the context the agent just asked for
    its messages is found through the task's context."""
    client = replay(1)
    context = ag.LookaheadChatCompletionContext(
        KeepRecent(), model_client=client, window_tokens=8192, system_message="s"
    )
    agent = AssistantAgent(
        "a", ag.LookaheadModelClient(client), tools=[read], model_context=context
    )

    async def go() -> None:
        await agent.run(task="go")
        await context.aclose()

    asyncio.run(go())
    assert context.runtime.shape.tools  # the unlinked client offered the tools to the context
    assert CreateResult and RequestUsage  # (imported for the replay fixtures)


def test_autogen_events_are_also_opentelemetry_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import trace

    from lookahead_sdk.adapters._events import LookaheadEvent

    spans: list[tuple[str, dict[str, Any], bool]] = []

    class Span:
        def __init__(self, name: str, attributes: dict[str, Any]) -> None:
            self.record = [name, attributes, False]

        def end(self, end_time: int | None = None) -> None:
            self.record[2] = True
            spans.append(tuple(self.record))  # type: ignore[arg-type]

    class Tracer:
        def start_span(self, name: str, start_time: int, attributes: dict[str, Any]) -> Span:
            return Span(name, attributes)

    monkeypatch.setattr(trace, "get_tracer", lambda name: Tracer())
    ag.emit(LookaheadEvent("commit", "p", "hit", waited_s=0.2, context_tokens=900))
    ((name, attributes, ended),) = spans
    assert name == "lookahead.commit" and ended
    assert attributes["lookahead.kind"] == "hit" and attributes["lookahead.context_tokens"] == 900


def test_autogen_messages_and_tools_render_as_its_own_openai_client_renders_them() -> None:
    """The adapter uses public AutoGen API only; this checks its rendering against the private
    one AutoGen's client uses (skipped if AutoGen moves it)."""
    from autogen_core import FunctionCall
    from autogen_core.models import (
        AssistantMessage,
        FunctionExecutionResult,
        FunctionExecutionResultMessage,
        SystemMessage,
        UserMessage,
    )
    from autogen_core.tools import FunctionTool

    private = pytest.importorskip("autogen_ext.models.openai._openai_client")
    call = FunctionCall(id="c1", name="read", arguments='{"n": 1}')
    messages = [
        SystemMessage(content="s"),
        UserMessage(content="hi", source="user"),
        AssistantMessage(content="ok", source="analyst"),
        AssistantMessage(content=[call], source="analyst"),
        AssistantMessage(content=[call], source="analyst", thought="reading"),
        FunctionExecutionResultMessage(
            content=[
                FunctionExecutionResult(content="r1", name="read", call_id="c1"),
                FunctionExecutionResult(content="r2", name="read", call_id="c2"),
            ]
        ),
    ]
    for message in messages:
        assert ag.to_openai(message) == [dict(m) for m in private.to_oai_type(message)]
    tool = FunctionTool(read, description="read chunk n")
    assert list(ag.tool_dicts([tool])) == [dict(t) for t in private.convert_tools([tool])]


def test_a_summarizer_on_another_server_gets_that_servers_wire() -> None:
    """The agent on vLLM (tags on), the summaries by a hosted model (tags off there)."""
    with vllm_server() as local, hosted_api() as hosted:
        summarizer = ChatOpenAI(model="small", api_key="k", base_url=f"{hosted.url}/v1")
        middleware = lc.LookaheadMiddleware(Summarize(), summarizer=summarizer)
        middleware._ready(ChatOpenAI(model="qwen", api_key="k", base_url=f"{local.url}/v1"))
        found = middleware.discovered
        assert found is not None and found.wire == "vllm"
        assert found.config.summarizer.wire == "none"  # type: ignore[union-attr]

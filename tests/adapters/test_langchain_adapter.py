"""LookaheadMiddleware with real `create_agent` graphs and LangChain's own fake chat model."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from pydantic import Field

from lookahead_sdk import OffloadStore, RequestTags, context_policy
from lookahead_sdk.adapters.langchain import (
    LookaheadCallbackHandler,
    LookaheadMiddleware,
    merged_settings,
)
from lookahead_sdk.base.tokens import ApproxTokenCounter, CachedTokenCounter
from lookahead_sdk.core.runtime import CommitKind
from lookahead_sdk.strategies import KeepRecent, Offload, Summarize

from ..support.counters import FailsOnce
from ..support.recording_proxy import RecordingProxy

CHUNK_WORDS = 150  # ~160 approximate tokens per tool output


def chunk(n: int) -> str:
    return f"chunk {n}: " + " ".join(f"w{n}_{k}" for k in range(CHUNK_WORDS))


class RecordingFake(GenericFakeChatModel):
    """LangChain's fake model, made to accept tools and to remember what each call received."""

    received: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> RecordingFake:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.received.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def fake_model(calls: list[dict[str, Any]]) -> RecordingFake:
    replies = [AIMessage("", tool_calls=[{**call, "id": f"c{i}"}]) for i, call in enumerate(calls)]
    return RecordingFake(messages=iter([*replies, AIMessage("done")]), received=[])


def read_tool() -> StructuredTool:
    return StructuredTool.from_function(func=chunk, name="read", description="read chunk n")


def small_keep_recent() -> KeepRecent:
    # At the limit: the after_model boundary is not waited for, so a commit decided ahead would
    # depend on whether it ran before the tool output arrived.
    return KeepRecent(budget=400, lookahead_at=600, hard_limit=900, commit_ahead=False)


def middleware(policy: Any = None, **kwargs: Any) -> LookaheadMiddleware:
    kwargs.setdefault("window_tokens", 8192)  # a fake model reports no window
    return LookaheadMiddleware(
        policy, token_counter=CachedTokenCounter(ApproxTokenCounter()), **kwargs
    )


def contents(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages]


@pytest.mark.parametrize("invoke", ["sync", "async"])
def test_the_commit_replaces_what_the_model_receives_and_the_agent_state(invoke: str) -> None:
    model = fake_model([{"name": "read", "args": {"n": i}} for i in range(9)])
    lookahead = middleware(small_keep_recent(), release_after_agent=False)
    agent = create_agent(model, [read_tool()], system_prompt="analyze", middleware=[lookahead])
    state = {"messages": [HumanMessage("go")]}
    try:
        out = agent.invoke(state) if invoke == "sync" else asyncio.run(agent.ainvoke(state))
        stats = lookahead.runtime_for().runtime.stats
    finally:
        lookahead.close()
    commits = [i for i, call in enumerate(lookahead.calls) if call.commit is not CommitKind.NONE]
    assert commits, "the history never reached the hard limit"
    assert stats.hits >= 1 and stats.stale == 0
    for i in commits:
        sent, before = model.received[i], model.received[i - 1]
        assert (
            sent[0].content == "analyze" and sent[1].content == "go"
        )  # system prompt and task kept
        assert len(sent) < len(before)  # the older turns were dropped, not sent
        uncommitted = [
            *contents(before),
            "",
            chunk(i - 1),
        ]  # previous context + model turn + tool output
        assert (
            contents(sent)[2:] == uncommitted[len(uncommitted) - (len(sent) - 2) :]
        )  # its recent suffix
    # The agent state continued from the committed history: it holds fewer messages than were added.
    added = 1 + 2 * len(lookahead.calls) - 1
    assert len(out["messages"]) < added
    assert contents(out["messages"])[0] == "go" and out["messages"][-1].content == "done"


def test_later_calls_continue_from_the_committed_history() -> None:
    model = fake_model([{"name": "read", "args": {"n": i}} for i in range(12)])
    lookahead = middleware(small_keep_recent(), release_after_agent=False)
    agent = create_agent(model, [read_tool()], system_prompt="analyze", middleware=[lookahead])
    try:
        agent.invoke({"messages": [HumanMessage("go")]})
        runtime = lookahead.runtime_for().runtime
        last_sent = model.received[-1]
        runtime_history = [m.get("content") or "" for m in runtime.main.messages]
    finally:
        lookahead.close()
    # What the last call received is the start of the runtime's history: no divergence to resync.
    assert contents(last_sent) == runtime_history[: len(last_sent)]


def test_tool_outputs_and_model_turns_are_segment_boundaries() -> None:
    model = fake_model([{"name": "read", "args": {"n": i}} for i in range(3)])
    lookahead = middleware(small_keep_recent(), release_after_agent=False)
    agent = create_agent(model, [read_tool()], system_prompt="analyze", middleware=[lookahead])
    try:
        agent.invoke({"messages": [HumanMessage("go")]})
        session = lookahead.runtime_for()
        session.hosted.settle()  # boundaries are not waited for by the hooks
        boundaries = session.runtime.stats.boundaries
    finally:
        lookahead.close()
    # first call: system + task; then per tool call: the model turn and the tool output
    assert boundaries == 1 + 2 * 3 + 1


def test_decorator_swaps_the_policy_in_one_line() -> None:
    base = middleware(Summarize())
    swapped = context_policy(KeepRecent())(base)
    # In place: an agent already built with the middleware runs the new policy.
    assert swapped is base and isinstance(base.policy, KeepRecent)

    @context_policy(KeepRecent(budget=100))
    def build() -> LookaheadMiddleware:
        return middleware()

    assert build().policy.budget == 100


def test_a_policy_is_required_and_spawning_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="needs a context policy"):
        middleware()
    from lookahead_sdk.strategies import Isolate

    with pytest.raises(ValueError, match="spawns a sub-agent"):
        middleware(Isolate(subagent_system="sub"))


def test_offload_registers_its_read_back_tool_and_content_stays_readable(tmp_path: Path) -> None:
    store = OffloadStore(tmp_path)
    first_key = hashlib.sha256(chunk(0).encode()).hexdigest()  # the store is content-addressed
    calls = [{"name": "read", "args": {"n": i}} for i in range(5)] + [
        {"name": "read_offloaded", "args": {"key": first_key}}
    ]
    model = fake_model(calls)
    lookahead = middleware(Offload(threshold=100, lookahead_at=500, hard_limit=800, store=store))
    assert [t.name for t in lookahead.tools] == ["read_offloaded"]
    agent = create_agent(model, [read_tool()], system_prompt="analyze", middleware=[lookahead])
    try:
        out = agent.invoke({"messages": [HumanMessage("go")]})
    finally:
        lookahead.close()
    assert any(call.commit is not CommitKind.NONE for call in lookahead.calls)
    tool_outputs = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert any(str(m.content).startswith("[offloaded tool output") for m in tool_outputs)
    assert tool_outputs[-1].content.startswith(
        chunk(0)[:40]
    )  # read back through the registered tool


def test_callback_handler_observes_model_calls_and_tool_outputs() -> None:
    model = fake_model([{"name": "read", "args": {"n": i}} for i in range(2)])
    observer = LookaheadCallbackHandler(ApproxTokenCounter())
    agent = create_agent(model, [read_tool()], system_prompt="analyze")
    asyncio.run(agent.ainvoke({"messages": [HumanMessage("go")]}, {"callbacks": [observer]}))
    assert len(observer.model_calls) == 3
    assert all(c.ended_at is not None and c.ended_at >= c.started_at for c in observer.model_calls)
    assert [o.chars for o in observer.tool_outputs] == [len(chunk(0)), len(chunk(1))]
    assert all(
        o.tokens == ApproxTokenCounter().count_text(chunk(i))
        for i, o in enumerate(observer.tool_outputs)
    )


def test_tags_merge_with_the_models_and_the_calls_extra_body() -> None:
    tags = RequestTags(program_id="p-7")
    model = ChatOpenAI(
        model="m",
        api_key="x",
        base_url="http://unused/v1",
        extra_body={"own": 1, "priority_class": "be"},
    )
    request = ModelRequest(model=model, messages=[], model_settings={"extra_body": {"per_call": 2}})
    merged = merged_settings(request, tags)["extra_body"]
    assert merged["program_id"] == "p-7" and merged["own"] == 1 and merged["per_call"] == 2
    assert merged["priority_class"] == "be"  # an explicit value wins over the tags


def test_requests_reach_the_server_with_the_programs_tags() -> None:
    with RecordingProxy() as proxy:  # stub mode: a real HTTP server answering in OpenAI form
        model = ChatOpenAI(
            model="m", api_key="x", base_url=f"{proxy.url}/v1", extra_body={"own": 1}, max_retries=0
        )
        lookahead = middleware(
            Summarize(),
            tags=RequestTags(program_id="lc-agent"),
            release_after_agent=False,
            send_tags=True,  # the stub server is not one known to take tag fields
        )
        agent = create_agent(model, [read_tool()], system_prompt="analyze", middleware=[lookahead])
        try:
            asyncio.run(agent.ainvoke({"messages": [HumanMessage("go")]}))
            shape = lookahead.runtime_for().runtime.shape
        finally:
            lookahead.close()
        (body,) = proxy.bodies("/chat/completions")
    assert body["program_id"] == "lc-agent" and body["priority_class"] == "lc" and body["own"] == 1
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    # Warm-ups render with what the request carried besides messages: the same tools and model.
    assert list(shape.tools) == body["tools"] and shape.model == body["model"]


def unanswered_calls(messages: list[BaseMessage]) -> list[str]:
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    asked = [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    return [call for call in asked if call not in answered]


def test_a_refused_tool_output_is_offered_again_and_never_lost() -> None:
    """The runtime refuses a tool output once: the error surfaces, and when the user invokes
    the thread again the runtime gets that output, so no prompt sends its call without it."""
    from langgraph.checkpoint.memory import InMemorySaver

    model = fake_model([{"name": "read", "args": {"n": i}} for i in range(10)])
    lookahead = LookaheadMiddleware(
        small_keep_recent(),
        window_tokens=8192,
        token_counter=FailsOnce("chunk 6:"),
        release_after_agent=False,
    )
    agent = create_agent(
        model,
        [read_tool()],
        system_prompt="analyze",
        middleware=[lookahead],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t1"}}
    try:
        with pytest.raises(RuntimeError, match="tokenizer timed out"):
            agent.invoke({"messages": [HumanMessage("go")]}, config)
        out = agent.invoke({"messages": [HumanMessage("continue")]}, config)
    finally:
        lookahead.close()
    resumed = next(i for i, sent in enumerate(model.received) if "continue" in contents(sent))
    assert chunk(6) in contents(model.received[resumed])  # the runtime holds it again
    assert all(not unanswered_calls(sent) for sent in model.received)
    assert not unanswered_calls(out["messages"])


class SummarizingFake(RecordingFake):
    """Also answers the summary requests the middleware makes through the agent's model."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        from langchain_core.outputs import ChatGeneration, ChatResult

        from lookahead_sdk.strategies.summarize import DEFAULT_INSTRUCTION

        if messages and messages[-1].content == DEFAULT_INSTRUCTION:
            return ChatResult(generations=[ChatGeneration(message=AIMessage("the summary"))])
        return super()._generate(messages, *args, **kwargs)


def test_a_runtime_asked_for_before_the_first_model_call_gets_the_models_summarizer() -> None:
    """runtime_for() before the run cannot know the agent's model: the first model call
    rebuilds that runtime with it (the default summarizer), keeping what it held."""
    replies = [
        AIMessage("", tool_calls=[{"name": "read", "args": {"n": i}, "id": f"c{i}"}])
        for i in range(7)
    ]
    model = SummarizingFake(messages=iter([*replies, AIMessage("done")]), received=[])
    lookahead = middleware(
        Summarize(lookahead_at=600, hard_limit=900, recent_budget=300), release_after_agent=False
    )
    agent = create_agent(model, [read_tool()], system_prompt="analyze", middleware=[lookahead])
    early = lookahead.runtime_for()
    try:
        agent.invoke({"messages": [HumanMessage("go")]})
        assert lookahead.discovered is not None
        assert lookahead.discovered.config.summarizer is not None
        assert early.runtime.summarizer is lookahead.discovered.config.summarizer
        assert lookahead.runtime_for() is early
        assert early.runtime.stats.hits >= 1
    finally:
        lookahead.close()

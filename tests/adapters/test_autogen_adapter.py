"""LookaheadChatCompletionContext and LookaheadModelClient with a real AssistantAgent and
AutoGen's own replay model client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import BaseChatMessage
from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelFamily,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.models.replay import ReplayChatCompletionClient
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk import RequestTags, context_policy, tagged_async_http_client
from lookahead_sdk.adapters.autogen import (
    LookaheadChatCompletionContext,
    LookaheadModelClient,
    from_openai,
    to_openai,
)
from lookahead_sdk.base.completion import Completion
from lookahead_sdk.base.tokens import ApproxTokenCounter, CachedTokenCounter
from lookahead_sdk.core.runtime import CommitKind
from lookahead_sdk.core.state import LookaheadStatus
from lookahead_sdk.strategies import KeepRecent, Offload, Summarize
from lookahead_sdk.strategies.summarize import DEFAULT_INSTRUCTION

from ..support.counters import FailsOnce
from ..support.recording_proxy import RecordingProxy

INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "structured_output": False,
    "family": ModelFamily.UNKNOWN,
}
USAGE = RequestUsage(prompt_tokens=0, completion_tokens=0)
CHUNK_WORDS = 150


def read(n: int) -> str:
    """read chunk n"""
    return f"chunk {n}: " + " ".join(f"w{n}_{k}" for k in range(CHUNK_WORDS))


class RecordingReplay(ReplayChatCompletionClient):
    """AutoGen's replay client, remembering the messages each call received."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received: list[list[LLMMessage]] = []

    async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
        self.received.append(list(messages))
        return await super().create(messages, **kwargs)


def replay(calls: int, *, vision: bool = False) -> RecordingReplay:
    results: list[Any] = [
        CreateResult(
            finish_reason="function_calls",
            content=[FunctionCall(id=f"c{i}", name="read", arguments=json.dumps({"n": i}))],
            usage=USAGE,
            cached=False,
        )
        for i in range(calls)
    ]
    results.append(CreateResult(finish_reason="stop", content="done", usage=USAGE, cached=False))
    return RecordingReplay(results, model_info={**INFO, "vision": vision})


def context(policy: Any = None, **kwargs: Any) -> LookaheadChatCompletionContext:
    kwargs.setdefault("window_tokens", 8192)  # the replay client reports no window
    return LookaheadChatCompletionContext(
        policy if policy is not None else KeepRecent(budget=400, lookahead_at=600, hard_limit=900),
        system_message="analyze",
        token_counter=CachedTokenCounter(ApproxTokenCounter()),
        **kwargs,
    )


def analyst(client: ChatCompletionClient, ctx: LookaheadChatCompletionContext) -> AssistantAgent:
    """The agent these tests run: `read` as its tool, its model client wrapped for `ctx`."""
    return AssistantAgent(
        "analyst",
        LookaheadModelClient(client, context=ctx),
        tools=[read],
        system_message="analyze",
        model_context=ctx,
        max_tool_iterations=20,
    )


def run_then_close(
    agent: AssistantAgent, ctx: LookaheadChatCompletionContext, task: str | BaseChatMessage
) -> None:
    async def go() -> None:
        try:
            await agent.run(task=task)
        finally:
            await ctx.aclose()

    asyncio.run(go())


def test_the_commit_replaces_the_messages_the_model_receives() -> None:
    client = replay(9)
    ctx = context()
    agent = analyst(client, ctx)
    run_then_close(agent, ctx, "go")
    committed = [i for i, call in enumerate(ctx.calls) if call.commit is not CommitKind.NONE]
    assert committed and ctx.runtime.stats.hits >= 1 and ctx.runtime.stats.stale == 0
    for i in committed:
        sent, before = client.received[i], client.received[i - 1]
        assert isinstance(sent[0], SystemMessage) and isinstance(sent[1], UserMessage)
        assert len(sent) < len(before) + 2
        assert isinstance(
            sent[-1], FunctionExecutionResultMessage
        )  # the newest tool output is kept
    assert max(len(r) for r in client.received) < 2 + 2 * 9


async def ready_lookahead(ctx: LookaheadChatCompletionContext) -> None:
    for _ in range(500):
        if await ctx.hosted.acall(lambda runtime: _status(runtime)) is LookaheadStatus.READY:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the lookahead never became ready")


async def _status(runtime: Any) -> LookaheadStatus:
    return runtime.lookahead.status


def test_state_round_trips_with_the_pending_lookahead_result() -> None:
    async def go() -> tuple[Any, list[LLMMessage], int, int, int]:
        first = context()
        await first.add_message(UserMessage(content="go", source="user"))
        i = 0
        while first.runtime.main.tokens < 600:  # past the soft trigger
            await first.add_message(
                AssistantMessage(
                    content=[FunctionCall(id=f"c{i}", name="read", arguments="{}")], source="a"
                )
            )
            await first.add_message(
                FunctionExecutionResultMessage(
                    content=[FunctionExecutionResult(content=read(i), name="read", call_id=f"c{i}")]
                )
            )
            i += 1
            await first.hosted.asettle()  # add_message does not wait for its boundary
        assert first.runtime.main.tokens < 900  # below the hard limit: nothing committed yet
        await ready_lookahead(first)
        state = await first.save_state()
        started_before = first.runtime.stats.lookaheads_started
        saved_messages = await first.get_messages()
        program_id = first.tags.program_id
        await first.aclose()

        second = context()
        await second.load_state(json.loads(json.dumps(state)))  # the state is JSON-safe
        # The next run continues the same program (its server slots, a router's record of it).
        assert second.tags.program_id == program_id
        restored = await second.get_messages()
        await second.add_message(
            AssistantMessage(
                content=[FunctionCall(id="c9", name="read", arguments="{}")], source="a"
            )
        )
        await second.add_message(
            FunctionExecutionResultMessage(
                content=[FunctionExecutionResult(content=read(9), name="read", call_id="c9")]
            )
        )
        committed = await second.get_messages()
        kind = second.calls[-1].commit
        started_after = second.runtime.stats.lookaheads_started
        await second.aclose()
        assert restored == saved_messages
        return kind, committed, len(saved_messages), started_before, started_after

    kind, committed, before, started_before, started_after = asyncio.run(go())
    assert kind is CommitKind.HIT
    assert started_after == started_before  # the restored result was committed, none recomputed
    assert len(committed) < before + 2


def test_load_state_rejects_foreign_state() -> None:
    ctx = context()
    with pytest.raises(ValueError, match="save_state"):
        asyncio.run(ctx.load_state({"messages": []}))


def test_decorator_swaps_the_policy_in_one_line() -> None:
    base = context(Summarize(), model_client=replay(0))
    swapped = context_policy(Offload())(base)
    # In place: an agent already built with this context runs the new policy.
    assert swapped is base and isinstance(base.settings.policy, Offload)


def test_client_tags_requests_through_the_transport_and_leaves_extra_body_to_autogen() -> None:
    """Tags travel through the tagging transport (public API only: the wrapper never reads the
    client's own extra_body, so it never rewrites the call's)."""
    with RecordingProxy() as proxy:
        inner = OpenAIChatCompletionClient(
            model="m",
            base_url=f"{proxy.url}/v1",
            api_key="x",
            model_info=INFO,
            extra_body={"own": 1},
            max_retries=0,
            http_client=tagged_async_http_client(wire="openai"),
        )
        # swapped: keeps the rest
        ctx = context_policy(Summarize())(context(Offload(), model="m", model_client=inner))
        client = LookaheadModelClient(inner, context=ctx, tags=RequestTags(program_id="ag-agent"))

        async def go() -> Any:
            tool = FunctionTool(read, description="read chunk n")
            extra = {"extra_body": {"per_call": 2}}
            await client.create(
                [UserMessage(content="q", source="user")], tools=[tool], extra_create_args=extra
            )
            await client.close()
            shape = ctx.runtime.shape
            await ctx.aclose()
            return shape

        shape = asyncio.run(go())
        (body,) = proxy.bodies("/chat/completions")
    assert body["program_id"] == "ag-agent" and body["priority_class"] == "lc"
    assert body["per_call"] == 2  # the call's extra_body, as AutoGen merges it
    # Warm-ups render with what the request carried besides messages: the same tools and model.
    assert list(shape.tools) == body["tools"] and shape.model == body["model"]


# -- conversions: what the context stores converts back to what AutoGen sends --------------------
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
calls = st.lists(
    st.builds(
        lambda i, a: FunctionCall(id=f"id{i}", name="read", arguments=a), st.integers(0, 999), texts
    ),
    min_size=1,
    max_size=3,
)
messages = st.lists(
    st.one_of(
        st.builds(lambda t: UserMessage(content=t, source="user"), texts),
        st.builds(lambda t: AssistantMessage(content=t, source="assistant"), texts),
        calls.map(lambda cs: AssistantMessage(content=cs, source="assistant")),
        st.lists(
            st.builds(
                lambda t, i: FunctionExecutionResult(content=t, name="read", call_id=f"id{i}"),
                texts,
                st.integers(0, 999),
            ),
            min_size=1,
            max_size=3,
        ).map(lambda rs: FunctionExecutionResultMessage(content=rs)),
    ),
    max_size=8,
)


class SummaryFake:
    """A CompletionClient summarizing at once."""

    async def complete(
        self, messages: Sequence[Any], *, max_tokens: int, temperature: float
    ) -> Completion:
        return Completion("the summary")


def as_sent(dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for m in from_openai(dicts) for d in to_openai(m)]


@settings(max_examples=100, deadline=None)
@given(messages, st.lists(st.tuples(st.integers(0, 16), texts), max_size=3))
def test_openai_form_round_trips(
    history: list[LLMMessage], nameless: list[tuple[int, str]]
) -> None:
    dicts = [d for m in history for d in to_openai(m)]
    assert as_sent(dicts) == dicts
    # User messages a commit made (a summary) carry no name; AutoGen sends a user message's
    # source as one: they gain it, and from then on the form is exact.
    for index, text in nameless:
        dicts.insert(min(index, len(dicts)), {"role": "user", "content": text})
    sent = as_sent(dicts)
    assert sent == [
        {"name": "user", **d} if d["role"] == "user" and "name" not in d else d for d in dicts
    ]
    assert as_sent(sent) == sent


def test_after_a_summary_the_agent_sends_the_runtimes_history() -> None:
    """The summary a commit makes has no name; what the agent sends for it (AutoGen's client
    adds the source as name) is the runtime's history too, so warm-ups render its prefix."""
    client = replay(9)
    runtime_at_call: list[list[dict[str, Any]]] = []
    ctx = context(
        Summarize(lookahead_at=600, hard_limit=900, recent_budget=300),
        summarizer=SummaryFake(),
        on_call=lambda _: runtime_at_call.append([dict(m) for m in ctx.runtime.main.messages]),
    )
    agent = analyst(client, ctx)
    run_then_close(agent, ctx, "go")
    assert any(call.commit is not CommitKind.NONE for call in ctx.calls)
    for sent, history in zip(client.received, runtime_at_call, strict=True):
        assert [d for m in sent for d in to_openai(m)] == history


async def tool_turn(ctx: LookaheadChatCompletionContext, i: int) -> None:
    call = FunctionCall(id=f"c{i}", name="read", arguments="{}")
    await ctx.add_message(AssistantMessage(content=[call], source="a"))
    result = FunctionExecutionResult(content=read(i), name="read", call_id=f"c{i}")
    await ctx.add_message(FunctionExecutionResultMessage(content=[result]))


def test_a_refused_append_surfaces_at_the_next_call_and_loses_no_message() -> None:
    ctx = LookaheadChatCompletionContext(
        KeepRecent(budget=700, lookahead_at=1000, hard_limit=1300),
        system_message="analyze",
        window_tokens=8192,
        token_counter=FailsOnce("chunk 5:"),
    )

    async def go() -> list[LLMMessage]:
        try:
            await ctx.add_message(UserMessage(content="go", source="user"))
            for i in range(6):
                await tool_turn(ctx, i)
            with pytest.raises(RuntimeError, match="tokenizer timed out"):
                await ctx.get_messages()  # the next call after the refused append
            await tool_turn(ctx, 6)
            return await ctx.get_messages()
        finally:
            await ctx.aclose()

    sent = asyncio.run(go())
    calls = [c.id for m in sent if isinstance(m, AssistantMessage) for c in m.content]  # type: ignore[union-attr]
    results = [
        r.call_id for m in sent if isinstance(m, FunctionExecutionResultMessage) for r in m.content
    ]
    assert calls[-2:] == ["c5", "c6"] and results[-2:] == ["c5", "c6"]
    assert [d for m in sent for d in to_openai(m)] == list(ctx.runtime.main.messages[1:])


class SlowSummaryReplay(ReplayChatCompletionClient):
    """The replay client, whose summaries (the default summarizer's calls) take a while."""

    async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
        if getattr(messages[-1], "content", None) == DEFAULT_INSTRUCTION:
            await asyncio.sleep(0.5)  # still running when the agent's asyncio.run() ends
            return CreateResult(
                finish_reason="stop", content="the summary", usage=USAGE, cached=False
            )
        return await super().create(messages, **kwargs)


def tool_run(first: int, count: int) -> list[CreateResult]:
    results = [
        CreateResult(
            finish_reason="function_calls",
            content=[FunctionCall(id=f"c{i}", name="read", arguments=json.dumps({"n": i}))],
            usage=USAGE,
            cached=False,
        )
        for i in range(first, first + count)
    ]
    return [*results, CreateResult(finish_reason="stop", content="done", usage=USAGE, cached=False)]


async def _settled_status(runtime: Any) -> LookaheadStatus:
    await runtime.settle(timeout_s=10)
    return runtime.lookahead.status


def test_a_summary_outlives_the_agents_event_loop() -> None:
    """The agent's model client summarizes; run 1's asyncio.run() ends while the lookahead's
    summary runs on its loop: the summary finishes anyway, and run 2 commits from it."""
    client = SlowSummaryReplay([*tool_run(0, 4), *tool_run(4, 4)], model_info=INFO)
    ctx = context(
        Summarize(lookahead_at=500, hard_limit=1100, recent_budget=300, commit_ahead=False),
        model_client=client,
    )
    agent = analyst(client, ctx)
    asyncio.run(agent.run(task="go"))
    try:
        assert ctx.runtime.stats.lookaheads_started >= 1
        assert ctx.hosted.call(_settled_status) is LookaheadStatus.READY  # not stuck RUNNING
        asyncio.run(agent.run(task="more"))
        committed = [call.commit for call in ctx.calls if call.commit is not CommitKind.NONE]
        assert committed and ctx.runtime.stats.hits >= 1
    finally:
        asyncio.run(ctx.aclose())


def test_the_context_is_usable_after_it_was_closed() -> None:
    """Like LangChain's middleware: after aclose() the next run starts a runtime from the
    messages the context holds."""
    client = replay(2)
    ctx = context(KeepRecent(budget=4000, lookahead_at=6000, hard_limit=7000))  # no commit
    agent = analyst(client, ctx)

    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        await agent.run(task="go")
        await ctx.aclose()
        client.reset()
        try:
            await agent.run(task="again")
            hosted = await ctx.ahosted()
            await hosted.asettle()  # the last add_message's append
            history = [dict(m) for m in hosted.runtime.main.messages]
        finally:
            await ctx.aclose()
        return history, [d for m in ctx.messages for d in to_openai(m)]

    history, held = asyncio.run(go())
    assert history[1:] == held  # the new runtime holds what the context held, and the new run
    users = [d["content"] for d in held if d["role"] == "user"]
    assert users == ["go", "again"] and held[-1]["content"] == "done"

"""Bounded memory in long-running processes: 10,000 model calls through each adapter, with the
framework's own fake models, leave the traced memory where 1,000 calls left it; the LangChain
middleware's per-thread runtimes are released (after the invocation, least recently used first).

The policy never fires (a huge window, an approximate token counter), so what is measured is the
adapter alone: per-call records (bounded rings), runtimes per LangGraph thread (evicted), the
history mirrors (each conversation is short and then replaced, as a server's would be).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import threading
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from autogen_core import EVENT_LOGGER_NAME
from autogen_core.models import AssistantMessage, CreateResult, RequestUsage, UserMessage
from autogen_ext.models.replay import ReplayChatCompletionClient
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.checkpoint.memory import InMemorySaver
from llama_index.core.llms import ChatMessage, MockLLM

from lookahead_sdk import RequestTags
from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext, LookaheadModelClient
from lookahead_sdk.adapters.langchain import LookaheadCallbackHandler, LookaheadMiddleware
from lookahead_sdk.adapters.llamaindex import LLMCall, LookaheadLLM
from lookahead_sdk.base.tokens import ApproxTokenCounter
from lookahead_sdk.bench.adapters import HUGE_WINDOW
from lookahead_sdk.core.runtime import CommitKind, LookaheadRuntime
from lookahead_sdk.core.warmer import RequestShape, Warmer, WarmupResult, WarmupSpend
from lookahead_sdk.errors import ConfigurationError
from lookahead_sdk.strategies import KeepRecent

CALLS = 10_000
FIRST = 1_000
TURNS = 5  # model calls per conversation; then a new one (thread, history) starts
# Growth allowed from 1,000 to 10,000 calls: under one pointer (8 bytes) per call. Anything kept
# per call, even a list slot pointing at a shared object, needs more; the 1,000-call figure
# holds the full rings (1,000 records each) and the live runtimes, so it is far above this.
BYTES_PER_CALL = 8


def never_fires() -> KeepRecent:
    return KeepRecent()


def quick() -> dict[str, Any]:
    return {"window_tokens": HUGE_WINDOW, "token_counter": ApproxTokenCounter()}


@dataclass(frozen=True)
class Footprint:
    """Traced memory (bytes still allocated since tracing started) after FIRST and CALLS."""

    at_first: int
    at_calls: int

    @property
    def growth(self) -> int:
        return self.at_calls - self.at_first

    def __str__(self) -> str:
        return (
            f"{FIRST} calls: {self.at_first / 1024:.0f} KiB, {CALLS} calls: "
            f"{self.at_calls / 1024:.0f} KiB, growth {self.growth / 1024:+.1f} KiB "
            f"({self.growth / self.at_first:+.1%})"
        )


def footprint(drive: Callable[[int], None]) -> Footprint:
    """`drive(n)` makes the next n model calls. What the first calls fill once (framework
    caches, the rings) is part of both figures."""
    gc.collect()
    gc.freeze()  # what exists now is not traced: leave it out of collections (a faster run)
    tracemalloc.start()
    try:
        drive(FIRST)
        gc.collect()
        at_first = tracemalloc.get_traced_memory()[0]
        drive(CALLS - FIRST)
        gc.collect()
        at_calls = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.unfreeze()
    return Footprint(at_first, at_calls)


def assert_flat(name: str, measured: Footprint) -> None:
    print(f"\n{name}: {measured}")
    assert measured.growth < BYTES_PER_CALL * (CALLS - FIRST), f"{name} grows: {measured}"


@contextmanager
def on_thread(thread_id: str) -> Iterator[None]:
    """What LangGraph sets around a node: the config the middleware reads the thread id from."""
    token = var_child_runnable_config.set({"configurable": {"thread_id": thread_id}})
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


def reply_cycle() -> Iterator[AIMessage]:
    calls = [
        AIMessage("", tool_calls=[{"name": "read", "args": {"n": k}, "id": f"c{k}"}])
        for k in range(TURNS - 1)
    ]
    return itertools.cycle([*calls, AIMessage("done")])


# -- 10,000 calls per adapter ------------------------------------------------------------------
def test_langchain_adapter_memory_is_flat_over_10k_calls_on_2k_threads() -> None:
    """The middleware's hooks driven as `create_agent` runs them, one invocation of TURNS model
    calls per thread id; the callback handler gets the events LangChain sends for each model
    call and tool run. Every other invocation ends with `after_agent`; the rest are left for the
    LRU bound to evict. (Under tracemalloc, a whole graph per invocation would take minutes and
    running the fake model's callback machinery would double the time: neither is adapter code.)
    """
    middleware = LookaheadMiddleware(never_fires(), max_threads=64, **quick())
    observer = LookaheadCallbackHandler(ApproxTokenCounter())
    model = GenericFakeChatModel(messages=reply_cycle())
    system = SystemMessage("analyze")
    threads = itertools.count()

    def handler(request: ModelRequest) -> ModelResponse:
        run_id = uuid.uuid4()
        observer.on_chat_model_start({}, [[system, *request.messages]], run_id=run_id)
        reply = next(model.messages).model_copy(update={"id": f"lc_run--{run_id}"})
        result = LLMResult(generations=[[ChatGeneration(message=reply)]])
        observer.on_llm_end(result, run_id=run_id)
        return ModelResponse(result=[reply])

    def run_tool(request: ToolCallRequest) -> ToolMessage:
        call, run_id = request.tool_call, uuid.uuid4()
        observer.on_tool_start({"name": call["name"]}, str(call["args"]), run_id=run_id)
        output = ToolMessage(f"chunk {call['args']['n']}", tool_call_id=call["id"])
        observer.on_tool_end(output, run_id=run_id)
        return output

    def invocation(number: int) -> None:
        state: dict[str, Any] = {"messages": [HumanMessage(f"task {number}", id=f"h{number}")]}
        for _ in range(TURNS):
            middleware.before_model(state, None)  # type: ignore[arg-type]
            request = ModelRequest(
                model=model, messages=list(state["messages"]), system_message=system, state=state
            )
            reply = middleware.wrap_model_call(request, handler).result[0]
            state["messages"].append(reply)
            middleware.after_model(state, None)  # type: ignore[arg-type]
            for call in reply.tool_calls:
                request = ToolCallRequest(tool_call=call, tool=None, state=state, runtime=None)
                state["messages"].append(middleware.wrap_tool_call(request, run_tool))
        if number % 2 == 0:
            middleware.after_agent(state, None)  # type: ignore[arg-type]

    def drive(calls: int) -> None:
        for _ in range(calls // TURNS):
            number = next(threads)
            with on_thread(f"thread-{number}"):
                invocation(number)

    try:
        measured = footprint(drive)
        assert len(middleware.calls) == len(observer.model_calls) == 1000
        assert len(observer.tool_outputs) == 1000 and len(middleware._threads) <= 64
    finally:
        middleware.close()
    assert_flat("langchain", measured)


def test_llamaindex_llm_memory_is_flat_over_10k_calls() -> None:
    """`chat` (`achat` records the same way, at a higher cost under tracemalloc)."""
    llm = LookaheadLLM(MockLLM(max_tokens=8), never_fires(), **quick())
    conversations = itertools.count()

    def conversation() -> None:
        number = next(conversations)
        history = [ChatMessage(role="system", content="analyze")]
        history.append(ChatMessage(role="user", content=f"task {number}"))
        for turn in range(TURNS):
            response = llm.chat(history)
            history += [response.message, ChatMessage(role="user", content=f"more {turn}")]

    def drive(calls: int) -> None:
        for _ in range(calls // TURNS):
            conversation()

    try:
        measured = footprint(drive)
        assert len(llm.calls) == 1000
    finally:
        llm.close()
    assert_flat("llamaindex", measured)


class ForgetfulReplay(ReplayChatCompletionClient):
    """AutoGen's replay client, replaying one answer forever; it records every call's
    arguments itself (`create_calls`), which would hide what the adapter keeps."""

    async def create(self, *args: Any, **kwargs: Any) -> CreateResult:
        result = await super().create(*args, **kwargs)
        self._create_calls.clear()
        self.reset()
        return result


def test_autogen_context_and_client_memory_is_flat_over_10k_calls() -> None:
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    answer = CreateResult(finish_reason="stop", content="done", usage=usage, cached=False)
    context = LookaheadChatCompletionContext(never_fires(), system_message="analyze", **quick())
    client = LookaheadModelClient(ForgetfulReplay([answer]), context=context)
    conversations = itertools.count()

    async def conversation() -> None:
        number = next(conversations)
        await context.clear()
        await context.add_message(UserMessage(content=f"task {number}", source="user"))
        for _ in range(TURNS):
            result = await client.create(await context.get_messages())
            await context.add_message(AssistantMessage(content=result.content, source="agent"))

    events = logging.getLogger(EVENT_LOGGER_NAME)
    level = events.level
    events.setLevel(logging.ERROR)  # the replay client logs every call
    runner = asyncio.Runner()
    try:
        measured = footprint(lambda calls: runner.run(repeat(conversation, calls // TURNS)))
        assert len(context.calls) == len(client.calls) == 1000
        runner.run(context.aclose())
    finally:
        runner.close()
        events.setLevel(level)
    assert_flat("autogen", measured)


async def repeat(run: Callable[[], Awaitable[None]], times: int) -> None:
    for _ in range(times):
        await run()


# -- LangChain threads: LRU eviction and after_agent ---------------------------------------------
class ProgramsWarmer(Warmer):
    """Sees which programs have a live runtime: the runtime attaches at creation and detaches
    when it is closed."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    async def warm(
        self,
        messages: Any,
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        return WarmupResult(prompt_tokens=0, cached_tokens=0, seconds=0.0)

    def attach(self, program_id: str) -> None:
        with self._lock:
            self.events.append(("attach", program_id))

    def detach(self, program_id: str) -> None:
        with self._lock:
            self.events.append(("detach", program_id))

    def live(self) -> set[str]:
        with self._lock:
            count = Counter(p for event, p in self.events if event == "attach")
            count.subtract(p for event, p in self.events if event == "detach")
        return {program for program, n in count.items() if n > 0}


def live_after_closes(middleware: LookaheadMiddleware, warmer: ProgramsWarmer) -> set[str]:
    """The live programs once the closes of released runtimes (not waited for) ran."""
    for _, closed in list(middleware._closing.values()):
        closed.result(timeout=10)
    return warmer.live()


def thread_middleware(warmer: Warmer, **kwargs: Any) -> LookaheadMiddleware:
    """Program ids "lc/<thread id>"."""
    tags = RequestTags(program_id="lc")
    return LookaheadMiddleware(never_fires(), warmer=warmer, tags=tags, **quick(), **kwargs)


def model_call(
    middleware: LookaheadMiddleware,
    thread_id: str,
    during: Callable[[], None] = lambda: None,
) -> None:
    """One model call on a thread; `during` runs while the model answers."""
    model = GenericFakeChatModel(messages=iter([AIMessage("done")]))

    def handler(request: ModelRequest) -> ModelResponse:
        during()
        return ModelResponse(result=[model.invoke(request.messages)])

    with on_thread(thread_id):
        request = ModelRequest(model=model, messages=[HumanMessage("go", id=f"h-{thread_id}")])
        middleware.wrap_model_call(request, handler)


def programs(*threads: str) -> set[str]:
    return {f"lc/{thread}" for thread in threads}


def test_the_least_recently_used_idle_thread_is_evicted_and_its_runtime_closed() -> None:
    warmer = ProgramsWarmer()
    middleware = thread_middleware(warmer, max_threads=2, release_after_agent=False)
    try:
        model_call(middleware, "a")
        model_call(middleware, "b")
        model_call(middleware, "a")  # now b is the least recently used
        model_call(middleware, "c")
        assert list(middleware._threads) == ["a", "c"]
        assert live_after_closes(middleware, warmer) == programs("a", "c")
        model_call(middleware, "b")  # rebuilt; a is evicted now
        assert live_after_closes(middleware, warmer) == programs("c", "b")
    finally:
        middleware.close()
    assert warmer.live() == set()


def test_a_thread_in_a_model_call_is_not_evicted() -> None:
    warmer = ProgramsWarmer()
    middleware = thread_middleware(warmer, max_threads=1, release_after_agent=False)
    seen_during: list[set[str]] = []

    def other_threads_meanwhile() -> None:
        model_call(middleware, "b")
        model_call(middleware, "c")  # b is evicted; a, in its call, is not
        seen_during.append(live_after_closes(middleware, warmer))

    try:
        model_call(middleware, "a", during=other_threads_meanwhile)
        assert seen_during == [programs("a", "c")]
        model_call(middleware, "d")  # back to the bound: a and c were idle
        assert live_after_closes(middleware, warmer) == programs("d")
    finally:
        middleware.close()


def test_after_agent_releases_the_thread_after_its_queued_operations() -> None:
    warmer = ProgramsWarmer()
    middleware = thread_middleware(warmer)
    order: list[str] = []

    async def slow_operation(runtime: LookaheadRuntime) -> None:
        await asyncio.sleep(0.2)
        order.append(f"operation done, attached={bool(warmer.live())}")

    try:
        model_call(middleware, "a")
        middleware.runtime_for("a").hosted.submit(slow_operation)
        with on_thread("a"):
            middleware.after_agent({"messages": []}, None)  # type: ignore[arg-type]
        assert middleware._threads == {}
        assert live_after_closes(middleware, warmer) == set()
    finally:
        middleware.close()
    assert order == ["operation done, attached=True"]  # it ran before the runtime closed


def test_a_released_thread_is_rebuilt_after_its_old_runtime_closed() -> None:
    warmer = ProgramsWarmer()
    middleware = thread_middleware(warmer)

    async def slow_operation(runtime: LookaheadRuntime) -> None:
        await asyncio.sleep(0.2)

    try:
        model_call(middleware, "a")
        middleware.runtime_for("a").hosted.submit(slow_operation)  # the close waits for it
        with on_thread("a"):
            middleware.after_agent({"messages": []}, None)  # type: ignore[arg-type]
        model_call(middleware, "a")  # at once: the new runtime waits for the old one's close
    finally:
        middleware.close()
    # One program id, never attached twice at a time (a late detach would drop the new one).
    assert warmer.events == [("attach", "lc/a"), ("detach", "lc/a")] * 2


def test_many_threads_through_the_graph_keep_a_bounded_set_of_runtimes() -> None:
    """Real `create_agent` invocations on distinct thread ids: released after each invocation,
    or (release_after_agent=False) evicted beyond max_threads."""
    for release, bound in ((True, 0), (False, 8)):
        warmer = ProgramsWarmer()
        middleware = thread_middleware(warmer, max_threads=8, release_after_agent=release)
        model = GenericFakeChatModel(messages=itertools.repeat(AIMessage("done")))
        agent = create_agent(model, [], system_prompt="analyze", middleware=[middleware])
        try:
            for n in range(200):
                config = {"configurable": {"thread_id": f"t{n}"}}
                agent.invoke({"messages": [HumanMessage(f"task {n}")]}, config)  # type: ignore[arg-type]
                assert len(middleware._threads) <= bound
            assert len(live_after_closes(middleware, warmer)) == bound
            assert len({p for event, p in warmer.events if event == "attach"}) == 200
        finally:
            middleware.close()
        assert warmer.live() == set()


def test_a_thread_resumed_after_its_release_continues_from_the_agent_state() -> None:
    """A checkpointed thread invoked again and again: each invocation's runtime is rebuilt from
    the state the previous one left (its commits included)."""
    small = KeepRecent(budget=200, lookahead_at=300, hard_limit=400, commit_ahead=False)
    middleware = LookaheadMiddleware(small, token_counter=ApproxTokenCounter(), window_tokens=8192)
    received: list[list[str]] = []

    class Recording(GenericFakeChatModel):
        def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            received.append([str(m.content) for m in messages])
            return super()._generate(messages, *args, **kwargs)

    words = " ".join(f"w{k}" for k in range(120))
    model = Recording(messages=iter([AIMessage(f"answer {n}: {words}") for n in range(8)]))
    agent = create_agent(
        model, [], system_prompt="analyze", middleware=[middleware], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "resumed"}}
    try:
        for n in range(6):
            out = agent.invoke({"messages": [HumanMessage(f"question {n}")]}, config)  # type: ignore[arg-type]
            assert middleware._threads == {}  # released at the end of every invocation
    finally:
        middleware.close()
    commits = [i for i, c in enumerate(middleware.calls) if c.commit is not CommitKind.NONE]
    assert commits, "the thread's history never reached the hard limit"
    assert all(c.thread_id == "resumed" for c in middleware.calls)
    for i, sent in enumerate(received):
        # Each call sends the system prompt, the state the thread kept, and the new question.
        assert sent[0] == "analyze" and sent[-1] == f"question {i}"
        if i > 0 and i not in commits:
            assert sent[1:-1] == [*received[i - 1][1:], f"answer {i - 1}: {words}"]
    assert [str(m.content) for m in out["messages"]][-2:] == ["question 5", f"answer 5: {words}"]


# -- arguments --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: LookaheadMiddleware(never_fires(), keep_calls=-1), "keep_calls"),
        (lambda: LookaheadMiddleware(never_fires(), on_call="log"), "on_call"),
        (lambda: LookaheadMiddleware(never_fires(), max_threads=0), "max_threads"),
        (lambda: LookaheadLLM(MockLLM(), never_fires(), keep_calls=1.5), "keep_calls"),
        (lambda: LookaheadChatCompletionContext(never_fires(), on_call=1), "on_call"),
        (
            lambda: LookaheadModelClient(ForgetfulReplay([]), keep_calls=None),  # type: ignore[arg-type]
            "keep_calls",
        ),
    ],
)
def test_bad_bounds_and_observers_are_refused_naming_the_field(
    build: Callable[[], object], field: str
) -> None:
    with pytest.raises(ConfigurationError, match=field):
        build()


def test_observers_see_every_call_the_rings_do_not_keep() -> None:
    seen: list[Any] = []
    middleware = LookaheadMiddleware(never_fires(), keep_calls=2, on_call=seen.append, **quick())
    try:
        for n in range(5):
            model_call(middleware, f"t{n}")
    finally:
        middleware.close()
    assert [c.thread_id for c in seen] == [f"t{n}" for n in range(5)]
    assert list(middleware.calls) == seen[-2:] and len(middleware.clock.turns_ms) == 2


async def test_the_llm_wrapper_reports_each_call_once_it_ended() -> None:
    seen: list[LLMCall] = []
    llm = LookaheadLLM(MockLLM(max_tokens=4), never_fires(), keep_calls=1, on_call=seen.append)
    messages = [ChatMessage(role="user", content="go")]
    try:
        await llm.achat(messages)
        async for _ in await llm.astream_chat(messages):
            assert len(seen) == 1  # a streamed call is reported when its stream ended
    finally:
        await llm.aclose()
    assert len(seen) == 2 and all(call.ttft_s is not None for call in seen)
    assert list(llm.calls) == seen[-1:]

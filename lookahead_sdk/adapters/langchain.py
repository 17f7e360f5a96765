"""LangChain 1.x agents (`langchain.agents.create_agent`): lookahead context engineering as an
`AgentMiddleware`, and a callback handler that observes TTFT, usage, tool outputs and the
lookahead's own events.

    middleware = LookaheadMiddleware(Summarize())          # summarizer: the agent's own model
    agent = create_agent(ChatOpenAI(...), tools, system_prompt=..., middleware=[middleware])

What the middleware learns from the agent's model at its first call (`ModelRequest.model`): the
summarizer (that model, called through LangChain so LangSmith traces it; or `summarizer=` a
`BaseChatModel`, a "provider:model" string for `init_chat_model`, or a `CompletionClient`), the
window (`window_tokens=`, else the model's `profile["max_input_tokens"]`, else its server's
report; ConfigurationError if none says), the token counter (the server's tokenizer, else
LangChain's `count_tokens_approximately`, calibrated against each reply's usage) and whether the
server takes tag fields (`send_tags=`; by default only llama.cpp, vLLM, SGLang and this
package's servers get them, a hosted API gets none).

Hooks (callbacks can only observe; middleware can rewrite the model's input):
- `after_model` / `wrap_tool_call`: a turn or a tool output completed: segment boundary (the
  runtime may start the transform in the background), not waited for: the runtime's operations
  run in order on its own thread, and the model-call hook waits for those before it;
- `before_model`: catches up with any other change to the agent state;
- `wrap_model_call`: commits at the hard limit and sends the committed context
  (`request.override(messages=...)`); the commit is written back into the agent state
  (`RemoveMessage(REMOVE_ALL_MESSAGES)` + committed messages, as SummarizationMiddleware does), so
  later turns continue from it. The program's tags are merged into the call's `extra_body`
  (a per-call `extra_body` replaces the model's own, so both are merged).
Sync (`invoke`) and async (`ainvoke`) hooks are both implemented. One runtime per LangGraph
thread (`configurable.thread_id`), released when the thread's invocation ends (`after_agent`)
and at most `max_threads` at a time (the least recently used idle one is closed first).

Persistence: the runtime's saved state lives in the agent state (`state_schema` adds a private
`lookahead` key, written after every model turn and when the invocation ends), so a LangGraph
checkpointer saves it with the messages; a thread whose runtime was released, or one resumed in
another process, continues from it (`LookaheadRuntime.load_state`, ready lookahead included).

Events: every commit and warm-up is a LangChain custom event (`lookahead_commit`,
`lookahead_warmup`, data `LookaheadEvent.as_dict()`), dispatched inside the agent's run (warm-ups
finish in the background and go out at the thread's next hook); `LookaheadCallbackHandler`
records them. `serve_metrics(port)` serves Prometheus metrics.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, NotRequired
from uuid import UUID

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse, PrivateStateAttr
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import LLMResult
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from lookahead_sdk.adapters._events import LookaheadEvent
from lookahead_sdk.adapters._metrics import MetricsServer
from lookahead_sdk.adapters._mirror import HistoryMirror
from lookahead_sdk.adapters._models import (
    FrameworkCompletionClient,
    ModelFacts,
    Usage,
    in_worker_thread,
    is_completion_client,
    text_counter,
)
from lookahead_sdk.adapters._records import DEFAULT_KEEP, CallLog, HookClock
from lookahead_sdk.adapters._session import (
    AdapterCore,
    AdapterSettings,
    Discovered,
    MirroredRuntime,
    Step,
    policy_offload_store,
)
from lookahead_sdk.base.completion import CompletionClient
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.base.tags import use_tags
from lookahead_sdk.base.tokens import TokenCounter, auto_token_counter
from lookahead_sdk.core.config import RuntimeConfig
from lookahead_sdk.core.hosted import HostedRuntime
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import ContextPolicy, register_adapter_locator
from lookahead_sdk.core.runtime import CommitKind, LookaheadRuntime
from lookahead_sdk.core.warmer import RequestShape
from lookahead_sdk.errors import ConfigurationError, StateError
from lookahead_sdk.strategies.offload import read_offloaded_tool

DEFAULT_THREAD = "default"
DEFAULT_MAX_THREADS = 64
CLOSE_WAIT_S = 5.0  # a rebuilt thread waits this long at most for its old runtime to close
STATE_KEY = "lookahead"  # the agent-state key holding the runtime's saved state
SUMMARY_RUN_NAME = "lookahead_summary"
LOOKAHEAD_EVENTS = ("lookahead_commit", "lookahead_warmup")  # custom event names

log = logging.getLogger(__name__)


def to_openai(message: BaseMessage) -> Message:
    return convert_to_openai_messages(message)  # type: ignore[return-value]


def from_openai(message: Message) -> BaseMessage:
    converted = convert_to_messages([message])[0]
    converted.id = str(uuid.uuid4())  # a new message: state reducers need an id
    return converted


def message_key(message: BaseMessage) -> str | None:
    return message.id


def new_mirror() -> HistoryMirror[BaseMessage]:
    return HistoryMirror(to_openai, from_openai, message_key)


def current_thread_id() -> str:
    from langgraph.config import get_config

    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # outside a graph run
        return DEFAULT_THREAD
    return str(configurable.get("thread_id") or DEFAULT_THREAD)


def offload_read_tool(store: OffloadStore) -> BaseTool:
    """The read-back tool for Offload's placeholders, as a LangChain tool."""
    tool = read_offloaded_tool(store)
    return StructuredTool.from_function(
        func=tool.function,
        name=tool.name,
        description=tool.description,
        args_schema=tool.parameters,
    )


# -- the agent's model as summarizer, window and token counter -------------------------------
class LangChainCompletionClient(FrameworkCompletionClient):
    """A LangChain chat model as the summarizer: `model.invoke` (on a worker thread, as a root
    run named `lookahead_summary`, so LangSmith and the model's callbacks trace it), with the
    program's tags in `extra_body` where the model has one and its server takes them."""

    framework = "langchain"

    def __init__(self, model: BaseChatModel) -> None:
        super().__init__(model, model_facts(model).base_url)

    async def call(
        self,
        messages: list[Message],
        max_tokens: int,
        temperature: float,
        tags: RequestTags | None,
    ) -> tuple[str, Usage]:
        model: BaseChatModel = self.model
        kwargs: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        fields = self.tag_fields(tags)
        if fields and "extra_body" in type(model).model_fields:
            kwargs["extra_body"] = {**fields, **(getattr(model, "extra_body", None) or {})}
        config: dict[str, Any] = {
            "run_name": SUMMARY_RUN_NAME,
            "tags": ["lookahead"],
            "metadata": {
                "lookahead_program_id": tags.program_id if tags else None,
                "lookahead_group_id": tags.lookahead_group_id if tags else None,
            },
        }
        prompt = convert_to_messages(messages)
        reply = await in_worker_thread(lambda: model.invoke(prompt, config, **kwargs), tags)
        return str(reply.text), message_usage(reply)


def message_usage(message: BaseMessage) -> Usage:
    usage = getattr(message, "usage_metadata", None) or {}
    details = usage.get("input_token_details") or {}
    return Usage(
        int(usage.get("input_tokens", 0) or 0),
        int(details.get("cache_read", 0) or 0),
        int(usage.get("output_tokens", 0) or 0),
    )


def as_summarizer(value: object) -> CompletionClient:
    """What `summarizer=` accepts: a chat model, a "provider:model" string, a CompletionClient."""
    if isinstance(value, BaseChatModel):
        return LangChainCompletionClient(value)
    if isinstance(value, str):
        from langchain.chat_models import init_chat_model

        try:
            model = init_chat_model(value)
        except Exception as error:  # unknown provider, missing package, missing credentials
            raise ConfigurationError(
                f"summarizer={value!r}: init_chat_model could not build it ({error})"
            ) from error
        return LangChainCompletionClient(model)
    if is_completion_client(value):
        return value  # type: ignore[return-value]
    raise ConfigurationError(
        "summarizer must be a LangChain chat model (a BaseChatModel such as ChatOpenAI(...)), a "
        "'provider:model' string for init_chat_model (e.g. 'openai:gpt-4o-mini'), or a "
        f"CompletionClient; got {type(value).__name__}"
    )


def model_facts(model: object) -> ModelFacts:
    """What a LangChain chat model says about itself: name, server (OpenAI-compatible models),
    window (`profile["max_input_tokens"]`), and LangChain's approximate token counter."""
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    base_url = getattr(model, "openai_api_base", None) or getattr(model, "base_url", None)
    profile = getattr(model, "profile", None)
    window = profile.get("max_input_tokens") if isinstance(profile, dict) else None
    return ModelFacts(
        name=name if isinstance(name, str) else None,
        base_url=base_url if isinstance(base_url, str) else None,
        window_tokens=window if isinstance(window, int) and window > 0 else None,
        token_counter=text_counter(approximate_tokens, "langchain:count_tokens_approximately"),
    )


def approximate_tokens(text: str) -> int:
    return count_tokens_approximately(
        [HumanMessage(content=text)], extra_tokens_per_message=0, count_name=False
    )


class LookaheadAgentState(AgentState):
    """The agent state with the runtime's saved state, private to the middleware (neither input
    nor output of the agent), checkpointed with the messages."""

    lookahead: NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr]]


@dataclass(frozen=True)
class ModelCall:
    """One model call seen by the middleware: when the agent wanted it and what was committed."""

    thread_id: str
    started_at: float  # perf_counter at the model-call hook, before the commit
    commit: CommitKind
    context_tokens: int


@dataclass
class _Thread:
    thread_id: str
    session: MirroredRuntime[BaseMessage]
    system: SystemMessage | None = None  # the agent's system message, learned at the first call
    synced: tuple[int, str | None] = (0, None)  # length and last id of the list last synced
    users: int = 0  # hooks using the thread right now: it is not released meanwhile
    fresh: bool = True  # no model call yet: the agent state's saved runtime state is loaded then
    saved: dict[str, Any] | None = None  # the state at the last model call, for after_model

    @property
    def program_id(self) -> str:
        return self.session.runtime.program_id

    def items(self, messages: Sequence[AnyMessage]) -> list[BaseMessage]:
        return [self.system, *messages] if self.system is not None else list(messages)

    def step(
        self,
        messages: Sequence[AnyMessage],
        *,
        commit: bool = False,
        shape: RequestShape | None = None,
        save: bool = False,
    ) -> Step[BaseMessage]:
        items = self.items(messages)
        step = self.session.step(items, commit=commit, shape=shape, save=save)
        self.synced = _signature(items)
        return step

    async def astep(
        self,
        messages: Sequence[AnyMessage],
        *,
        commit: bool = False,
        shape: RequestShape | None = None,
        save: bool = False,
    ) -> Step[BaseMessage]:
        items = self.items(messages)
        step = await self.session.astep(items, commit=commit, shape=shape, save=save)
        self.synced = _signature(items)
        return step

    def submit_step(self, messages: Sequence[AnyMessage]) -> None:
        """A boundary the framework does not wait for (the next blocking call waits for it)."""
        items = self.items(messages)
        self.session.submit_step(items)
        self.synced = _signature(items)

    def submit_tool_output(self, result: ToolMessage) -> None:
        result.id = result.id or str(uuid.uuid4())  # the id the state will keep
        self.session.submit_extend([result])
        self.synced = (self.synced[0] + 1, result.id)

    def unchanged(self, messages: Sequence[AnyMessage]) -> bool:
        """Cheap check before a full sync: nothing was added since the last one."""
        return self.system is None or _signature(self.items(messages)) == self.synced


def _signature(items: Sequence[BaseMessage]) -> tuple[int, str | None]:
    return len(items), items[-1].id if items else None


class LookaheadMiddleware(AgentMiddleware):
    """Lookahead context engineering for `create_agent`. Swap the policy with
    `@context_policy(Offload())` on the middleware (or on the agent built with it), or pass it
    explicitly."""

    state_schema = LookaheadAgentState
    default_context_policy: ClassVar[ContextPolicy | None] = None  # set by @context_policy

    def __init__(
        self,
        policy: ContextPolicy | None = None,
        config: RuntimeConfig | None = None,
        *,
        send_tags: bool | None = None,
        merge_extra_body: bool = True,
        max_threads: int = DEFAULT_MAX_THREADS,
        release_after_agent: bool = True,
        keep_calls: int = DEFAULT_KEEP,
        on_call: Callable[[ModelCall], None] | None = None,
        **overrides: Any,
    ) -> None:
        """`overrides`: `RuntimeConfig` fields (window_tokens=, token_counter=, warmer=, ...);
        `summarizer=` also takes a LangChain chat model or a "provider:model" string (default:
        the agent's own model); `warmer="auto"` builds one for the model's server.

        `send_tags`: write the program's tags into request bodies (True), never (False), or only
        where the model's server is known to take them (None). `max_threads`: runtimes kept for
        LangGraph threads at most (the least recently used idle one is closed first).
        `release_after_agent`: close a thread's runtime when its invocation ends; False keeps it
        (within `max_threads`), so background work done after the last turn serves the thread's
        next invocation. `keep_calls`: the recent `calls` kept; `on_call`: called with every
        `ModelCall`."""
        super().__init__()
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise ConfigurationError(
                f"max_threads must be an int >= 1 (runtimes kept for LangGraph threads), got "
                f"{max_threads!r}"
            )
        settings = AdapterSettings.resolve(
            policy,
            self,
            config,
            overrides,
            coerce_summarizer=as_summarizer,
            has_model=True,  # the agent's model, seen at the first call
            send_tags=send_tags,
        )
        self._core = AdapterCore(settings, "langchain")
        self.merge_extra_body = merge_extra_body
        self.max_threads = max_threads
        self.release_after_agent = release_after_agent
        self.tools: list[BaseTool] = self._read_tools()
        self.calls: CallLog[ModelCall] = CallLog(keep_calls, on_call)
        self.clock = HookClock(keep_calls)
        self._shape_cache: tuple[tuple[Any, ...], RequestShape] | None = None
        self._threads: OrderedDict[str, _Thread] = OrderedDict()  # least recently used first
        # Released runtimes still closing, by thread id (a rebuilt thread waits for its own).
        self._closing: dict[str, tuple[HostedRuntime, Future[None]]] = {}
        self._lock = threading.Lock()

    @property
    def settings(self) -> AdapterSettings:
        return self._core.settings

    @property
    def policy(self) -> ContextPolicy:
        return self.settings.policy

    def _read_tools(self) -> list[BaseTool]:
        store = self.settings.config.offload_store or policy_offload_store(self.settings.policy)
        return [offload_read_tool(store)] if store is not None else []

    def with_context_policy(self, policy: ContextPolicy) -> LookaheadMiddleware:
        """Swap the policy in place (an agent already built with this middleware takes it);
        refused once the middleware serves a thread."""
        with self._lock:
            if self._threads or self._core.started:
                raise StateError(
                    "swap the policy before the agent runs: this middleware already served a "
                    "model call"
                )
            self._core.settings = self.settings.with_policy(policy, self, has_model=True)
            self.tools = self._read_tools()
        return self

    def runtime_for(self, thread_id: str = DEFAULT_THREAD) -> MirroredRuntime[BaseMessage]:
        """The runtime serving one thread (created on first use). Before the agent's first
        model call it is built without what the model says (its summarizer, window, server):
        that call rebuilds it with them, carrying its state over (this object stays valid; a
        `LookaheadRuntime` taken from it before then does not)."""
        if not self._core.started:
            self._core.discover(*self._discovery(None), provisional=True)
        with self._lock:
            return self._thread(thread_id, create=True).session  # type: ignore[union-attr]

    @property
    def discovered(self) -> Discovered | None:
        """What the middleware learned at the agent's first model call (window, token counter,
        summarizer, warmer, the wire tags go in); None before it."""
        return self._core.discovered

    # -- what the model says (once) ------------------------------------------------------------
    def _ready(self, model: BaseChatModel | None) -> None:
        if not self._core.knows_model:
            self._core.discover(*self._discovery(model))
            self._rebuild_provisional()

    async def _aready(self, model: BaseChatModel | None) -> None:
        if not self._core.knows_model:
            await self._core.adiscover(*self._discovery(model))
            await asyncio.to_thread(self._rebuild_provisional)

    def _rebuild_provisional(self) -> None:
        """The runtimes `runtime_for()` built before the model was known, rebuilt from what
        it says, with their state (history, stats)."""
        provisional = self._core.take_provisional_runtimes()
        with self._lock:
            for thread in self._threads.values():
                if any(thread.session.hosted is hosted for hosted in provisional):
                    self._rebuild(thread)

    def _rebuild(self, thread: _Thread) -> None:
        """Under `_lock`."""
        old = thread.session.hosted
        state = thread.session.save_state()
        self._core.release(old)
        # Closed first: it detaches from the warmer under the program id the new one takes.
        old.close_soon().result(CLOSE_WAIT_S)
        new = self._core.host(old.runtime.tags)
        core = self._core

        async def load(runtime: LookaheadRuntime) -> None:
            core.load(runtime, state)

        new.call(load)
        thread.session.hosted = new

    def _discovery(
        self, model: BaseChatModel | None
    ) -> tuple[str, ModelFacts, CompletionClient | None]:
        if model is None:
            return type(self).__name__, ModelFacts(), None
        return type(self).__name__, model_facts(model), LangChainCompletionClient(model)

    # -- threads -------------------------------------------------------------------------------
    @contextmanager
    def _using(self, *, create: bool = False) -> Iterator[_Thread | None]:
        """The current LangGraph thread, held for the hook's duration (never released while a
        hook uses it). Only the model call creates one: it syncs the whole list anyway."""
        with self._lock:
            thread = self._thread(current_thread_id(), create=create)
            if thread is not None:
                thread.users += 1
        try:
            yield thread
        finally:
            if thread is not None:
                with self._lock:
                    thread.users -= 1

    def _thread(self, thread_id: str, *, create: bool) -> _Thread | None:
        """Under `_lock`: the thread, now the most recently used one."""
        thread = self._threads.get(thread_id)
        if thread is not None:
            self._threads.move_to_end(thread_id)
            return thread
        if not create:
            return None
        closing = self._closing.pop(thread_id, None)
        if closing is not None and not wait([closing[1]], timeout=CLOSE_WAIT_S).done:
            # The old runtime detaches from the warmer when it closes, under the same program id
            # the new one attaches with: normally done in a moment.
            log.warning("the released runtime of thread %s is still closing", thread_id)
        tags = self.settings.program_tags(None if thread_id == DEFAULT_THREAD else thread_id)
        session = MirroredRuntime(self._core.host(tags), new_mirror())
        thread = self._threads[thread_id] = _Thread(thread_id, session)
        self._evict()
        return thread

    def _evict(self) -> None:
        """Under `_lock`: close the least recently used idle threads beyond `max_threads`."""
        excess = len(self._threads) - self.max_threads
        if excess <= 0:
            return
        newest = next(reversed(self._threads))  # the thread being created
        idle = [t for key, t in self._threads.items() if t.users == 0 and key != newest]
        for thread in idle[:excess]:
            self._release(thread)

    def _release(self, thread: _Thread) -> None:
        """Under `_lock`: forget the thread; its runtime closes on the adapter loop after the
        operations already given to it, without blocking the caller. Its state lives on in the
        agent state (checkpointed): the thread's next model call resumes from it."""
        del self._threads[thread.thread_id]
        self._closing = {key: c for key, c in self._closing.items() if not c[1].done()}
        hosted = thread.session.hosted
        self._core.release(hosted)
        self._closing[thread.thread_id] = (hosted, hosted.close_soon())

    # -- events ----------------------------------------------------------------------------------
    def _emit(self, events: Sequence[LookaheadEvent | None]) -> None:
        for event in events:
            if event is not None:
                _dispatch(lambda e=event: dispatch_custom_event(e.name, e.as_dict()))

    async def _aemit(self, events: Sequence[LookaheadEvent | None]) -> None:
        for event in events:
            if event is not None:
                try:
                    await adispatch_custom_event(event.name, event.as_dict())
                except RuntimeError as error:  # outside a run (no parent): nobody to tell
                    log.debug("lookahead event %s not dispatched: %s", event.name, error)

    def _pending(self, thread: _Thread | None) -> list[LookaheadEvent]:
        return self._core.pending_events(thread.program_id) if thread is not None else []

    # -- segment boundaries ------------------------------------------------------------------
    def before_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        """Catch up with state changes made elsewhere (wrap_model_call syncs the first call)."""
        with self.clock.measure(), self._using() as thread:
            if thread is not None and not thread.unchanged(state["messages"]):
                thread.step(state["messages"])
        return None

    async def abefore_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        with self.clock.measure(), self._using() as thread:
            if thread is not None and not thread.unchanged(state["messages"]):
                await thread.astep(state["messages"])
        return None

    def after_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        """The model's turn completed: boundary (not waited for: the tools run meanwhile); the
        runtime's state as of the model call goes into the agent state."""
        with self.clock.measure(), self._using() as thread:
            update = self._turn_ended(thread, state)
            events = self._pending(thread)
        self._emit(events)
        return update

    async def aafter_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        with self.clock.measure(), self._using() as thread:
            update = self._turn_ended(thread, state)
            events = self._pending(thread)
        await self._aemit(events)
        return update

    @staticmethod
    def _turn_ended(thread: _Thread | None, state: AgentState) -> dict[str, Any] | None:
        if thread is None:
            return None
        thread.submit_step(state["messages"])
        saved, thread.saved = thread.saved, None
        return {STATE_KEY: saved} if saved is not None else None

    def after_agent(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        """The thread's invocation ended: its final state into the agent state, then release
        its runtime (see `release_after_agent`)."""
        with self._using() as thread:
            if thread is None:
                return None
            saved = thread.session.save_state()
            events = self._pending(thread)
        self._emit(events)
        self._end_invocation()
        return {STATE_KEY: saved}

    async def aafter_agent(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        with self._using() as thread:
            if thread is None:
                return None
            saved = await thread.session.asave_state()
            events = self._pending(thread)
        await self._aemit(events)
        self._end_invocation()
        return {STATE_KEY: saved}

    def _end_invocation(self) -> None:
        if self.release_after_agent:
            with self._lock:
                thread = self._threads.get(current_thread_id())
                if thread is not None and thread.users == 0:
                    self._release(thread)

    def wrap_tool_call(
        self, request: Any, handler: Callable[[Any], ToolMessage | Command]
    ) -> ToolMessage | Command:
        result = handler(request)
        if isinstance(result, ToolMessage):
            self._tool_output(result)
        return result

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[ToolMessage | Command]]
    ) -> ToolMessage | Command:
        result = await handler(request)
        if isinstance(result, ToolMessage):
            self._tool_output(result)
        return result

    def _tool_output(self, result: ToolMessage) -> None:
        with self.clock.measure(), self._using() as thread:
            if thread is not None:
                thread.submit_tool_output(result)

    # -- the commit, in the model call -------------------------------------------------------
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> Any:
        self.clock.start_turn()
        self._ready(request.model)
        with ExitStack() as held:
            with self.clock.measure():
                started = time.perf_counter()
                thread = held.enter_context(self._using(create=True))
                assert thread is not None
                saved = self._resuming(thread, request)
                if saved is not None:
                    thread.session.restore(self._core, saved, thread.items(request.messages))
                step = thread.step(
                    request.messages, commit=True, shape=self._shape(request), save=True
                )
                request, events, call = self._prepared(request, thread, step, started)
            self._emit(events)
            with use_tags(thread.session.tags if self._core.sends_tags else None):
                response = handler(request)
        with self.clock.measure():
            thread.saved = step.state
            return self._persisted(request, response, step, call)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        self.clock.start_turn()
        await self._aready(request.model)
        with ExitStack() as held:
            with self.clock.measure():
                started = time.perf_counter()
                thread = held.enter_context(self._using(create=True))
                assert thread is not None
                saved = self._resuming(thread, request)
                if saved is not None:
                    await thread.session.arestore(self._core, saved, thread.items(request.messages))
                step = await thread.astep(
                    request.messages, commit=True, shape=self._shape(request), save=True
                )
                request, events, call = self._prepared(request, thread, step, started)
            await self._aemit(events)
            with use_tags(thread.session.tags if self._core.sends_tags else None):
                response = await handler(request)
        with self.clock.measure():
            thread.saved = step.state
            return self._persisted(request, response, step, call)

    @staticmethod
    def _resuming(thread: _Thread, request: ModelRequest) -> dict[str, Any] | None:
        """The saved state a new runtime resumes from: the agent state's, at its first call."""
        thread.system = request.system_message
        if not thread.fresh:
            return None
        thread.fresh = False
        saved = (request.state or {}).get(STATE_KEY)
        return saved if isinstance(saved, dict) else None

    def _shape(self, request: ModelRequest) -> RequestShape | None:
        """What ChatOpenAI sends besides messages: the model name and the tools (bound with
        `convert_to_openai_tool`), so warm-ups render like the real request. An explicit
        `shape=` wins."""
        if self.settings.explicit_shape:
            return None
        model = getattr(request.model, "model_name", None) or "default"
        key = (model, tuple(id(tool) for tool in request.tools))
        if self._shape_cache is None or self._shape_cache[0] != key:
            tools = tuple(convert_to_openai_tool(tool) for tool in request.tools) or None
            self._shape_cache = (key, RequestShape(model, tools))
        return self._shape_cache[1]

    def _prepared(
        self, request: ModelRequest, thread: _Thread, step: Step[BaseMessage], started: float
    ) -> tuple[ModelRequest, list[LookaheadEvent | None], ModelCall]:
        outcome = step.outcome
        assert outcome is not None
        runtime = thread.session.runtime
        call = ModelCall(thread.thread_id, started, outcome.kind, runtime.main.tokens)
        self.calls.append(call)
        if step.items is not None:
            system, messages = split_system(step.items, request.system_message)
            request = request.override(messages=messages, system_message=system)
        fields = self._core.tag_fields(thread.session.tags) if self.merge_extra_body else {}
        if fields and "extra_body" in getattr(type(request.model), "model_fields", {}):
            request = request.override(model_settings=merged_settings(request, fields))
        events = [*self._pending(thread), self._core.commit_event(outcome, runtime)]
        return request, events, call

    def _persisted(
        self,
        request: ModelRequest,
        response: ModelResponse | Any,
        step: Step[BaseMessage],
        call: ModelCall,
    ) -> Any:
        """After a commit, the agent state becomes the committed history plus the new reply."""
        model_response = (
            response.model_response if isinstance(response, ExtendedModelResponse) else response
        )
        if not isinstance(model_response, ModelResponse):
            model_response = ModelResponse(result=[model_response])
        replies = [m for m in model_response.result if isinstance(m, AIMessage)]
        if replies:  # calibrate the token counter with the prompt size the model reports
            self._core.observe_usage(call.context_tokens, message_usage(replies[-1]).prompt_tokens)
        if step.items is None:
            return response
        update = {
            "messages": [
                RemoveMessage(id=REMOVE_ALL_MESSAGES),
                *request.messages,
                *model_response.result,
            ]
        }
        return ExtendedModelResponse(model_response=model_response, command=Command(update=update))

    # -- metrics -----------------------------------------------------------------------------
    def metrics_text(self) -> str:
        """Prometheus text exposition of every runtime's stats (released ones included)."""
        return self._core.metrics_text()

    def serve_metrics(self, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
        """`GET /metrics` on a daemon thread (port 0: any free one, see `.url`); stopped by
        `close()` or the server's own `close()`."""
        return self._core.serve_metrics(port, host)

    # -- lifecycle ---------------------------------------------------------------------------
    def _take_all(self) -> list[HostedRuntime]:
        """Every runtime, released ones still closing included (closing twice is harmless)."""
        with self._lock:
            threads, closing = list(self._threads.values()), self._closing
            self._threads, self._closing = OrderedDict(), {}
        self.clock.end_turn()
        return [t.session.hosted for t in threads] + [h for h, _ in closing.values()]

    def close(self) -> None:
        """Close every thread's runtime and the warmer and summarizer given to this middleware
        (not the agent's own model)."""
        self._core.close(self._take_all())

    async def aclose(self) -> None:
        await self._core.aclose(self._take_all())


def _dispatch(send: Callable[[], None]) -> None:
    try:
        send()
    except RuntimeError as error:  # outside a run (no parent): nobody to tell
        log.debug("lookahead event not dispatched: %s", error)


def agent_middleware(target: object) -> list[LookaheadMiddleware] | None:
    """The LookaheadMiddleware instances a `create_agent` graph runs (their hooks are nodes);
    None for anything that is not a LangGraph graph (for `@context_policy`)."""
    if not isinstance(target, CompiledStateGraph):
        return None
    found: list[LookaheadMiddleware] = []
    for node in target.nodes.values():
        owner = getattr(getattr(node.bound, "func", None), "__self__", None)
        if isinstance(owner, LookaheadMiddleware) and all(owner is not m for m in found):
            found.append(owner)
    return found


register_adapter_locator(agent_middleware)


def split_system(
    items: Sequence[BaseMessage], current: SystemMessage | None
) -> tuple[SystemMessage | None, list[AnyMessage]]:
    """The committed history as (system message, state messages): the agent sends its system
    message separately; a policy that rewrote it (none of the built-in ones do) wins."""
    if items and isinstance(items[0], SystemMessage):
        return items[0], list(items[1:])  # type: ignore[return-value]
    return current, list(items)  # type: ignore[return-value]


def merged_settings(request: ModelRequest, fields: RequestTags | dict[str, Any]) -> dict[str, Any]:
    """Tag fields (or tags, as top-level fields) merged under the model's own and this call's
    extra_body (explicit values win)."""
    if isinstance(fields, RequestTags):
        fields = fields.to_body()
    own = getattr(request.model, "extra_body", None) or {}
    per_call = request.model_settings.get("extra_body") or {}
    return {**request.model_settings, "extra_body": {**fields, **own, **per_call}}


# -- observing: a plain callback handler -------------------------------------------------------
@dataclass
class ModelCallObservation:
    run_id: UUID
    started_at: float
    name: str = ""  # the run's name (`lookahead_summary` for the middleware's summaries)
    first_token_at: float | None = None
    ended_at: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    @property
    def ttft_s(self) -> float | None:
        """Only known for streamed calls (ChatOpenAI(streaming=True))."""
        return None if self.first_token_at is None else self.first_token_at - self.started_at


@dataclass(frozen=True)
class ToolOutputObservation:
    name: str
    chars: int
    tokens: int


class LookaheadCallbackHandler(BaseCallbackHandler):
    """Observes every chat-model call (TTFT when streaming, usage incl. cached prompt tokens),
    every tool output's size, and the middleware's lookahead events (custom events
    `lookahead_commit` / `lookahead_warmup`). Attach it like any callback:
    `config={"callbacks": [h]}`.

    `model_calls`, `tool_outputs` and `lookahead_events` keep the `keep_calls` most recent
    observations; `on_call`, `on_tool_output` and `on_lookahead_event` are called with every
    one."""

    def __init__(
        self,
        token_counter: TokenCounter | None = None,
        *,
        keep_calls: int = DEFAULT_KEEP,
        on_call: Callable[[ModelCallObservation], None] | None = None,
        on_tool_output: Callable[[ToolOutputObservation], None] | None = None,
        on_lookahead_event: Callable[[LookaheadEvent], None] | None = None,
    ) -> None:
        super().__init__()
        self.token_counter = token_counter or auto_token_counter()
        self.model_calls: CallLog[ModelCallObservation] = CallLog(keep_calls, on_call)
        self.tool_outputs: CallLog[ToolOutputObservation] = CallLog(
            keep_calls, on_tool_output, names=("keep_calls", "on_tool_output")
        )
        self.lookahead_events: CallLog[LookaheadEvent] = CallLog(
            keep_calls, on_lookahead_event, names=("keep_calls", "on_lookahead_event")
        )
        self._open: dict[UUID, ModelCallObservation] = {}
        self._tools: dict[UUID, str] = {}
        self._lock = threading.Lock()

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self._open[run_id] = ModelCallObservation(
                run_id, time.perf_counter(), str(kwargs.get("name") or "")
            )

    def on_llm_new_token(
        self, token: str, *, chunk: Any = None, run_id: UUID, **kwargs: Any
    ) -> None:
        now = time.perf_counter()
        message = getattr(chunk, "message", None)
        if not token and not getattr(message, "tool_call_chunks", None):
            return
        with self._lock:
            observation = self._open.get(run_id)
            if observation is not None and observation.first_token_at is None:
                observation.first_token_at = now

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            observation = self._open.pop(run_id, None)
            if observation is None:
                return
            observation.ended_at = time.perf_counter()
            usage = usage_of(response)
            observation.prompt_tokens, observation.cached_tokens, observation.completion_tokens = (
                usage
            )
        self.model_calls.append(observation)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._open.pop(run_id, None)

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        with self._lock:
            self._tools[run_id] = str(
                (serialized or {}).get("name") or kwargs.get("name") or "tool"
            )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        text = output.content if isinstance(output, ToolMessage) else output
        text = text if isinstance(text, str) else str(text)
        with self._lock:
            name = self._tools.pop(run_id, "tool")
        tokens = self.token_counter.count_text(text)
        self.tool_outputs.append(ToolOutputObservation(name, len(text), tokens))

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._tools.pop(run_id, None)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if name in LOOKAHEAD_EVENTS and isinstance(data, dict):
            self.lookahead_events.append(LookaheadEvent(**data))


def usage_of(response: LLMResult) -> tuple[int, int, int]:
    """(prompt, cached prompt, completion) tokens of one chat-model result."""
    for generations in response.generations:
        for generation in generations:
            usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
            if usage:
                details = usage.get("input_token_details") or {}
                return (
                    int(usage.get("input_tokens", 0)),
                    int(details.get("cache_read", 0) or 0),
                    int(usage.get("output_tokens", 0)),
                )
    token_usage = (response.llm_output or {}).get("token_usage") or {}
    cached = (token_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return (
        int(token_usage.get("prompt_tokens", 0)),
        int(cached),
        int(token_usage.get("completion_tokens", 0)),
    )

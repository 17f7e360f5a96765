"""LlamaIndex (llama-index-core 0.14) agents: an LLM wrapper that manages the current run's
context, and a memory holding the managed history across runs.

    llm = LookaheadLLM(OpenAILike(...), Summarize())   # summarizer: the wrapped LLM itself
    agent = FunctionAgent(tools=tools, llm=llm, system_prompt=...)      # or ReActAgent, AgentWorkflow
    await agent.run("task", memory=llm.memory())

Why an LLM wrapper: agents send `[system, *memory.aget(), *scratchpad]`, and the scratchpad (this
run's tool calls and outputs) reaches memory only when the run ends, so no memory can see
mid-run tool outputs. Every model call goes through the LLM, with the full list. The wrapper
mirrors that list into the runtime (only new messages are converted), signals the segment
boundary, commits at the hard limit and sends the committed context instead. The framework's
own scratchpad stays as it is; the runtime keeps the committed history and later calls map onto
it. `LookaheadMemory` returns that committed history to the next run, so memory stays bounded by
the policy; the messages the agent stores at the end of a run are ones the runtime already has.

What the wrapper learns from the wrapped LLM (at its first call, never in a constructor): the
summarizer (the LLM itself, called through LlamaIndex so its instrumentation traces the summary;
or `summarizer=` another LLM or a `CompletionClient`), the window (`window_tokens=`, else
`metadata.context_window` when the LLM was told it, else the server's report), the token
counter (the server's tokenizer, else LlamaIndex's `get_tokenizer()`, calibrated against usage)
and whether the server takes tag fields (`send_tags=`).

Tags: merged into the request's `extra_body` for OpenAI-family LLMs (under the LLM's own
`additional_kwargs` extra_body) where the server takes them, and set as the current tags for the
tagging transport. Events: `LookaheadCommitEvent` / `LookaheadWarmupEvent`, LlamaIndex
instrumentation events (`get_dispatcher(__name__)`). Persistence: `Context.to_dict()` holds the
memory, whose `to_dict()` holds the runtime's saved state; `Context.from_dict(agent, data,
serializer=llm.serializer())` gives it back to the LLM.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from llama_index.core.agent.workflow import AgentWorkflow, BaseWorkflowAgent
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM
from llama_index.core.memory import BaseMemory
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import JsonSerializer
from llama_index.llms.openai.utils import from_openai_message_dict, to_openai_message_dict

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
)
from lookahead_sdk.base.completion import CompletionClient, usage_numbers
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.base.tags import use_tags
from lookahead_sdk.core.config import RuntimeConfig
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import ContextPolicy, register_adapter_locator
from lookahead_sdk.core.runtime import CommitKind, LookaheadRuntime
from lookahead_sdk.core.warmer import RequestShape
from lookahead_sdk.errors import ConfigurationError, StateError
from lookahead_sdk.strategies.offload import read_offloaded_tool

dispatcher = get_dispatcher(__name__)
log = logging.getLogger(__name__)


def new_mirror(model: str | None) -> HistoryMirror[ChatMessage]:
    def to_openai(message: ChatMessage) -> Message:
        return dict(to_openai_message_dict(message, model=model))

    return HistoryMirror(to_openai, from_openai_message_dict)


def offload_read_tool(store: OffloadStore) -> FunctionTool:
    """The read-back tool for Offload's placeholders, as a LlamaIndex tool."""
    tool = read_offloaded_tool(store)
    return FunctionTool.from_defaults(
        fn=tool.function, name=tool.name, description=tool.description
    )


# -- the wrapped LLM as summarizer, window and token counter --------------------------------
def tagged_llm(llm: LLM, fields: dict[str, Any], kwargs: dict[str, Any]) -> LLM:
    """The LLM to call with tag `fields` in this call's extra_body (OpenAI family; none for
    other LLMs or empty fields). OpenAI-family LLMs put their `additional_kwargs` over per-call
    arguments, so when those carry an extra_body of their own, the fields go into a copy of the
    LLM (sharing its clients), under the LLM's own values."""
    own = getattr(llm, "additional_kwargs", None)
    if not fields or not isinstance(own, dict):
        return llm
    if "extra_body" not in own:
        kwargs["extra_body"] = {**fields, **(kwargs.get("extra_body") or {})}
        return llm
    extra_body = {**fields, **(own.get("extra_body") or {})}
    return llm.model_copy(update={"additional_kwargs": {**own, "extra_body": extra_body}})


class LlamaIndexCompletionClient(FrameworkCompletionClient):
    """A LlamaIndex LLM as the summarizer: `llm.chat` on a worker thread (LlamaIndex's
    instrumentation traces it as any chat call), tagged where its server takes tags."""

    framework = "llamaindex"

    def __init__(self, llm: LLM) -> None:
        base_url = getattr(llm, "api_base", None)
        super().__init__(llm, base_url if isinstance(base_url, str) else None)

    async def call(
        self,
        messages: list[Message],
        max_tokens: int,
        temperature: float,
        tags: RequestTags | None,
    ) -> tuple[str, Usage]:
        kwargs: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        llm = tagged_llm(self.model, self.tag_fields(tags), kwargs)
        prompt = [from_openai_message_dict(dict(m)) for m in messages]
        response = await in_worker_thread(lambda: llm.chat(prompt, **kwargs), tags)
        return response.message.content or "", response_usage(response)


def response_usage(response: ChatResponse) -> Usage:
    """Usage of a chat response: the OpenAI reply in `raw`, else LlamaIndex's token counts."""
    raw = response.raw
    usage = raw.get("usage") if isinstance(raw, dict) else getattr(raw, "usage", None)
    if usage is not None and not isinstance(usage, dict):
        return Usage(*usage_numbers(usage, None))
    counts = usage if isinstance(usage, dict) else response.additional_kwargs
    return Usage(
        int(counts.get("prompt_tokens", 0) or 0), 0, int(counts.get("completion_tokens", 0) or 0)
    )


def as_summarizer(value: object) -> CompletionClient:
    if isinstance(value, LLM):
        return LlamaIndexCompletionClient(value)
    if is_completion_client(value):
        return value  # type: ignore[return-value]
    raise ConfigurationError(
        "summarizer must be a LlamaIndex LLM (e.g. OpenAILike(...)) or a CompletionClient; "
        f"got {type(value).__name__}"
    )


def model_facts(llm: LLM) -> ModelFacts:
    """What a LlamaIndex LLM says about itself: its model name, its server (`api_base`), its
    window (`metadata.context_window`, unless that is the default of a `context_window` field
    nobody set: LlamaIndex's placeholder, not the model's) and LlamaIndex's tokenizer."""
    from llama_index.core.utils import get_tokenizer

    metadata = llm.metadata
    placeholder = "context_window" in type(llm).model_fields and (
        "context_window" not in llm.model_fields_set
    )
    base_url = getattr(llm, "api_base", None)
    tokenize = get_tokenizer()
    return ModelFacts(
        name=metadata.model_name,
        base_url=base_url if isinstance(base_url, str) else None,
        window_tokens=None if placeholder else metadata.context_window,
        token_counter=text_counter(lambda text: len(tokenize(text)), "llamaindex:get_tokenizer"),
    )


# -- instrumentation events -------------------------------------------------------------------
class LookaheadCommitEvent(BaseEvent):
    """A commit before a chat call: `kind` hit / fallback / sync, `cold` for a hit no warm-up
    had prefilled (see `LookaheadEvent`)."""

    program_id: str
    kind: str
    cold: bool = False
    reason: str = ""
    waited_s: float = 0.0
    transform_s: float = 0.0
    context_tokens: int = 0
    unwarmed_tokens: int | None = None

    @classmethod
    def class_name(cls) -> str:
        return "LookaheadCommitEvent"


class LookaheadWarmupEvent(BaseEvent):
    """A warm-up finished in the background: `kind` complete / partial / failed."""

    program_id: str
    kind: str
    group_id: str | None = None
    prefilled_tokens: int = 0
    seconds: float = 0.0

    @classmethod
    def class_name(cls) -> str:
        return "LookaheadWarmupEvent"


def instrumentation_event(event: LookaheadEvent) -> BaseEvent:
    cls = LookaheadCommitEvent if event.type == "commit" else LookaheadWarmupEvent
    data = event.as_dict()
    return cls(**{name: data[name] for name in cls.model_fields if name in data})


@dataclass
class LLMCall:
    """One model call through the wrapper: when it was wanted, what was committed, first token.
    Recorded in `calls` (and given to `on_call`) once the call ended."""

    started_at: float  # perf_counter at the wrapper, before the commit
    commit: CommitKind
    context_tokens: int
    first_token_at: float | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started_at


def _has_output(response: ChatResponse) -> bool:
    return bool(response.delta) or bool(response.message.additional_kwargs.get("tool_calls"))


class LookaheadLLM(FunctionCallingLLM):
    """Any LlamaIndex LLM (function-calling or not), with lookahead context engineering on every
    chat call. Swap the policy with `@context_policy(Offload())` on the wrapper (or on the agent
    built with it)."""

    llm: LLM = Field(description="the wrapped LLM")

    default_context_policy: ClassVar[ContextPolicy | None] = None  # set by @context_policy

    _core: AdapterCore = PrivateAttr()
    _session: MirroredRuntime[ChatMessage] | None = PrivateAttr(default=None)
    _clock: HookClock = PrivateAttr(default_factory=HookClock)
    _calls: CallLog[LLMCall] = PrivateAttr(default_factory=CallLog)
    _tagged: LLM | None = PrivateAttr(default=None)  # the LLM with the program's tags
    # The runtime's state when it was closed: the next session resumes it (to_dict reports it).
    _closed_state: dict[str, Any] | None = PrivateAttr(default=None)

    def __init__(
        self,
        llm: LLM,
        policy: ContextPolicy | None = None,
        config: RuntimeConfig | None = None,
        *,
        send_tags: bool | None = None,
        keep_calls: int = DEFAULT_KEEP,
        on_call: Callable[[LLMCall], None] | None = None,
        **overrides: Any,
    ) -> None:
        """`overrides`: `RuntimeConfig` fields (window_tokens=, token_counter=, warmer=, ...);
        `summarizer=` also takes a LlamaIndex LLM (default: the wrapped one); `warmer="auto"`
        builds one for the LLM's server. `send_tags`: tags in request bodies always (True),
        never (False), or where the server is known to take them (None). `keep_calls`: the
        recent `calls` kept; `on_call`: called with every `LLMCall` once the call ended."""
        if not isinstance(llm, LLM):
            raise TypeError(
                f"LookaheadLLM wraps a LlamaIndex LLM (e.g. OpenAILike(...)), got {type(llm).__name__}"
            )
        super().__init__(llm=llm, callback_manager=llm.callback_manager)
        settings = AdapterSettings.resolve(
            policy,
            self,
            config,
            overrides,
            coerce_summarizer=as_summarizer,
            has_model=True,
            send_tags=send_tags,
        )
        self._core = AdapterCore(settings, "llamaindex")
        self._check_window()
        self._calls = CallLog(keep_calls, on_call)
        self._clock = HookClock(keep_calls)

    def _check_window(self) -> None:
        """A window the LLM states is checked against the policy now (a server's, at first use)."""
        settings = self._core.settings
        if settings.config.window_tokens is None:
            stated = model_facts(self.llm).window_tokens
            if stated is not None:
                settings.policy.validate(stated)

    @classmethod
    def class_name(cls) -> str:
        return "LookaheadLLM"

    def with_context_policy(self, policy: ContextPolicy) -> LookaheadLLM:
        """Swap the policy in place (an agent already built with this LLM takes it); refused
        once the LLM holds a history."""
        if self._session is not None or self._core.started:
            raise StateError(
                "swap the policy before the agent runs: this LLM already holds a history"
            )
        self._core.settings = self._core.settings.with_policy(policy, self, has_model=True)
        self._check_window()
        return self

    # -- what the adapter exposes --------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._session is not None

    @property
    def discovered(self) -> Discovered | None:
        """What the wrapper learned at first use (window, token counter, summarizer, warmer,
        the wire tags go in); None before it."""
        return self._core.discovered

    def _discovery(self) -> tuple[str, ModelFacts, CompletionClient]:
        return type(self).__name__, model_facts(self.llm), LlamaIndexCompletionClient(self.llm)

    @property
    def session(self) -> MirroredRuntime[ChatMessage]:
        """The runtime and its mirror (created at first use, after learning what the LLM and
        its server say; blocking: async code uses `asession()`)."""
        if self._session is None:
            self._core.discover(*self._discovery())
            session = self._open()
            if (state := self._take_closed_state()) is not None:
                session.restore(self._core, state)
        assert self._session is not None
        return self._session

    async def asession(self) -> MirroredRuntime[ChatMessage]:
        if self._session is None:
            await self._core.adiscover(*self._discovery())
            session = self._open()
            if (state := self._take_closed_state()) is not None:
                await session.arestore(self._core, state)
        assert self._session is not None
        return self._session

    def _take_closed_state(self) -> dict[str, Any] | None:
        state, self._closed_state = self._closed_state, None
        return state

    def saved_state(self) -> dict[str, Any] | None:
        """The runtime's saved state: the live one's, else the one saved when it was closed
        (None before the first use)."""
        if self._session is not None:
            return self._session.save_state()
        return self._closed_state

    def _open(self) -> MirroredRuntime[ChatMessage]:
        if self._session is None:
            name = self.llm.metadata.model_name
            hosted = self._core.host(self._core.settings.program_tags(), shape=RequestShape(name))
            self._session = MirroredRuntime(hosted, new_mirror(name))
        return self._session

    @property
    def policy(self) -> ContextPolicy:
        return self._core.settings.policy

    @property
    def clock(self) -> HookClock:
        return self._clock

    @property
    def calls(self) -> CallLog[LLMCall]:
        return self._calls

    def memory(self) -> LookaheadMemory:
        """A memory whose history is this LLM's committed history (pass it to `agent.run`)."""
        return LookaheadMemory.from_defaults(llm=self)

    def serializer(self, base: type[JsonSerializer] = JsonSerializer) -> JsonSerializer:
        """A `Context` serializer that gives a restored `LookaheadMemory` back to this LLM:
        `Context.from_dict(agent, data, serializer=llm.serializer())`."""
        return _binding_serializer(base)(self)

    def restore(self, state: dict[str, Any]) -> bool:
        """Load a saved runtime state (`LookaheadMemory.to_dict()["lookahead_state"]`): the
        history, stats and a ready lookahead result. False when it does not fit (logged)."""
        return self.session.restore(self._core, state)

    async def arestore(self, state: dict[str, Any]) -> bool:
        return await (await self.asession()).arestore(self._core, state)

    def metrics_text(self) -> str:
        """Prometheus text exposition of the runtime's stats."""
        return self._core.metrics_text()

    def serve_metrics(self, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
        """`GET /metrics` on a daemon thread (port 0: any free one, see `.url`)."""
        return self._core.serve_metrics(port, host)

    def close(self) -> None:
        """Close the runtime and the warmer and summarizer given to this LLM. The LLM stays
        usable: its next use starts a runtime that resumes the closed one's saved state."""
        self._clock.end_turn()
        session, self._session = self._session, None
        if session is not None:
            self._closed_state = _final_state(session.save_state)
        self._core.close([session.hosted] if session is not None else [])

    async def aclose(self) -> None:
        self._clock.end_turn()
        session, self._session = self._session, None
        if session is not None:
            self._closed_state = await _afinal_state(session.asave_state)
        await self._core.aclose([session.hosted] if session is not None else [])

    # -- the hook: every chat call ---------------------------------------------------------
    def _begin(self) -> float:
        self._clock.start_turn()
        return time.perf_counter()

    def _finish(
        self, step: Step[ChatMessage], messages: Sequence[ChatMessage], started: float
    ) -> tuple[list[ChatMessage], LLMCall]:
        assert step.outcome is not None and self._session is not None
        runtime = self._session.runtime
        call = LLMCall(started, step.outcome.kind, runtime.main.tokens)
        events = self._core.pending_events(runtime.program_id)
        events.append(self._core.commit_event(step.outcome, runtime))  # type: ignore[arg-type]
        for event in events:
            if event is not None:
                dispatcher.event(instrumentation_event(event))
        return (step.items if step.items is not None else list(messages)), call

    def _prepare(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> tuple[list[ChatMessage], LLMCall, LLM]:
        started = self._begin()
        session = self.session
        with self._clock.measure():
            step = session.step(list(messages), commit=True, shape=self._shape(kwargs))
            return (*self._finish(step, messages, started), self._target(kwargs))

    async def _aprepare(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> tuple[list[ChatMessage], LLMCall, LLM]:
        started = self._begin()
        session = await self.asession()
        with self._clock.measure():
            step = await session.astep(list(messages), commit=True, shape=self._shape(kwargs))
            return (*self._finish(step, messages, started), self._target(kwargs))

    def _shape(self, kwargs: dict[str, Any]) -> RequestShape | None:
        """The tools this call offers (OpenAI-family LLMs pass them as OpenAI tool dicts), so
        warm-ups render like the real request. An explicit `shape=` wins."""
        if self._core.settings.explicit_shape:
            return None
        tools = kwargs.get("tools")
        dicts = tuple(t for t in tools or () if isinstance(t, dict)) or None
        return RequestShape(self.llm.metadata.model_name, dicts)

    def _target(self, kwargs: dict[str, Any]) -> LLM:
        """The LLM to call, with the program's tags in this call's extra_body where the server
        takes them (the tagged copy is made once: the program's tags do not change)."""
        fields = self._core.tag_fields(self.session.tags)
        if not fields:
            return self.llm
        if "extra_body" not in (getattr(self.llm, "additional_kwargs", None) or {}):
            return tagged_llm(self.llm, fields, kwargs)
        if self._tagged is None:
            self._tagged = tagged_llm(self.llm, fields, kwargs)
        return self._tagged

    def _tags(self) -> RequestTags | None:
        return self.session.tags if self._core.sends_tags else None

    def _ended(self, call: LLMCall, response: ChatResponse | None) -> None:
        if response is not None:
            self._core.observe_usage(call.context_tokens, response_usage(response).prompt_tokens)
        self._calls.append(call)

    # -- chat: managed ---------------------------------------------------------------------
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        context, call, llm = self._prepare(messages, kwargs)
        response = None
        try:
            with use_tags(self._tags()):
                response = llm.chat(context, **kwargs)
            call.first_token_at = time.perf_counter()
        finally:
            self._ended(call, response)
        return response

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        context, call, llm = await self._aprepare(messages, kwargs)
        response = None
        try:
            with use_tags(self._tags()):
                response = await llm.achat(context, **kwargs)
            call.first_token_at = time.perf_counter()
        finally:
            self._ended(call, response)
        return response

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        context, call, llm = self._prepare(messages, kwargs)
        tags = self._tags()

        def generate() -> Iterator[ChatResponse]:
            last = None
            try:
                with use_tags(tags):
                    for last in llm.stream_chat(context, **kwargs):
                        if call.first_token_at is None and _has_output(last):
                            call.first_token_at = time.perf_counter()
                        yield last
            finally:
                self._ended(call, last)

        return generate()

    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        context, call, llm = await self._aprepare(messages, kwargs)
        tags = self._tags()
        try:
            with use_tags(tags):
                stream = await llm.astream_chat(context, **kwargs)
        except BaseException:
            self._ended(call, None)
            raise

        async def generate() -> AsyncIterator[ChatResponse]:
            last = None
            try:
                with use_tags(tags):
                    async for last in stream:
                        if call.first_token_at is None and _has_output(last):
                            call.first_token_at = time.perf_counter()
                        yield last
            finally:
                self._ended(call, last)

        return generate()

    # -- everything else: the wrapped LLM's own ---------------------------------------------
    @property
    def metadata(self) -> LLMMetadata:
        return self.llm.metadata

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self.llm.complete(prompt, formatted=formatted, **kwargs)

    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        return await self.llm.acomplete(prompt, formatted=formatted, **kwargs)

    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        return self.llm.stream_complete(prompt, formatted=formatted, **kwargs)

    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        return await self.llm.astream_complete(prompt, formatted=formatted, **kwargs)

    def _prepare_chat_with_tools(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.llm._prepare_chat_with_tools(*args, **kwargs)  # type: ignore[attr-defined]

    def _validate_chat_with_tools_response(self, *args: Any, **kwargs: Any) -> ChatResponse:
        return self.llm._validate_chat_with_tools_response(*args, **kwargs)  # type: ignore[attr-defined]

    def get_tool_calls_from_response(self, *args: Any, **kwargs: Any) -> Any:
        return self.llm.get_tool_calls_from_response(*args, **kwargs)  # type: ignore[attr-defined]


class LookaheadMemory(BaseMemory):
    """The committed history of a `LookaheadLLM`, as the memory of its agent across runs.

    `get` is the runtime's history without the leading system message (the agent adds its own);
    messages put here that the runtime already mirrored (the run's scratchpad) are not added
    twice. `to_dict()` holds the runtime's saved state (`lookahead_state`); a memory rebuilt from
    it (`from_dict`, as `Context.from_dict` does) loads it into its LLM at first use: the LLM is
    given by `from_dict(data, llm=...)`, `bind(llm)`, or `llm.serializer()`."""

    _llm: LookaheadLLM | None = PrivateAttr(default=None)
    _view: list[ChatMessage] | None = PrivateAttr(default=None)  # None: not read yet
    _pending: dict[str, Any] | None = PrivateAttr(default=None)  # a saved state to load

    def __init__(
        self,
        llm: LookaheadLLM | None = None,
        *,
        lookahead_state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if llm is not None and not isinstance(llm, LookaheadLLM):
            raise TypeError(
                f"LookaheadMemory shares the history of a LookaheadLLM, got {type(llm).__name__}"
            )
        if lookahead_state is not None and not isinstance(lookahead_state, dict):
            raise ConfigurationError(
                "lookahead_state must be the dict LookaheadMemory.to_dict() saved, got "
                f"{type(lookahead_state).__name__}"
            )
        super().__init__(**kwargs)
        self._pending = lookahead_state
        self._llm = llm

    @classmethod
    def class_name(cls) -> str:
        return "LookaheadMemory"

    @classmethod
    def from_defaults(cls, llm: LookaheadLLM | None = None, **kwargs: Any) -> LookaheadMemory:  # type: ignore[override]
        if llm is None:
            raise ValueError("LookaheadMemory.from_defaults needs llm=LookaheadLLM(...)")
        return cls(llm)

    def bind(self, llm: LookaheadLLM) -> LookaheadMemory:
        """The LLM this memory's history is (a restored memory loads its saved state into it at
        first use)."""
        if not isinstance(llm, LookaheadLLM):
            raise TypeError(f"bind() takes a LookaheadLLM, got {type(llm).__name__}")
        self._llm = llm
        self._view = None
        return self

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """The memory with the runtime's saved state (JSON-safe), as `Context.to_dict` stores it."""
        data = super().to_dict(**kwargs)
        llm = self._llm
        own = llm is not None and (llm.started or self._pending is None)
        state = llm.saved_state() if own else None  # type: ignore[union-attr]
        data["lookahead_state"] = state if state is not None else self._pending
        return data

    # -- reading and writing -------------------------------------------------------------------
    def _bound(self) -> LookaheadLLM:
        if self._llm is None:
            raise StateError(
                "this LookaheadMemory was restored without its LookaheadLLM: pass "
                "serializer=llm.serializer() to Context.from_dict(...), or call memory.bind(llm)"
            )
        return self._llm

    def _ready(self) -> list[ChatMessage]:
        llm = self._bound()
        if self._pending is not None:
            llm.restore(self._pending)
            self._pending, self._view = None, None
        if self._view is None:
            self._remember(llm.session.main_items())
        assert self._view is not None
        return self._view

    async def _aready(self) -> list[ChatMessage]:
        llm = self._bound()
        if self._pending is not None:
            await llm.arestore(self._pending)
            self._pending, self._view = None, None
        if self._view is None:
            self._remember(await (await llm.asession()).amain_items())
        assert self._view is not None
        return self._view

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return list(self._ready())

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return list(await self._aready())

    def get_all(self) -> list[ChatMessage]:
        return list(self._ready())

    async def aget_all(self) -> list[ChatMessage]:
        return list(await self._aready())

    def put(self, message: ChatMessage) -> None:
        self.put_messages([message])

    async def aput(self, message: ChatMessage) -> None:
        await self.aput_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        view = list(self._ready())
        session = self._bound().session
        self._remember(session.hosted.call(_put(session, messages, view)))

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        view = list(await self._aready())
        session = await self._bound().asession()
        self._remember(await session.hosted.acall(_put(session, messages, view)))

    def set(self, messages: list[ChatMessage]) -> None:
        self._ready()
        session = self._bound().session
        session.step([*_system_head(session.main_items()), *messages], boundary=False)
        self._remember(session.main_items())

    async def aset(self, messages: list[ChatMessage]) -> None:
        await self._aready()
        session = await self._bound().asession()
        await session.astep([*_system_head(await session.amain_items()), *messages], boundary=False)
        self._remember(await session.amain_items())

    def _remember(self, history: list[ChatMessage]) -> None:
        self._view = _without_system(history)

    def reset(self) -> None:
        self.set([])

    async def areset(self) -> None:
        await self.aset([])


def _binding_serializer(base: type[JsonSerializer]) -> Callable[[LookaheadLLM], JsonSerializer]:
    class BindingSerializer(base):  # type: ignore[misc, valid-type]
        """`base`, giving every `LookaheadMemory` it rebuilds to one LLM."""

        def __init__(self, llm: LookaheadLLM) -> None:
            super().__init__()
            self.llm = llm

        def deserialize_value(self, data: Any) -> Any:
            value = super().deserialize_value(data)
            if isinstance(value, LookaheadMemory) and value._llm is None:
                value.bind(self.llm)
            return value

    return BindingSerializer


def _put(
    session: MirroredRuntime[ChatMessage],
    messages: Sequence[ChatMessage],
    view: Sequence[ChatMessage],
) -> Callable[[LookaheadRuntime], Awaitable[list[ChatMessage]]]:
    """New messages go after the history. The agent's calls sent [system, *memory, *scratchpad];
    scratchpad messages the LLM already mirrored are skipped (matched in order). When the agent
    stores its run in another form (ReActAgent: one message joining the reasoning steps it had
    sent formatted), the formatted steps leave the history, so nothing appears twice."""

    async def run(runtime: LookaheadRuntime) -> list[ChatMessage]:
        mirror = session.mirror
        seen = [entry.item for entry in mirror.seen]
        start = len(_system_head(seen)) + len(view)
        memory_part = seen[start - len(view) : start]
        if len(seen) < start or any(s is not v for s, v in zip(memory_part, view, strict=True)):
            start = len(seen)  # the agent's last call was not [system, *memory, *scratchpad]
        new, uncovered = mirror.stored(messages, start)
        if new and uncovered:
            with mirror.undone_on_error():  # each change: in both or in neither
                runtime.main.replace(mirror.drop(uncovered))
        if new:
            with mirror.undone_on_error():
                runtime.append(*mirror.extend(new))
            await runtime.boundary()
        return mirror.main_items()

    return run


def _final_state(save: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """The state of a runtime being closed; None (logged) when saving it fails: closing goes on."""
    try:
        return save()
    except Exception as error:
        log.warning("the lookahead state was not saved before closing: %r", error)
        return None


async def _afinal_state(save: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
    try:
        return await save()
    except Exception as error:
        log.warning("the lookahead state was not saved before closing: %r", error)
        return None


def _system_head(items: Sequence[ChatMessage]) -> list[ChatMessage]:
    head = []
    for item in items:
        if item.role not in (MessageRole.SYSTEM, MessageRole.DEVELOPER):
            break
        head.append(item)
    return head


def _without_system(items: Sequence[ChatMessage]) -> list[ChatMessage]:
    return list(items[len(_system_head(items)) :])


def agent_llms(target: object) -> list[LookaheadLLM] | None:
    """The LookaheadLLMs a LlamaIndex agent (FunctionAgent, ReActAgent, an AgentWorkflow's
    agents) runs; None for anything else (for `@context_policy`)."""
    if isinstance(target, BaseWorkflowAgent):
        agents = [target]
    elif isinstance(target, AgentWorkflow):
        agents = list(target.agents.values())
    else:
        return None
    return [agent.llm for agent in agents if isinstance(agent.llm, LookaheadLLM)]


register_adapter_locator(agent_llms)

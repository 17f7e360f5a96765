"""LangChain 1.x agents (`langchain.agents.create_agent`): lookahead context engineering as an
`AgentMiddleware`, and a plain callback handler that observes TTFT, usage and tool outputs.

    middleware = LookaheadMiddleware(Summarize(), summarizer=summarizer, warmer=warmer, window_tokens=8192)
    agent = create_agent(ChatOpenAI(...), tools, system_prompt=..., middleware=[middleware])

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
thread (`configurable.thread_id`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import (
    AnyMessage,
    BaseMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.outputs import LLMResult
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command

from lookahead_sdk.adapters._mirror import HistoryMirror
from lookahead_sdk.adapters._session import (
    MirroredRuntime,
    RuntimeSettings,
    Step,
    policy_offload_store,
)
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import RequestTags, use_tags
from lookahead_sdk.base.tokens import TokenCounter, auto_token_counter
from lookahead_sdk.client.warmers import RequestShape, Warmer
from lookahead_sdk.core.hosted import AdapterLoop, HookClock, HostedRuntime
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import CompletionClient, ContextPolicy
from lookahead_sdk.core.runtime import CommitKind, RuntimeMode
from lookahead_sdk.strategies.offload import read_offloaded_tool

DEFAULT_THREAD = "default"


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


@dataclass(frozen=True)
class ModelCall:
    """One model call seen by the middleware: when the agent wanted it and what was committed."""

    thread_id: str
    started_at: float  # perf_counter at the model-call hook, before the commit
    commit: CommitKind
    context_tokens: int


@dataclass
class _Thread:
    session: MirroredRuntime[BaseMessage]
    system: SystemMessage | None = None  # the agent's system message, learned at the first call
    synced: tuple[int, str | None] = (0, None)  # length and last id of the list last synced

    def items(self, messages: Sequence[AnyMessage]) -> list[BaseMessage]:
        return [self.system, *messages] if self.system is not None else list(messages)

    def step(
        self,
        messages: Sequence[AnyMessage],
        *,
        commit: bool = False,
        shape: RequestShape | None = None,
    ) -> Step[BaseMessage]:
        items = self.items(messages)
        step = self.session.step(items, commit=commit, shape=shape)
        self.synced = _signature(items)
        return step

    async def astep(
        self,
        messages: Sequence[AnyMessage],
        *,
        commit: bool = False,
        shape: RequestShape | None = None,
    ) -> Step[BaseMessage]:
        items = self.items(messages)
        step = await self.session.astep(items, commit=commit, shape=shape)
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
    `@context_policy(Offload())` on the middleware, or pass it explicitly."""

    def __init__(
        self,
        policy: ContextPolicy | None = None,
        *,
        mode: RuntimeMode = "lookahead",
        window_tokens: int = 8192,
        token_counter: TokenCounter | None = None,
        summarizer: CompletionClient | None = None,
        warmer: Warmer | None = None,
        shape: RequestShape | None = None,
        offload_store: OffloadStore | None = None,
        tags: RequestTags | None = None,
        merge_extra_body: bool = True,
    ) -> None:
        super().__init__()
        self.settings = RuntimeSettings.resolve(
            policy,
            self,
            mode=mode,
            window_tokens=window_tokens,
            token_counter=token_counter or auto_token_counter(),
            llm=summarizer,
            warmer=warmer,
            shape=shape,
            offload_store=offload_store,
            tags=tags,
        )
        self.merge_extra_body = merge_extra_body
        store = offload_store or policy_offload_store(self.settings.policy)
        self.tools: list[BaseTool] = [offload_read_tool(store)] if store is not None else []
        self.clock = HookClock()
        self.calls: list[ModelCall] = []
        self._loop: AdapterLoop | None = None
        self._shape_cache: tuple[tuple[Any, ...], RequestShape] | None = None
        self._threads: dict[str, _Thread] = {}
        self._lock = threading.Lock()

    @property
    def policy(self) -> ContextPolicy:
        return self.settings.policy

    def with_context_policy(self, policy: ContextPolicy) -> LookaheadMiddleware:
        if self._threads:
            raise RuntimeError(
                "swap the policy before the agent runs: this middleware already serves a thread"
            )
        return LookaheadMiddleware(
            policy, **self.settings.adapter_kwargs(), merge_extra_body=self.merge_extra_body
        )

    def runtime_for(self, thread_id: str = DEFAULT_THREAD) -> MirroredRuntime[BaseMessage]:
        """The runtime serving one thread (created on first use)."""
        return self._thread(thread_id).session

    def _thread(self, thread_id: str | None = None) -> _Thread:
        thread_id = thread_id or current_thread_id()
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                self._loop = self._loop or AdapterLoop("lookahead-langchain")
                tags = self.settings.program_tags(
                    None if thread_id == DEFAULT_THREAD else thread_id
                )
                thread = _Thread(
                    MirroredRuntime(self.settings.host(self._loop, tags), new_mirror())
                )
                self._threads[thread_id] = thread
            return thread

    # -- segment boundaries ------------------------------------------------------------------
    def before_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        """Catch up with state changes made elsewhere (wrap_model_call syncs the first call)."""
        with self.clock.measure():
            thread = self._thread()
            if not thread.unchanged(state["messages"]):
                thread.step(state["messages"])
        return None

    async def abefore_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        with self.clock.measure():
            thread = self._thread()
            if not thread.unchanged(state["messages"]):
                await thread.astep(state["messages"])
        return None

    def after_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        """The model's turn completed: boundary (not waited for: the tools run meanwhile)."""
        with self.clock.measure():
            self._thread().submit_step(state["messages"])
        return None

    async def aafter_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        return self.after_model(state, runtime)

    def wrap_tool_call(
        self, request: Any, handler: Callable[[Any], ToolMessage | Command]
    ) -> ToolMessage | Command:
        result = handler(request)
        if isinstance(result, ToolMessage):
            with self.clock.measure():
                self._thread().submit_tool_output(result)
        return result

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[ToolMessage | Command]]
    ) -> ToolMessage | Command:
        result = await handler(request)
        if isinstance(result, ToolMessage):
            with self.clock.measure():
                self._thread().submit_tool_output(result)
        return result

    # -- the commit, in the model call -------------------------------------------------------
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> Any:
        self.clock.start_turn()
        with self.clock.measure():
            started = time.perf_counter()
            thread = self._thread()
            thread.system = request.system_message
            step = thread.step(request.messages, commit=True, shape=self._shape(request))
            request = self._prepared(request, thread, step, started)
        with use_tags(thread.session.tags):
            response = handler(request)
        with self.clock.measure():
            return self._persisted(request, response, step)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        self.clock.start_turn()
        with self.clock.measure():
            started = time.perf_counter()
            thread = self._thread()
            thread.system = request.system_message
            step = await thread.astep(request.messages, commit=True, shape=self._shape(request))
            request = self._prepared(request, thread, step, started)
        with use_tags(thread.session.tags):
            response = await handler(request)
        with self.clock.measure():
            return self._persisted(request, response, step)

    def _shape(self, request: ModelRequest) -> RequestShape | None:
        """What ChatOpenAI sends besides messages: the model name and the tools (bound with
        `convert_to_openai_tool`), so warm-ups render like the real request. An explicit
        `shape=` wins."""
        if self.settings.shape is not None:
            return None
        model = getattr(request.model, "model_name", None) or "default"
        key = (model, tuple(id(tool) for tool in request.tools))
        if self._shape_cache is None or self._shape_cache[0] != key:
            tools = tuple(convert_to_openai_tool(tool) for tool in request.tools) or None
            self._shape_cache = (key, RequestShape(model, tools))
        return self._shape_cache[1]

    def _prepared(
        self, request: ModelRequest, thread: _Thread, step: Step[BaseMessage], started: float
    ) -> ModelRequest:
        outcome = step.outcome
        assert outcome is not None
        self.calls.append(
            ModelCall(
                current_thread_id(), started, outcome.kind, thread.session.runtime.main.tokens
            )
        )
        if step.items is not None:
            system, messages = split_system(step.items, request.system_message)
            request = request.override(messages=messages, system_message=system)
        if self.merge_extra_body and "extra_body" in getattr(
            type(request.model), "model_fields", {}
        ):
            request = request.override(model_settings=merged_settings(request, thread.session.tags))
        return request

    def _persisted(
        self, request: ModelRequest, response: ModelResponse | Any, step: Step[BaseMessage]
    ) -> Any:
        """After a commit, the agent state becomes the committed history plus the new reply."""
        if step.items is None:
            return response
        model_response = (
            response.model_response if isinstance(response, ExtendedModelResponse) else response
        )
        if not isinstance(model_response, ModelResponse):
            model_response = ModelResponse(result=[model_response])
        update = {
            "messages": [
                RemoveMessage(id=REMOVE_ALL_MESSAGES),
                *request.messages,
                *model_response.result,
            ]
        }
        return ExtendedModelResponse(model_response=model_response, command=Command(update=update))

    # -- lifecycle ---------------------------------------------------------------------------
    def _release(self) -> tuple[AdapterLoop | None, list[HostedRuntime]]:
        with self._lock:
            loop, threads = self._loop, list(self._threads.values())
            self._loop, self._threads = None, {}
        return loop, [thread.session.hosted for thread in threads]

    def close(self) -> None:
        """Close every thread's runtime and the warmer and summarizer given to this middleware."""
        loop, runtimes = self._release()
        if loop is not None:
            loop.close(runtimes, *self.settings.resources())

    async def aclose(self) -> None:
        loop, runtimes = self._release()
        if loop is not None:
            await loop.aclose(runtimes, *self.settings.resources())


def split_system(
    items: Sequence[BaseMessage], current: SystemMessage | None
) -> tuple[SystemMessage | None, list[AnyMessage]]:
    """The committed history as (system message, state messages): the agent sends its system
    message separately; a policy that rewrote it (none of the built-in ones do) wins."""
    if items and isinstance(items[0], SystemMessage):
        return items[0], list(items[1:])  # type: ignore[return-value]
    return current, list(items)  # type: ignore[return-value]


def merged_settings(request: ModelRequest, tags: RequestTags) -> dict[str, Any]:
    """Tags merged under the model's own and this call's extra_body (explicit values win)."""
    own = getattr(request.model, "extra_body", None) or {}
    per_call = request.model_settings.get("extra_body") or {}
    return {**request.model_settings, "extra_body": {**tags.to_body(), **own, **per_call}}


# -- observing: a plain callback handler -------------------------------------------------------
@dataclass
class ModelCallObservation:
    run_id: UUID
    started_at: float
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
    """Observes every chat-model call (TTFT when streaming, usage incl. cached prompt tokens)
    and every tool output's size. Attach it like any callback: `config={"callbacks": [h]}`."""

    def __init__(self, token_counter: TokenCounter | None = None) -> None:
        super().__init__()
        self.token_counter = token_counter or auto_token_counter()
        self.model_calls: list[ModelCallObservation] = []
        self.tool_outputs: list[ToolOutputObservation] = []
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
            self._open[run_id] = ModelCallObservation(run_id, time.perf_counter())

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
        with self._lock:
            self.tool_outputs.append(ToolOutputObservation(name, len(text), tokens))


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

"""LlamaIndex (llama-index-core 0.14) agents: an LLM wrapper that manages the current run's
context, and a memory holding the managed history across runs.

    llm = LookaheadLLM(OpenAILike(...), Summarize(), summarizer=..., warmer=..., window_tokens=8192)
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

Tags: merged into the request's `extra_body` for OpenAI-family LLMs (under the LLM's own
`additional_kwargs` extra_body) and set as the current tags for the tagging transport.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

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
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM
from llama_index.core.memory import BaseMemory
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai.utils import from_openai_message_dict, to_openai_message_dict

from lookahead_sdk.adapters._mirror import HistoryMirror
from lookahead_sdk.adapters._session import MirroredRuntime, RuntimeSettings, Step
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import RequestTags, use_tags
from lookahead_sdk.base.tokens import TokenCounter, auto_token_counter
from lookahead_sdk.client.warmers import RequestShape, Warmer
from lookahead_sdk.core.hosted import AdapterLoop, HookClock
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import CompletionClient, ContextPolicy
from lookahead_sdk.core.runtime import CommitKind, LookaheadRuntime, RuntimeMode
from lookahead_sdk.strategies.offload import read_offloaded_tool


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


@dataclass
class LLMCall:
    """One model call through the wrapper: when it was wanted, what was committed, first token."""

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
    chat call. Swap the policy with `@context_policy(Offload())` on the wrapper."""

    llm: LLM = Field(description="the wrapped LLM")

    _settings: RuntimeSettings = PrivateAttr()
    _loop: AdapterLoop | None = PrivateAttr(default=None)
    _session: MirroredRuntime[ChatMessage] | None = PrivateAttr(default=None)
    _clock: HookClock = PrivateAttr(default_factory=HookClock)
    _calls: list[LLMCall] = PrivateAttr(default_factory=list)
    _tagged_llm: LLM | None = PrivateAttr(default=None)
    _explicit_shape: bool = PrivateAttr(default=False)

    def __init__(
        self,
        llm: LLM,
        policy: ContextPolicy | None = None,
        *,
        mode: RuntimeMode = "lookahead",
        window_tokens: int | None = None,
        token_counter: TokenCounter | None = None,
        summarizer: CompletionClient | None = None,
        warmer: Warmer | None = None,
        shape: RequestShape | None = None,
        offload_store: OffloadStore | None = None,
        tags: RequestTags | None = None,
    ) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(
                f"LookaheadLLM wraps a LlamaIndex LLM (e.g. OpenAILike(...)), got {type(llm).__name__}"
            )
        super().__init__(llm=llm, callback_manager=llm.callback_manager)
        window = window_tokens or llm.metadata.context_window
        model = llm.metadata.model_name
        self._explicit_shape = shape is not None
        self._settings = RuntimeSettings.resolve(
            policy,
            self,
            mode=mode,
            window_tokens=window,
            token_counter=token_counter or auto_token_counter(),
            llm=summarizer,
            warmer=warmer,
            shape=shape or RequestShape(model),
            offload_store=offload_store,
            tags=tags,
        )

    @classmethod
    def class_name(cls) -> str:
        return "LookaheadLLM"

    def with_context_policy(self, policy: ContextPolicy) -> LookaheadLLM:
        if self._session is not None:
            raise RuntimeError(
                "swap the policy before the agent runs: this LLM already holds a history"
            )
        return LookaheadLLM(
            self.llm, policy, **self._settings.adapter_kwargs(keep_shape=self._explicit_shape)
        )

    # -- what the adapter exposes --------------------------------------------------------------
    @property
    def session(self) -> MirroredRuntime[ChatMessage]:
        if self._session is None:
            self._loop = AdapterLoop("lookahead-llamaindex")
            hosted = self._settings.host(self._loop, self._settings.program_tags())
            self._session = MirroredRuntime(hosted, new_mirror(self.llm.metadata.model_name))
        return self._session

    @property
    def policy(self) -> ContextPolicy:
        return self._settings.policy

    @property
    def clock(self) -> HookClock:
        return self._clock

    @property
    def calls(self) -> list[LLMCall]:
        return self._calls

    def memory(self) -> LookaheadMemory:
        """A memory whose history is this LLM's committed history (pass it to `agent.run`)."""
        return LookaheadMemory.from_defaults(llm=self)

    def close(self) -> None:
        """Close the runtime and the warmer and summarizer given to this LLM."""
        if self._loop is not None and self._session is not None:
            self._loop.close([self._session.hosted], *self._settings.resources())

    async def aclose(self) -> None:
        if self._loop is not None and self._session is not None:
            await self._loop.aclose([self._session.hosted], *self._settings.resources())

    # -- the hook: every chat call ---------------------------------------------------------
    def _begin(self) -> float:
        self._clock.start_turn()
        return time.perf_counter()

    def _finish(
        self, step: Step[ChatMessage], messages: Sequence[ChatMessage], started: float
    ) -> tuple[list[ChatMessage], LLMCall]:
        assert step.outcome is not None
        call = LLMCall(started, step.outcome.kind, self.session.runtime.main.tokens)
        self._calls.append(call)
        return (step.items if step.items is not None else list(messages)), call

    def _prepare(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> tuple[list[ChatMessage], LLMCall, LLM]:
        started = self._begin()
        with self._clock.measure():
            step = self.session.step(list(messages), commit=True, shape=self._shape(kwargs))
            return (*self._finish(step, messages, started), self._target(kwargs))

    async def _aprepare(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> tuple[list[ChatMessage], LLMCall, LLM]:
        started = self._begin()
        with self._clock.measure():
            step = await self.session.astep(list(messages), commit=True, shape=self._shape(kwargs))
            return (*self._finish(step, messages, started), self._target(kwargs))

    def _shape(self, kwargs: dict[str, Any]) -> RequestShape | None:
        """The tools this call offers (OpenAI-family LLMs pass them as OpenAI tool dicts), so
        warm-ups render like the real request. An explicit `shape=` wins."""
        if self._explicit_shape:
            return None
        tools = kwargs.get("tools")
        dicts = tuple(t for t in tools or () if isinstance(t, dict)) or None
        return RequestShape(self.llm.metadata.model_name, dicts)

    def _target(self, kwargs: dict[str, Any]) -> LLM:
        """The LLM to call, with the program's tags in this call's extra_body (OpenAI family).

        OpenAI-family LLMs put their `additional_kwargs` over per-call arguments, so when those
        carry an extra_body of their own, the tags go into a copy of the LLM made once (it
        shares the LLM's clients), under the LLM's own values."""
        own = getattr(self.llm, "additional_kwargs", None)
        if not isinstance(own, dict):
            return self.llm
        tags = self.session.tags.to_body()
        if "extra_body" not in own:
            kwargs["extra_body"] = {**tags, **(kwargs.get("extra_body") or {})}
            return self.llm
        if self._tagged_llm is None:
            extra_body = {**tags, **(own.get("extra_body") or {})}
            self._tagged_llm = self.llm.model_copy(
                update={"additional_kwargs": {**own, "extra_body": extra_body}}
            )
        return self._tagged_llm

    # -- chat: managed ---------------------------------------------------------------------
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        context, call, llm = self._prepare(messages, kwargs)
        with use_tags(self.session.tags):
            response = llm.chat(context, **kwargs)
        call.first_token_at = time.perf_counter()
        return response

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        context, call, llm = await self._aprepare(messages, kwargs)
        with use_tags(self.session.tags):
            response = await llm.achat(context, **kwargs)
        call.first_token_at = time.perf_counter()
        return response

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        context, call, llm = self._prepare(messages, kwargs)
        tags = self.session.tags

        def generate() -> Iterator[ChatResponse]:
            with use_tags(tags):
                for response in llm.stream_chat(context, **kwargs):
                    if call.first_token_at is None and _has_output(response):
                        call.first_token_at = time.perf_counter()
                    yield response

        return generate()

    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        context, call, llm = await self._aprepare(messages, kwargs)
        tags = self.session.tags
        with use_tags(tags):
            stream = await llm.astream_chat(context, **kwargs)

        async def generate() -> AsyncIterator[ChatResponse]:
            with use_tags(tags):
                async for response in stream:
                    if call.first_token_at is None and _has_output(response):
                        call.first_token_at = time.perf_counter()
                    yield response

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
    twice."""

    _llm: LookaheadLLM = PrivateAttr()
    _view: list[ChatMessage] = PrivateAttr(default_factory=list)

    def __init__(self, llm: LookaheadLLM, **kwargs: Any) -> None:
        if not isinstance(llm, LookaheadLLM):
            raise TypeError(
                f"LookaheadMemory shares the history of a LookaheadLLM, got {type(llm).__name__}"
            )
        super().__init__(**kwargs)
        self._llm = llm
        self._remember(llm.session.main_items())

    @classmethod
    def class_name(cls) -> str:
        return "LookaheadMemory"

    @classmethod
    def from_defaults(cls, llm: LookaheadLLM | None = None, **kwargs: Any) -> LookaheadMemory:  # type: ignore[override]
        if llm is None:
            raise ValueError("LookaheadMemory.from_defaults needs llm=LookaheadLLM(...)")
        return cls(llm)

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return list(self._view)

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return list(self._view)

    def get_all(self) -> list[ChatMessage]:
        return list(self._view)

    async def aget_all(self) -> list[ChatMessage]:
        return list(self._view)

    def put(self, message: ChatMessage) -> None:
        self.put_messages([message])

    async def aput(self, message: ChatMessage) -> None:
        await self.aput_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        session = self._llm.session
        self._remember(session.hosted.call(_put(session, messages, list(self._view))))

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        session = self._llm.session
        self._remember(await session.hosted.acall(_put(session, messages, list(self._view))))

    def set(self, messages: list[ChatMessage]) -> None:
        session = self._llm.session
        session.step([*_system_head(session.main_items()), *messages], boundary=False)
        self._remember(session.main_items())

    async def aset(self, messages: list[ChatMessage]) -> None:
        session = self._llm.session
        await session.astep([*_system_head(await session.amain_items()), *messages], boundary=False)
        self._remember(await session.amain_items())

    def _remember(self, history: list[ChatMessage]) -> None:
        self._view = _without_system(history)

    def reset(self) -> None:
        self.set([])

    async def areset(self) -> None:
        await self.aset([])


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
            runtime.main.replace(mirror.drop(uncovered))
        if new:
            runtime.append(*mirror.extend(new))
            await runtime.boundary()
        return mirror.main_items()

    return run


def _system_head(items: Sequence[ChatMessage]) -> list[ChatMessage]:
    head = []
    for item in items:
        if item.role not in (MessageRole.SYSTEM, MessageRole.DEVELOPER):
            break
        head.append(item)
    return head


def _without_system(items: Sequence[ChatMessage]) -> list[ChatMessage]:
    return list(items[len(_system_head(items)) :])

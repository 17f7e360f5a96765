"""AutoGen (autogen-agentchat 0.7.5): a `ChatCompletionContext` running lookahead context
engineering, and a model-client wrapper that tags every request with the program's tags.

    context = LookaheadChatCompletionContext(Summarize(), system_message=SYSTEM, summarizer=..., warmer=...)
    client = LookaheadModelClient(OpenAIChatCompletionClient(...), context=context)
    agent = AssistantAgent("analyst", client, tools=tools, system_message=SYSTEM, model_context=context)

`AssistantAgent` adds every message to its model context and calls `get_messages()` right before
each model call: `add_message` is the segment boundary (the runtime may start the transform in
the background), `get_messages` commits at the hard limit and returns the committed history,
which becomes the context's own. `save_state`/`load_state` round-trip the runtime's state too,
a ready lookahead result included. Pass the agent's system message to the context as well: the
runtime's history starts with it, so warm-ups and summaries render what the agent sends.

`OpenAIChatCompletionClient` puts `extra_create_args` over its constructor's arguments, so a
per-call `extra_body` would replace the client's own: the wrapper merges both with the tags.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from autogen_core import CancellationToken, FunctionCall
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelCapabilities,
    ModelFamily,
    ModelInfo,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import FunctionTool, Tool, ToolSchema
from pydantic import BaseModel, TypeAdapter

from lookahead_sdk.adapters._session import RuntimeSettings
from lookahead_sdk.base.messages import Message, message_digest
from lookahead_sdk.base.tags import RequestTags, current_tags, use_tags
from lookahead_sdk.base.tokens import TokenCounter, auto_token_counter
from lookahead_sdk.client.warmers import RequestShape, Warmer
from lookahead_sdk.core.hosted import AdapterLoop, HookClock, HostedRuntime
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import CompletionClient, ContextPolicy
from lookahead_sdk.core.runtime import CommitKind, LookaheadRuntime, RuntimeMode
from lookahead_sdk.strategies.offload import read_offloaded_tool

_MESSAGES = TypeAdapter(list[LLMMessage])


def to_openai(
    message: LLMMessage, *, model: str = "unknown", family: str = ModelFamily.UNKNOWN
) -> list[Message]:
    """The OpenAI messages AutoGen's OpenAI client sends for one LLMMessage."""
    from autogen_ext.models.openai._openai_client import to_oai_type  # AutoGen's own conversion

    return [dict(m) for m in to_oai_type(message, model=model, model_family=family)]


def from_openai(
    messages: Sequence[Message], names: dict[str, str] | None = None
) -> list[LLMMessage]:
    """LLMMessages for OpenAI messages; consecutive tool results become one result message.
    `names` maps tool-call ids to function names for results whose call is not among them."""
    out: list[LLMMessage] = []
    names = dict(names or {})
    for message in messages:
        role, content = message["role"], message.get("content")
        text = content if isinstance(content, str) else ""
        if role in ("system", "developer"):
            out.append(SystemMessage(content=text))
        elif role == "user":
            out.append(UserMessage(content=text, source=message.get("name") or "user"))
        elif role == "assistant" and message.get("tool_calls"):
            calls = [
                FunctionCall(
                    id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"]
                )
                for c in message["tool_calls"]
            ]
            names.update({call.id: call.name for call in calls})
            out.append(AssistantMessage(content=calls, source="assistant", thought=text or None))
        elif role == "assistant":
            out.append(AssistantMessage(content=text, source="assistant"))
        else:
            result = FunctionExecutionResult(
                content=text,
                name=names.get(message["tool_call_id"], ""),
                call_id=message["tool_call_id"],
            )
            if out and isinstance(out[-1], FunctionExecutionResultMessage):
                out[-1].content.append(result)
            else:
                out.append(FunctionExecutionResultMessage(content=[result]))
    return out


def offload_read_tool(store: OffloadStore) -> FunctionTool:
    """The read-back tool for Offload's placeholders, as an AutoGen tool."""
    tool = read_offloaded_tool(store)
    return FunctionTool(tool.function, description=tool.description, name=tool.name)


@dataclass(frozen=True)
class _Stored:
    """A message of the context and the digests of the OpenAI messages it stands for."""

    message: LLMMessage
    digests: tuple[bytes, ...]


@dataclass(frozen=True)
class ContextCall:
    started_at: float  # perf_counter when get_messages was called, before the commit
    commit: CommitKind
    context_tokens: int


class LookaheadChatCompletionContext(ChatCompletionContext):
    """A model context whose history is managed by a lookahead runtime. Swap the policy with
    `@context_policy(Offload())` on the context, or pass it explicitly."""

    def __init__(
        self,
        policy: ContextPolicy | None = None,
        *,
        system_message: str | None = None,
        model: str = "unknown",
        model_family: str = ModelFamily.UNKNOWN,
        mode: RuntimeMode = "lookahead",
        window_tokens: int = 8192,
        token_counter: TokenCounter | None = None,
        summarizer: CompletionClient | None = None,
        warmer: Warmer | None = None,
        shape: RequestShape | None = None,
        offload_store: OffloadStore | None = None,
        tags: RequestTags | None = None,
        initial_messages: list[LLMMessage] | None = None,
    ) -> None:
        super().__init__(initial_messages)
        self.settings = RuntimeSettings.resolve(
            policy,
            self,
            mode=mode,
            window_tokens=window_tokens,
            token_counter=token_counter or auto_token_counter(),
            llm=summarizer,
            warmer=warmer,
            shape=shape or RequestShape(model),
            offload_store=offload_store,
            tags=tags,
        )
        self.system_message = system_message
        self.model, self.model_family = model, model_family
        self._explicit_shape = shape is not None
        self._offered: RequestShape | None = None
        self.clock = HookClock()
        self.calls: list[ContextCall] = []
        self._stored = [self._store(m) for m in self._messages]
        self._loop: AdapterLoop | None = None
        self._hosted: HostedRuntime | None = None

    def with_context_policy(self, policy: ContextPolicy) -> LookaheadChatCompletionContext:
        if self._hosted is not None:
            raise RuntimeError(
                "swap the policy before the agent runs: this context already holds a history"
            )
        return LookaheadChatCompletionContext(
            policy,
            system_message=self.system_message,
            model=self.model,
            model_family=self.model_family,
            **self.settings.adapter_kwargs(keep_shape=self._explicit_shape),
            initial_messages=list(self._messages),
        )

    @property
    def hosted(self) -> HostedRuntime:
        if self._hosted is None:
            self._loop = AdapterLoop("lookahead-autogen")
            history = self._head() + [d for s in self._stored for d in self._dicts(s.message)]
            self._hosted = self.settings.host(self._loop, self.settings.program_tags(), history)
        return self._hosted

    @property
    def runtime(self) -> LookaheadRuntime:
        return self.hosted.runtime

    async def offer_tools(self, tools: Sequence[Tool | ToolSchema]) -> None:
        """The tools the agent's requests carry (warm-ups must render them too); called by
        LookaheadModelClient. An explicit `shape=` wins."""
        if self._explicit_shape:
            return
        from autogen_ext.models.openai._openai_client import convert_tools  # AutoGen's own form

        shape = RequestShape(self.model, tuple(dict(t) for t in convert_tools(tools)) or None)
        if shape == self._offered:
            return
        self._offered = shape

        async def apply(runtime: LookaheadRuntime) -> None:
            runtime.shape = shape

        await self.hosted.acall(apply)

    @property
    def messages(self) -> list[LLMMessage]:
        """The stored history as it is, without the commit `get_messages` may make."""
        return list(self._messages)

    @property
    def tags(self) -> RequestTags:
        return self.runtime.tags

    def _head(self) -> list[Message]:
        return [{"role": "system", "content": self.system_message}] if self.system_message else []

    def _dicts(self, message: LLMMessage) -> list[Message]:
        return to_openai(message, model=self.model, family=self.model_family)

    def _store(self, message: LLMMessage) -> _Stored:
        return _Stored(message, tuple(message_digest(d) for d in self._dicts(message)))

    # -- the hooks -----------------------------------------------------------------------------
    async def add_message(self, message: LLMMessage) -> None:
        """A segment completed (user input, model turn, tool results): boundary, not waited for
        (the tools run meanwhile; `get_messages` waits for it before committing)."""
        with self.clock.measure():
            messages = self._dicts(message)
            self._messages.append(message)
            self._stored.append(_Stored(message, tuple(message_digest(d) for d in messages)))

            async def append(runtime: LookaheadRuntime) -> None:
                runtime.append(*messages)
                await runtime.boundary()

            self.hosted.submit(append)

    async def get_messages(self) -> list[LLMMessage]:
        """Right before a model call: commit at the hard limit; the committed history."""
        self.clock.start_turn()
        with self.clock.measure():
            started = time.perf_counter()
            outcome = await self.hosted.acall(lambda runtime: runtime.commit())
            self.calls.append(ContextCall(started, outcome.kind, self.runtime.main.tokens))
            if outcome.committed:
                self._adopt(outcome.messages)
            return list(self._messages)

    def _adopt(self, committed: Sequence[Message]) -> None:
        """The committed history becomes the context's messages (unchanged ones reused)."""
        body = list(committed[len(self._head()) :])
        names = {c["id"]: c["function"]["name"] for m in body for c in m.get("tool_calls") or ()}
        by_first = {}
        for stored in self._stored:
            if stored.digests:
                by_first.setdefault(stored.digests[0], stored)
        stored_out: list[_Stored] = []
        index = 0
        while index < len(body):
            candidate = by_first.get(message_digest(body[index]))
            size = len(candidate.digests) if candidate else 0
            if (
                candidate
                and tuple(message_digest(d) for d in body[index : index + size])
                == candidate.digests
            ):
                stored_out.append(candidate)
                index += size
                continue
            end = index + 1
            while body[index]["role"] == "tool" and end < len(body) and body[end]["role"] == "tool":
                end += 1
            stored_out.extend(self._store(m) for m in from_openai(body[index:end], names))
            index = end
        self._stored = stored_out
        self._messages = [s.message for s in stored_out]

    async def clear(self) -> None:
        self._messages, self._stored = [], []
        head = self._head()

        async def reset(runtime: LookaheadRuntime) -> None:
            runtime.main.replace(head)

        await self.hosted.acall(reset)

    async def save_state(self) -> Mapping[str, Any]:
        """The messages and the runtime's state (history, stats, a ready lookahead result)."""
        runtime_state = await self.hosted.acall(_save)
        return {
            "messages": _MESSAGES.dump_python(self._messages, mode="json"),
            "runtime": runtime_state,
        }

    async def load_state(self, state: Mapping[str, Any]) -> None:
        if "runtime" not in state or "messages" not in state:
            raise ValueError(
                "state must come from LookaheadChatCompletionContext.save_state (keys 'messages', 'runtime')"
            )
        self._messages = _MESSAGES.validate_python(state["messages"])
        self._stored = [self._store(m) for m in self._messages]
        saved = dict(state["runtime"])

        async def load(runtime: LookaheadRuntime) -> None:
            runtime.load_state(saved)

        await self.hosted.acall(load)

    async def aclose(self) -> None:
        """Close the runtime and the warmer and summarizer given to this context."""
        if self._loop is not None and self._hosted is not None:
            await self._loop.aclose([self._hosted], *self.settings.resources())


async def _save(runtime: LookaheadRuntime) -> dict[str, Any]:
    return runtime.save_state()


@dataclass
class ClientCall:
    started_at: float
    first_token_at: float | None = None


class LookaheadModelClient(ChatCompletionClient):
    """Any ChatCompletionClient whose requests carry the program's tags: in `extra_body` (merged
    with the client's own `extra_body` and the call's) and as the current tags for the tagging
    transport. Tags come from `tags`, else the linked context's program, else the caller's."""

    def __init__(
        self,
        inner: ChatCompletionClient,
        *,
        context: LookaheadChatCompletionContext | None = None,
        tags: RequestTags | None = None,
    ) -> None:
        self.inner = inner
        self.context = context
        self._tags = tags
        self.calls: list[ClientCall] = []

    def tags(self) -> RequestTags | None:
        if self._tags is not None:
            return self._tags
        return self.context.tags if self.context is not None else current_tags()

    def _create_args(
        self, extra_create_args: Mapping[str, Any], tags: RequestTags | None
    ) -> dict[str, Any]:
        if tags is None:
            return dict(extra_create_args)
        # The client's constructor extra_body (OpenAIChatCompletionClient keeps it in _create_args).
        own = (getattr(self.inner, "_create_args", None) or {}).get("extra_body") or {}
        per_call = extra_create_args.get("extra_body") or {}
        return {**extra_create_args, "extra_body": {**tags.to_body(), **own, **per_call}}

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        tags = self.tags()
        call = ClientCall(time.perf_counter())
        self.calls.append(call)
        if self.context is not None:
            await self.context.offer_tools(tools)
        with use_tags(tags):
            result = await self.inner.create(
                messages,
                tools=tools,
                tool_choice=tool_choice,
                json_output=json_output,
                extra_create_args=self._create_args(extra_create_args, tags),
                cancellation_token=cancellation_token,
            )
        call.first_token_at = time.perf_counter()
        return result

    async def create_stream(  # type: ignore[override]
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> AsyncGenerator[str | CreateResult, None]:
        tags = self.tags()
        call = ClientCall(time.perf_counter())
        self.calls.append(call)
        if self.context is not None:
            await self.context.offer_tools(tools)
        with use_tags(tags):
            async for item in self.inner.create_stream(
                messages,
                tools=tools,
                tool_choice=tool_choice,
                json_output=json_output,
                extra_create_args=self._create_args(extra_create_args, tags),
                cancellation_token=cancellation_token,
            ):
                if call.first_token_at is None:
                    call.first_token_at = time.perf_counter()
                yield item

    async def close(self) -> None:
        await self.inner.close()

    def actual_usage(self) -> RequestUsage:
        return self.inner.actual_usage()

    def total_usage(self) -> RequestUsage:
        return self.inner.total_usage()

    def count_tokens(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = []
    ) -> int:
        return self.inner.count_tokens(messages, tools=tools)

    def remaining_tokens(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = []
    ) -> int:
        return self.inner.remaining_tokens(messages, tools=tools)

    @property
    def capabilities(self) -> ModelCapabilities:  # type: ignore[override]
        return self.inner.capabilities

    @property
    def model_info(self) -> ModelInfo:
        return self.inner.model_info

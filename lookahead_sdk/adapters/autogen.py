"""AutoGen (autogen-agentchat / -core 0.7): a `ChatCompletionContext` running lookahead context
engineering, and a model-client wrapper that tags every request with the program's tags.

    context = LookaheadChatCompletionContext(Summarize(), model_client=client, system_message=SYSTEM)
    agent = AssistantAgent("analyst", LookaheadModelClient(client, context=context), tools=tools,
                           system_message=SYSTEM, model_context=context)

`AssistantAgent` adds every message to its model context and calls `get_messages()` right before
each model call: `add_message` is the segment boundary (the runtime may start the transform in
the background), `get_messages` commits at the hard limit and returns the committed history,
which becomes the context's own. Pass the agent's system message to the context as well: the
runtime's history starts with it, so warm-ups and summaries render what the agent sends.

From the agent's model client (`model_client=`, as `TokenLimitedChatCompletionContext` takes
it; or the one a `LookaheadModelClient` wraps) the context takes the summarizer (that client,
so the summary is an AutoGen model call with its events; or `summarizer=` another
`ChatCompletionClient` or a `CompletionClient`), the window (`window_tokens=`, else
`model_info["context_window"]`, else the server's report) and the server's tokenizer and tag
wire (`send_tags=`). Only public AutoGen API is used; messages are rendered as AutoGen's OpenAI
client renders them by default.

Persistence is AutoGen's own: `dump_component()` / `load_component()` for the context (policy,
settings, model client) and the client, `save_state()` / `load_state()` for the history with
the runtime's saved state (a ready lookahead result included), as `AssistantAgent.save_state()`
calls them. Events: every commit and warm-up is logged to AutoGen's event logger
(`EVENT_LOGGER_NAME`) and, with opentelemetry installed, recorded as a span.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from autogen_agentchat.agents import BaseChatAgent
from autogen_core import (
    EVENT_LOGGER_NAME,
    CancellationToken,
    Component,
    ComponentModel,
    FunctionCall,
    Image,
)
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
from pydantic import BaseModel, Field, TypeAdapter

from lookahead_sdk.adapters._events import LookaheadEvent, otel_span
from lookahead_sdk.adapters._metrics import MetricsServer
from lookahead_sdk.adapters._models import (
    FrameworkCompletionClient,
    HomeLoop,
    ModelFacts,
    Usage,
    is_completion_client,
)
from lookahead_sdk.adapters._records import DEFAULT_KEEP, CallLog, HookClock
from lookahead_sdk.adapters._session import AdapterCore, AdapterSettings, Discovered
from lookahead_sdk.base.completion import CompletionClient
from lookahead_sdk.base.messages import Message, message_digest
from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.base.tags import current_tags, use_tags
from lookahead_sdk.core.config import RuntimeConfig
from lookahead_sdk.core.hosted import HostedRuntime
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import ContextPolicy, register_adapter_locator
from lookahead_sdk.core.runtime import CommitKind, CommitOutcome, LookaheadRuntime
from lookahead_sdk.core.warmer import RequestShape
from lookahead_sdk.errors import ConfigurationError, StateError
from lookahead_sdk.strategies.offload import read_offloaded_tool
from lookahead_sdk.strategies.specs import policy_from_spec, policy_spec

_MESSAGES = TypeAdapter(list[LLMMessage])
events_log = logging.getLogger(EVENT_LOGGER_NAME)

# The context whose `get_messages` the current task called last: AssistantAgent calls it right
# before its model client, so a LookaheadModelClient without a linked context finds it here.
_current_context: ContextVar[LookaheadChatCompletionContext | None] = ContextVar(
    "lookahead_autogen_context", default=None
)


# -- messages and tools in OpenAI form (AutoGen's OpenAI client's default rendering) ----------
def to_openai(
    message: LLMMessage, *, model: str = "unknown", family: str = ModelFamily.UNKNOWN
) -> list[Message]:
    """The OpenAI messages AutoGen's OpenAI client sends for one LLMMessage (its default
    transformers: a user message carries its source as `name`; a tool-call turn has `content`
    null, or its thought; each function result is a tool message)."""
    if isinstance(message, SystemMessage):
        return [{"content": message.content, "role": "system"}]
    if isinstance(message, UserMessage):
        return [{"role": "user", "name": message.source, "content": _content(message.content)}]
    if isinstance(message, AssistantMessage):
        if not isinstance(message.content, list):
            return [{"role": "assistant", "content": message.content}]
        calls = [
            {
                "id": call.id,
                "function": {"arguments": call.arguments, "name": call.name},
                "type": "function",
            }
            for call in message.content
        ]
        return [{"role": "assistant", "tool_calls": calls, "content": message.thought}]
    return [
        {"content": result.content, "role": "tool", "tool_call_id": result.call_id}
        for result in message.content
    ]


def _content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
        else:
            parts.append(part.to_openai_format())
    return parts


def from_openai(
    messages: Sequence[Message], names: dict[str, str] | None = None
) -> list[LLMMessage]:
    """LLMMessages for OpenAI messages; consecutive tool results become one result message.
    `names` maps tool-call ids to function names for results whose call is not among them."""
    out: list[LLMMessage] = []
    names = dict(names or {})
    for message in messages:
        role, content = message["role"], message.get("content")
        text = content if isinstance(content, str) else _parts_text(content)
        if role in ("system", "developer"):
            out.append(SystemMessage(content=text))
        elif role == "user":
            parts = content if isinstance(content, list) else text
            out.append(
                UserMessage(content=_user_content(parts), source=message.get("name") or "user")
            )
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


def _user_content(content: str | list[Any]) -> str | list[str | Image]:
    """A user message's content as AutoGen holds it: text, or its text and image parts (as
    `_content` renders them), so a multimodal message a commit keeps is sent unchanged."""
    if isinstance(content, str):
        return content
    parts: list[str | Image] = []
    for part in content:
        if part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        else:  # an image; a part AutoGen has no type for is kept as its JSON, not lost
            parts.append(_image(part) or json.dumps(part))
    return parts


def _image(part: Mapping[str, Any]) -> Image | None:
    """An `image_url` part holding an image AutoGen can hold (a base64 PNG or JPEG)."""
    url = (part.get("image_url") or {}).get("url") if part.get("type") == "image_url" else None
    try:
        return Image.from_uri(url) if isinstance(url, str) else None
    except ValueError:
        return None


def _parts_text(content: Any) -> str:
    """The text of a content-part list (roles AutoGen holds as plain text); "" for none."""
    if not isinstance(content, list):
        return ""
    return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


def tool_dicts(tools: Sequence[Tool | ToolSchema]) -> tuple[dict[str, Any], ...]:
    """The OpenAI tool definitions AutoGen's OpenAI client sends for `tools`."""
    definitions = []
    for tool in tools:
        schema: Mapping[str, Any] = tool.schema if isinstance(tool, Tool) else tool
        definitions.append(
            {
                "type": "function",
                "function": {
                    "name": schema["name"],
                    "description": schema.get("description", ""),
                    "parameters": schema.get("parameters", {}),
                    "strict": schema.get("strict", False),
                },
            }
        )
    return tuple(definitions)


def offload_read_tool(store: OffloadStore) -> FunctionTool:
    """The read-back tool for Offload's placeholders, as an AutoGen tool."""
    tool = read_offloaded_tool(store)
    return FunctionTool(tool.function, description=tool.description, name=tool.name)


# -- the agent's model client as summarizer, window and server -------------------------------
class AutoGenCompletionClient(FrameworkCompletionClient):
    """An AutoGen `ChatCompletionClient` as the summarizer: `client.create` (AutoGen logs it
    as any model call) on the event loop the agent runs the client on (`HomeLoop`), tagged
    through the current tags for a tagging transport."""

    framework = "autogen"

    def __init__(self, client: ChatCompletionClient, home: HomeLoop | None = None) -> None:
        super().__init__(client, model_facts(client).base_url)
        self.home = home or HomeLoop()

    async def call(
        self,
        messages: list[Message],
        max_tokens: int,
        temperature: float,
        tags: RequestTags | None,
    ) -> tuple[str, Usage]:
        client: ChatCompletionClient = self.model
        prompt = from_openai(messages)
        extra = {"max_tokens": max_tokens, "temperature": temperature}
        result = await self.home.run(lambda: client.create(prompt, extra_create_args=extra), tags)
        text = result.content if isinstance(result.content, str) else ""
        return text, Usage(result.usage.prompt_tokens, 0, result.usage.completion_tokens)


def as_summarizer(value: object, home: HomeLoop) -> CompletionClient:
    if isinstance(value, ChatCompletionClient):
        return AutoGenCompletionClient(value, home)
    if is_completion_client(value):
        return value  # type: ignore[return-value]
    raise ConfigurationError(
        "summarizer must be an AutoGen ChatCompletionClient (e.g. OpenAIChatCompletionClient(...)) "
        f"or a CompletionClient; got {type(value).__name__}"
    )


def model_facts(client: ChatCompletionClient | None) -> ModelFacts:
    """What a model client says about itself through public API: its component config's model
    and base URL, and `model_info["context_window"]` when the info carries one."""
    if client is None:
        return ModelFacts()
    try:
        config = client.dump_component().config
    except Exception:  # a client that cannot dump its config: it says nothing
        config = {}
    info = client.model_info
    window = info.get("context_window") if isinstance(info, Mapping) else None
    name, base_url = config.get("model"), config.get("base_url")
    return ModelFacts(
        name=name if isinstance(name, str) else None,
        base_url=base_url if isinstance(base_url, str) else None,
        window_tokens=window if isinstance(window, int) and window > 0 else None,
    )


# -- events ------------------------------------------------------------------------------------
class AutoGenLookaheadEvent:
    """A lookahead event as AutoGen's structured events are logged: `str()` is its JSON."""

    def __init__(self, event: LookaheadEvent) -> None:
        self.event = event
        self.kwargs = {**event.as_dict(), "type": f"Lookahead{event.type.capitalize()}"}

    def __str__(self) -> str:
        return json.dumps(self.kwargs)


def emit(event: LookaheadEvent | None) -> None:
    if event is not None:
        events_log.info(AutoGenLookaheadEvent(event))
        otel_span(event)


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


# Settings a component config carries as they are (the rest: see `_to_config`).
PLAIN_SETTINGS = (
    "mode",
    "window_tokens",
    "warm_suffix",
    "transform_timeout_s",
    "sync_transform_timeout_s",
    "commit_wait_timeout_s",
    "warmup_wait_timeout_s",
    "model_call_limit",
)


class LookaheadContextConfig(BaseModel):
    """`LookaheadChatCompletionContext.dump_component()`'s config."""

    policy: dict[str, Any]
    model_client: ComponentModel | None = None
    summarizer: ComponentModel | None = None  # another ChatCompletionClient than model_client
    system_message: str | None = None
    model: str | None = None
    model_family: str = ModelFamily.UNKNOWN
    initial_messages: list[LLMMessage] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)  # plain RuntimeConfig fields
    program_id: str | None = None
    send_tags: bool | None = None
    warmer: Literal["auto"] | None = None
    keep_calls: int = DEFAULT_KEEP


class LookaheadChatCompletionContext(ChatCompletionContext, Component[LookaheadContextConfig]):
    """A model context whose history is managed by a lookahead runtime. Swap the policy with
    `@context_policy(Offload())` on the context (or the agent built with it), or pass it
    explicitly."""

    component_config_schema = LookaheadContextConfig
    component_provider_override = "lookahead_sdk.adapters.autogen.LookaheadChatCompletionContext"
    default_context_policy: ClassVar[ContextPolicy | None] = None  # set by @context_policy

    def __init__(
        self,
        policy: ContextPolicy | None = None,
        *,
        model_client: ChatCompletionClient | None = None,
        system_message: str | None = None,
        model: str | None = None,
        model_family: str = ModelFamily.UNKNOWN,
        config: RuntimeConfig | None = None,
        initial_messages: list[LLMMessage] | None = None,
        send_tags: bool | None = None,
        keep_calls: int = DEFAULT_KEEP,
        on_call: Callable[[ContextCall], None] | None = None,
        **overrides: Any,
    ) -> None:
        """`model_client`: the agent's model client (the default summarizer; its model info
        and server give the window, tokenizer and tag wire). `overrides`: `RuntimeConfig`
        fields (window_tokens=, token_counter=, warmer=, ...); `summarizer=` also takes a
        `ChatCompletionClient`; `warmer="auto"` builds one for the model's server.
        `send_tags`: set the program's tags for the agent's requests (a tagging transport
        writes them per its session's wire) unless False. `keep_calls`: the recent `calls`
        kept; `on_call`: called with every `ContextCall`."""
        if model_client is not None and not isinstance(model_client, ChatCompletionClient):
            raise ConfigurationError(
                "model_client must be an AutoGen ChatCompletionClient (e.g. "
                f"OpenAIChatCompletionClient(...)), got {type(model_client).__name__}"
            )
        self._home = HomeLoop()
        settings = AdapterSettings.resolve(
            policy,
            self,
            config,
            overrides,
            coerce_summarizer=lambda value: as_summarizer(value, self._home),
            has_model=model_client is not None,
            send_tags=send_tags,
        )
        calls: CallLog[ContextCall] = CallLog(keep_calls, on_call)
        super().__init__(initial_messages)
        self._core = AdapterCore(settings, "autogen")
        self.model_client = model_client
        self.system_message = system_message
        self._model = model
        self.model_family = model_family
        self._offered: RequestShape | None = None
        self.clock = HookClock(keep_calls)
        self.calls = calls
        self._hosted: HostedRuntime | None = None
        # Messages stored here whose runtime append failed (on the runtime's thread only): the
        # next operation appends them first, so the runtime loses none and keeps their order.
        self._unsent: list[Message] = []
        self._client_model: str | None = None
        self._check_window()
        self._stored = [self._store(m) for m in self._messages]

    def _check_window(self) -> None:
        """Learn the client's model name now (no I/O); a window its info states is checked
        against the policy now too (a server's, at first use)."""
        facts = model_facts(self.model_client)
        self._client_model = facts.name
        if self.settings.config.window_tokens is None and facts.window_tokens is not None:
            self.settings.policy.validate(facts.window_tokens)

    @property
    def settings(self) -> AdapterSettings:
        return self._core.settings

    @property
    def discovered(self) -> Discovered | None:
        """What the context learned at first use (window, token counter, summarizer, warmer,
        the wire tags go in); None before it."""
        return self._core.discovered

    @property
    def model(self) -> str:
        return self._model or self._client_model or "unknown"

    def with_context_policy(self, policy: ContextPolicy) -> LookaheadChatCompletionContext:
        """Swap the policy in place (an agent already built with this context takes it);
        refused once the context holds a runtime."""
        if self._hosted is not None:
            raise StateError(
                "swap the policy before the agent runs: this context already holds a history"
            )
        self._core.settings = self.settings.with_policy(
            policy, self, has_model=self.model_client is not None
        )
        return self

    def use_model_client(self, client: ChatCompletionClient) -> None:
        """The agent's model client, when it was not given (a LookaheadModelClient links it)."""
        if self.model_client is None and self._hosted is None:
            self.model_client = client
            self._check_window()

    # -- the runtime -----------------------------------------------------------------------
    def _discovery(self) -> tuple[str, ModelFacts, CompletionClient | None]:
        client = self.model_client
        default = AutoGenCompletionClient(client, self._home) if client is not None else None
        return type(self).__name__, model_facts(client), default

    @property
    def hosted(self) -> HostedRuntime:
        """The runtime (created at first use; blocking the first time: async code awaits
        `ahosted()`)."""
        if self._needs_runtime:
            self._core.discover(*self._discovery())
            self._open()
        assert self._hosted is not None
        return self._hosted

    async def ahosted(self) -> HostedRuntime:
        self._home.remember()
        if self._needs_runtime:
            await self._core.adiscover(*self._discovery())
            self._open()
        assert self._hosted is not None
        return self._hosted

    @property
    def _needs_runtime(self) -> bool:
        """None yet, or the one held was closed (`aclose`: its stats stay readable until the
        next use starts a new one from the messages held here)."""
        return self._hosted is None or self._hosted.loop.closed

    def _open(self) -> None:
        if self._needs_runtime:
            self._unsent = []  # a new runtime starts from every message held here
            history = self._head() + [d for s in self._stored for d in self._dicts(s.message)]
            self._hosted = self._core.host(
                self.settings.program_tags(), history, shape=RequestShape(self.model)
            )

    @property
    def runtime(self) -> LookaheadRuntime:
        """The runtime (a closed one until the next use opens another)."""
        return self._hosted.runtime if self._hosted is not None else self.hosted.runtime

    async def offer_tools(self, tools: Sequence[Tool | ToolSchema]) -> None:
        """The tools the agent's requests carry (warm-ups must render them too); called by
        LookaheadModelClient. An explicit `shape=` wins."""
        if self.settings.explicit_shape:
            return
        shape = RequestShape(self.model, tool_dicts(tools) or None)
        if shape == self._offered:
            return
        self._offered = shape

        async def apply(runtime: LookaheadRuntime) -> None:
            runtime.shape = shape

        await (await self.ahosted()).acall(apply)

    @property
    def messages(self) -> list[LLMMessage]:
        """The stored history as it is, without the commit `get_messages` may make."""
        return list(self._messages)

    @property
    def tags(self) -> RequestTags:
        return self.runtime.tags

    @property
    def sends_tags(self) -> bool:
        return self._core.sends_tags

    def observe_usage(self, prompt_tokens: int) -> None:
        """The last model call's reported prompt size (LookaheadModelClient reports it)."""
        if len(self.calls):
            self._core.observe_usage(self.calls[-1].context_tokens, prompt_tokens)

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
        hosted = await self.ahosted()
        with self.clock.measure():
            messages = self._dicts(message)
            self._messages.append(message)
            self._stored.append(_Stored(message, tuple(message_digest(d) for d in messages)))

            async def append(runtime: LookaheadRuntime) -> None:
                self._feed(runtime, messages)
                await runtime.boundary()

            hosted.submit(append)

    def _feed(self, runtime: LookaheadRuntime, messages: Sequence[Message]) -> bool:
        """On the runtime's thread: append what an earlier append failed to give, then
        `messages`; all or nothing (a refused batch waits for the next operation). Whether
        anything was appended."""
        batch = [*self._unsent, *messages]
        try:
            runtime.append(*batch)
        except Exception:
            self._unsent = batch
            raise
        self._unsent = []
        return bool(batch)

    async def get_messages(self) -> list[LLMMessage]:
        """Right before a model call: commit at the hard limit; the committed history."""
        hosted = await self.ahosted()
        _current_context.set(self)
        self.clock.start_turn()
        with self.clock.measure():
            started = time.perf_counter()
            outcome = await hosted.acall(self._commit)
            runtime = hosted.runtime
            self.calls.append(ContextCall(started, outcome.kind, runtime.main.tokens))
            if outcome.committed:
                self._adopt(outcome.messages)
            events = self._core.pending_events(runtime.program_id)
            messages = list(self._messages)
        for event in [*events, self._core.commit_event(outcome, runtime)]:
            emit(event)
        return messages

    async def _commit(self, runtime: LookaheadRuntime) -> CommitOutcome:
        if self._feed(runtime, ()):  # what a failed append left out, before committing
            await runtime.boundary()
        outcome = await runtime.commit()
        if not outcome.committed:
            return outcome
        sent = self._as_sent(outcome.messages)
        if sent != outcome.messages:
            # A message the commit made that AutoGen sends otherwise (a summary has no `name`,
            # AutoGen sends a user message's source as one): the runtime's history becomes
            # what the agent sends, so warm-ups render the prompt's prefix.
            runtime.main.replace(sent)
            outcome = replace(outcome, messages=sent)
        return outcome

    def _as_sent(self, committed: Sequence[Message]) -> list[Message]:
        """`committed` as the agent sends it once it holds it as its messages."""
        head = len(self._head())
        return [
            *committed[:head],
            *(
                d
                for m in from_openai(committed[head:], _call_names(committed))
                for d in self._dicts(m)
            ),
        ]

    def _adopt(self, committed: Sequence[Message]) -> None:
        """The committed history becomes the context's messages (unchanged ones reused)."""
        body = list(committed[len(self._head()) :])
        names = _call_names(body)
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
            self._unsent = []

        await (await self.ahosted()).acall(reset)

    # -- persistence ---------------------------------------------------------------------------
    async def save_state(self) -> Mapping[str, Any]:
        """The messages and the runtime's state (history, stats, a ready lookahead result)."""
        runtime_state = await (await self.ahosted()).acall(_save)
        return {
            "messages": _MESSAGES.dump_python(self._messages, mode="json"),
            "runtime": runtime_state,
        }

    async def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore `save_state` output (the runtime's part atomically: a state that does not fit
        raises and leaves the context as it was)."""
        if "runtime" not in state or "messages" not in state:
            raise ValueError(
                "state must come from LookaheadChatCompletionContext.save_state (keys 'messages', 'runtime')"
            )
        messages = _MESSAGES.validate_python(state["messages"])
        saved = dict(state["runtime"])
        core = self._core

        async def load(runtime: LookaheadRuntime) -> None:
            core.load(runtime, saved)
            self._unsent = []

        await (await self.ahosted()).acall(load)
        self._messages = messages
        self._stored = [self._store(m) for m in self._messages]

    def _to_config(self) -> LookaheadContextConfig:
        """The context's configuration (not its history: that is `save_state`). Settings that
        are live objects cannot be saved: a ConfigurationError names them."""
        config = self.settings.config
        for name in ("warmer", "token_counter", "shape", "offload_store"):
            if getattr(config, name) is not None:
                raise ConfigurationError(
                    f"dump_component() cannot save {name}={type(getattr(config, name)).__name__}: "
                    "leave it out (the context discovers the token counter; warmer='auto' builds "
                    "a warmer for the model's server; an Offload store goes in the policy)"
                )
        return LookaheadContextConfig(
            policy=policy_spec(self.settings.policy),
            model_client=self.model_client.dump_component() if self.model_client else None,
            summarizer=self._summarizer_component(),
            system_message=self.system_message,
            model=self._model,
            model_family=self.model_family,
            initial_messages=self._initial_messages,
            settings={name: getattr(config, name) for name in PLAIN_SETTINGS},
            program_id=config.tags.program_id if config.tags is not None else None,
            send_tags=self.settings.send_tags,
            warmer="auto" if self.settings.auto_warmer else None,
            keep_calls=self.calls.keep,
        )

    def _summarizer_component(self) -> ComponentModel | None:
        summarizer = self.settings.config.summarizer
        if summarizer is None or (
            isinstance(summarizer, AutoGenCompletionClient)
            and summarizer.model is self.model_client
        ):
            return None
        if isinstance(summarizer, AutoGenCompletionClient):
            return summarizer.model.dump_component()
        raise ConfigurationError(
            f"dump_component() cannot save summarizer={type(summarizer).__name__}: give an AutoGen "
            "ChatCompletionClient (or leave it out: the model client summarizes)"
        )

    @classmethod
    def _from_config(cls, config: LookaheadContextConfig) -> LookaheadChatCompletionContext:
        overrides: dict[str, Any] = dict(config.settings)
        if config.summarizer is not None:
            overrides["summarizer"] = ChatCompletionClient.load_component(config.summarizer)
        if config.program_id is not None:
            overrides["tags"] = RequestTags(program_id=config.program_id)
        if config.warmer == "auto":
            overrides["warmer"] = "auto"
        return cls(
            policy_from_spec(config.policy),
            model_client=(
                ChatCompletionClient.load_component(config.model_client)
                if config.model_client is not None
                else None
            ),
            system_message=config.system_message,
            model=config.model,
            model_family=config.model_family,
            initial_messages=config.initial_messages,
            send_tags=config.send_tags,
            keep_calls=config.keep_calls,
            **overrides,
        )

    # -- metrics and closing -------------------------------------------------------------------
    def metrics_text(self) -> str:
        """Prometheus text exposition of the runtime's stats."""
        return self._core.metrics_text()

    def serve_metrics(self, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
        """`GET /metrics` on a daemon thread (port 0: any free one, see `.url`)."""
        return self._core.serve_metrics(port, host)

    async def aclose(self) -> None:
        """Close the runtime and the warmer and summarizer given to this context (not the
        agent's model client). The context stays usable: its next use starts a runtime from
        the messages it holds."""
        self.clock.end_turn()
        await self._core.aclose([self._hosted] if self._hosted is not None else [])


async def _save(runtime: LookaheadRuntime) -> dict[str, Any]:
    return runtime.save_state()


def _call_names(messages: Sequence[Message]) -> dict[str, str]:
    """Tool-call ids to function names, for the results of those calls."""
    return {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}


@dataclass
class ClientCall:
    """One request through the client; recorded (and given to `on_call`) once it ended."""

    started_at: float
    first_token_at: float | None = None


class LookaheadModelClientConfig(BaseModel):
    inner: ComponentModel
    program_id: str | None = None
    keep_calls: int = DEFAULT_KEEP


class LookaheadModelClient(ChatCompletionClient, Component[LookaheadModelClientConfig]):
    """Any ChatCompletionClient whose requests carry the program's tags, as the current tags for
    the tagging transport (give the inner client `http_client=session.async_http_client()`).
    Tags come from `tags`, else the linked context's program (the context given, else the one
    whose `get_messages` the agent just called), else the caller's. It also tells the context
    the tools each request offers and the prompt size each reply reports.
    `calls` keeps the `keep_calls` most recent requests; `on_call` is called with every one."""

    component_type = "model"
    component_config_schema = LookaheadModelClientConfig
    component_provider_override = "lookahead_sdk.adapters.autogen.LookaheadModelClient"

    def __init__(
        self,
        inner: ChatCompletionClient,
        *,
        context: LookaheadChatCompletionContext | None = None,
        tags: RequestTags | None = None,
        keep_calls: int = DEFAULT_KEEP,
        on_call: Callable[[ClientCall], None] | None = None,
    ) -> None:
        if not isinstance(inner, ChatCompletionClient):
            raise ConfigurationError(
                f"inner must be an AutoGen ChatCompletionClient, got {type(inner).__name__}"
            )
        self.inner = inner
        self.context = context
        self._tags = tags
        self.calls: CallLog[ClientCall] = CallLog(keep_calls, on_call)
        if context is not None:
            context.use_model_client(inner)

    def _context(self) -> LookaheadChatCompletionContext | None:
        return self.context or _current_context.get()

    def tags(self) -> RequestTags | None:
        if self._tags is not None:
            return self._tags
        context = self._context()
        if context is None:
            return current_tags()
        return context.tags if context.sends_tags else None

    def _ended(self, call: ClientCall, result: CreateResult | None) -> None:
        context = self._context()
        if result is not None and context is not None:
            context.observe_usage(result.usage.prompt_tokens)
        self.calls.append(call)

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
        context = self._context()
        if context is not None:
            await context.offer_tools(tools)
        tags = self.tags()
        call = ClientCall(time.perf_counter())
        result = None
        try:
            with use_tags(tags):
                result = await self.inner.create(
                    messages,
                    tools=tools,
                    tool_choice=tool_choice,
                    json_output=json_output,
                    extra_create_args=extra_create_args,
                    cancellation_token=cancellation_token,
                )
            call.first_token_at = time.perf_counter()
        finally:
            self._ended(call, result)
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
        context = self._context()
        if context is not None:
            await context.offer_tools(tools)
        tags = self.tags()
        call = ClientCall(time.perf_counter())
        result = None
        try:
            with use_tags(tags):
                async for item in self.inner.create_stream(
                    messages,
                    tools=tools,
                    tool_choice=tool_choice,
                    json_output=json_output,
                    extra_create_args=extra_create_args,
                    cancellation_token=cancellation_token,
                ):
                    if call.first_token_at is None:
                        call.first_token_at = time.perf_counter()
                    if isinstance(item, CreateResult):
                        result = item
                    yield item
        finally:
            self._ended(call, result)

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

    def _to_config(self) -> LookaheadModelClientConfig:
        return LookaheadModelClientConfig(
            inner=self.inner.dump_component(),
            program_id=self._tags.program_id if self._tags is not None else None,
            keep_calls=self.calls.keep,
        )

    @classmethod
    def _from_config(cls, config: LookaheadModelClientConfig) -> LookaheadModelClient:
        tags = RequestTags(program_id=config.program_id) if config.program_id else None
        return cls(
            ChatCompletionClient.load_component(config.inner),
            tags=tags,
            keep_calls=config.keep_calls,
        )


def agent_contexts(target: object) -> list[LookaheadChatCompletionContext] | None:
    """The LookaheadChatCompletionContext an AutoGen chat agent (AssistantAgent) uses; None for
    anything that is not an AutoGen chat agent (for `@context_policy`)."""
    if not isinstance(target, BaseChatAgent):
        return None
    context = getattr(target, "model_context", None)
    return [context] if isinstance(context, LookaheadChatCompletionContext) else []


register_adapter_locator(agent_contexts)

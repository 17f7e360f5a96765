"""A framework's own model object as the summarizer, and what an adapter reads off that model.

Each adapter wraps its framework's model (LangChain `BaseChatModel`, LlamaIndex `LLM`, AutoGen
`ChatCompletionClient`) in a `FrameworkCompletionClient`: the summary is a call of that model,
so the framework traces it (LangSmith callbacks, LlamaIndex instrumentation, AutoGen events),
and its usage comes back as the framework reports it. This module holds what the three wrappers
share; each adapter module adds the call itself.

Where the call runs: the runtime's transforms run on the adapter's own event loop, while the
framework's async clients hold connections bound to the loop the agent runs on. So a wrapper
either calls the framework's synchronous method in a worker thread (LangChain, LlamaIndex), or
hands the coroutine to the loop the agent last used (`HomeLoop`, AutoGen: async only). Either
way the call starts from a fresh context holding only the program's tags: the agent's run
context (e.g. LangGraph's stream handlers) must not adopt a background summary.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from lookahead_sdk.base.completion import Completion
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.protocol import RequestTags, WireFormat
from lookahead_sdk.base.tags import current_tags, use_tags
from lookahead_sdk.base.tokens import TokenCounter

T = TypeVar("T")


@dataclass(frozen=True)
class ModelFacts:
    """What an adapter reads off the framework's model object (None: the model does not say)."""

    name: str | None = None
    base_url: str | None = None  # the OpenAI-compatible server it talks to; None: unknown
    window_tokens: int | None = None  # its context window, from its profile / metadata
    token_counter: TokenCounter | None = None  # the framework's own counter


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0


class FrameworkCompletionClient(ABC):
    """A `CompletionClient` calling a framework's model object. `base_url`: the server that
    model talks to (None: unknown or hosted). `wire` says which tag fields the call's body gets
    where the model takes an `extra_body` ("none": none; the adapter sets it once it has probed
    that server)."""

    framework: str = "framework"

    def __init__(self, model: Any, base_url: str | None = None) -> None:
        self.model = model
        self.base_url = base_url
        self.wire: WireFormat = "none"

    def tag_fields(self, tags: RequestTags | None) -> dict[str, Any]:
        return {} if tags is None else tags.body_fields(self.wire)

    async def complete(
        self, messages: Sequence[Message], *, max_tokens: int, temperature: float
    ) -> Completion:
        text, usage = await self.call(list(messages), max_tokens, temperature, current_tags())
        return Completion(text, usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)

    @abstractmethod
    async def call(
        self,
        messages: list[Message],
        max_tokens: int,
        temperature: float,
        tags: RequestTags | None,
    ) -> tuple[str, Usage]: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.model).__name__})"


async def in_worker_thread(function: Callable[[], T], tags: RequestTags | None) -> T:
    """`function()` on a worker thread, in a fresh context holding only `tags`."""

    def run() -> T:
        with use_tags(tags):
            return function()

    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, contextvars.Context().run, run)


class HomeLoop:
    """The event loop a framework's async model client is used on (the agent's). Hooks call
    `remember()`; `run` awaits a coroutine there, from any loop, or right here when that loop
    is this one or gone, or ends while the coroutine runs there."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def remember(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def run(self, make: Callable[[], Awaitable[T]], tags: RequestTags | None) -> T:
        async def call() -> T:
            with use_tags(tags):
                return await make()

        home = self._loop
        if home is None or home.is_closed() or not home.is_running():
            return await call()
        if home is asyncio.get_running_loop():
            return await call()
        # The task there starts from a copy of this context: the program's tags, nothing of
        # the agent's own run.
        future = asyncio.run_coroutine_threadsafe(call(), home)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if _cancelled_here():
                raise
        # Cancelled on the home loop, not by our caller: that loop is ending (`asyncio.run`
        # cancels what still runs there when the agent's run returns). A background summary
        # must not die with the agent's run: it finishes here.
        return await call()


def _cancelled_here() -> bool:
    """The running task itself is being cancelled (not only something it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def is_completion_client(value: object) -> bool:
    """A `CompletionClient`: an async `complete` (a LlamaIndex LLM's sync `complete` is not)."""
    return inspect.iscoroutinefunction(getattr(value, "complete", None))


def text_counter(count: Callable[[str], int], name: str) -> TokenCounter:
    """A framework's text token counter as a `TokenCounter`."""
    return _FunctionCounter(count, name)


@dataclass(frozen=True)
class _FunctionCounter:
    count: Callable[[str], int]
    name: str

    def count_text(self, text: str) -> int:
        return self.count(text)

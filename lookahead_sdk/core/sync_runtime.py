"""The lookahead runtime for synchronous code (sync framework hooks, scripts).

`SyncLookaheadRuntime` mirrors `LookaheadRuntime`'s API without `await`. The async runtime lives on
a private event-loop thread, so background transforms and warm-ups keep running between the
caller's blocking calls; every call is executed on that thread, so the runtime's state is only
ever touched by one thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, ClassVar, TypeVar

from lookahead_sdk.base.completion import CompletionClient
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import current_tags
from lookahead_sdk.core.config import RuntimeConfig, RuntimeMode
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import ContextPolicy, resolve_policy
from lookahead_sdk.core.runtime import CommitOutcome, LookaheadRuntime, RuntimeStats
from lookahead_sdk.core.state import LookaheadState, MainState
from lookahead_sdk.core.warmer import Warmer
from lookahead_sdk.errors import StateError

T = TypeVar("T")


class BackgroundLoop:
    """An asyncio event loop on a daemon thread."""

    def __init__(self, name: str = "lookahead-runtime") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError(
                "blocking call from the runtime's own loop thread would deadlock; use LookaheadRuntime"
            )
        if self.loop.is_closed():
            coroutine.close()
            raise StateError(
                "this SyncLookaheadRuntime is closed; create a new one (save_state() still reads "
                "what it held)"
            )
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)  # type: ignore[arg-type]
        return future.result(timeout_s)

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` run on the loop's thread."""

        async def invoke() -> T:
            return function(*args)

        return self.run(invoke())

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class SyncLookaheadRuntime:
    """Same arguments as LookaheadRuntime; tags default to the caller's current tags (the
    runtime is built on another thread, where the caller's contextvars are not set)."""

    default_context_policy: ClassVar[ContextPolicy | None] = None  # set by @context_policy

    def __init__(
        self,
        policy: ContextPolicy | None = None,
        config: RuntimeConfig | None = None,
        *,
        messages: Sequence[Message] = (),
        **overrides: Any,
    ) -> None:
        config = RuntimeConfig.build(config, **overrides)
        if config.tags is None and current_tags() is not None:
            config = config.with_overrides(tags=current_tags())
        policy = resolve_policy(policy, self)  # the decorator's contextvar is set on this thread
        self._loop = BackgroundLoop()

        async def create() -> LookaheadRuntime:
            return LookaheadRuntime(policy, config, messages=messages)

        try:
            self.runtime = self._loop.run(create())
        except BaseException:
            self._loop.close()
            raise

    @property
    def main(self) -> MainState:
        return self.runtime.main

    @property
    def lookahead(self) -> LookaheadState:
        return self.runtime.lookahead

    @property
    def stats(self) -> RuntimeStats:
        return self.runtime.stats

    @property
    def mode(self) -> RuntimeMode:
        return self.runtime.mode

    @property
    def program_id(self) -> str:
        return self.runtime.program_id

    @property
    def warmer(self) -> Warmer | None:
        return self.runtime.warmer

    @property
    def summarizer(self) -> CompletionClient | None:
        return self.runtime.summarizer

    @property
    def offload_store(self) -> OffloadStore | None:
        return self.runtime.offload_store

    @property
    def spawns_subagents(self) -> bool:
        return self.runtime.spawns_subagents

    @property
    def busy(self) -> bool:
        return self.runtime.busy

    @property
    def commit_due(self) -> bool:
        return self.runtime.commit_due

    @property
    def model_calls_left(self) -> int | None:
        """See `LookaheadRuntime.model_calls_left`."""
        return self.runtime.model_calls_left

    @model_calls_left.setter
    def model_calls_left(self, value: int | None) -> None:
        self._loop.call(setattr, self.runtime, "model_calls_left", value)

    def append(self, *messages: Message) -> None:
        self._loop.call(self.runtime.append, *messages)

    def boundary(self) -> None:
        self._loop.run(self.runtime.boundary())

    def stream_boundary(self, text: str, *, tool_name: str | None = None) -> None:
        self._loop.run(self.runtime.stream_boundary(text, tool_name=tool_name))

    def prepare(self) -> list[Message]:
        return self._loop.run(self.runtime.prepare())

    def commit(self) -> CommitOutcome:
        return self._loop.run(self.runtime.commit())

    def settle(self, timeout_s: float | None = None) -> None:
        """Wait until the runtime's background work is done (see `LookaheadRuntime.settle`)."""
        self._loop.run(self.runtime.settle(timeout_s))

    def hand_over(self, child_program_id: str, messages: Sequence[Message]) -> None:
        """See `LookaheadRuntime.hand_over`."""
        self._loop.run(self.runtime.hand_over(child_program_id, messages))

    def subagent_ended(self, child_program_id: str) -> None:
        self._loop.call(self.runtime.subagent_ended, child_program_id)

    def save_state(self) -> dict[str, Any]:
        if self._loop.loop.is_closed():  # nothing runs on a closed runtime: read it here
            return self.runtime.save_state()
        return self._loop.call(self.runtime.save_state)

    def load_state(self, state: dict[str, Any], *, adopt_program_id: bool = False) -> None:
        self._loop.call(lambda: self.runtime.load_state(state, adopt_program_id=adopt_program_id))

    def close(self) -> None:
        if not self._loop.loop.is_closed():
            self._loop.run(self.runtime.aclose())
            self._loop.close()

    def __enter__(self) -> SyncLookaheadRuntime:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

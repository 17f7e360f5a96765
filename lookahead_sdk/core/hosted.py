"""Lookahead runtimes living on an adapter's own event-loop thread, reachable from any hook.

Framework hooks come in sync flavours (called from worker threads) and async flavours (called on
whatever loop the user's `asyncio.run` created, often a new one per invocation). A runtime whose
background jobs lived on the caller's loop would die with it, so each adapter owns one private
loop: sync hooks block on it, async hooks await it without blocking their own loop. The warmer
and summarizer clients the runtimes use run there too (httpx connections belong to the loop that
opened them), so the adapter closes them with its loop. One hop per hook: each operation is a
coroutine function run on that thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from lookahead_sdk.core.runtime import LookaheadRuntime
from lookahead_sdk.core.sync_runtime import BackgroundLoop

T = TypeVar("T")
log = logging.getLogger(__name__)
Operation = Callable[[LookaheadRuntime], Awaitable[T]]
# How long an async hook blocks its caller's loop for an operation before awaiting it instead.
QUICK_OPERATION_S = 0.002


class AdapterLoop:
    def __init__(self, name: str = "lookahead-adapter") -> None:
        self._background = BackgroundLoop(name)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._background.loop

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """From synchronous code: block until the coroutine finished on the adapter's loop."""
        return self._background.run(coroutine)

    async def arun(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """From async code on any loop: without blocking that loop for more than
        `QUICK_OPERATION_S`.

        Most operations take well under a millisecond on the adapter's thread. Awaiting them
        lets the caller's loop run its other ready tasks (a framework's event streaming, other
        agents) before the hook returns, so the model call behind the hook starts that much
        later; waiting for them here, with the GIL released, hands the result back at once. An
        operation still running after that (a commit waiting for its lookahead, a synchronous
        transform, one that needs the caller's loop) is awaited as before."""
        if asyncio.get_running_loop() is self.loop:
            return await coroutine
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(QUICK_OPERATION_S)
        except concurrent.futures.TimeoutError:
            return await asyncio.wrap_future(future)

    def host(self, create: Callable[[], LookaheadRuntime]) -> HostedRuntime:
        """A runtime built on this loop (its background tasks belong there)."""

        async def build() -> LookaheadRuntime:
            return create()

        return HostedRuntime(self, self.run(build()))

    async def _close_all(
        self, runtimes: list[HostedRuntime], resources: tuple[object, ...]
    ) -> None:
        for hosted in runtimes:
            await hosted._apply(_close)  # after the operations still queued
        for resource in resources:
            closer = getattr(resource, "aclose", None)
            result = closer() if closer is not None else None
            if inspect.isawaitable(result):
                await result

    def close(self, runtimes: list[HostedRuntime], *resources: object) -> None:
        """Close the runtimes, then the clients they used (warmer, summarizer), then the loop."""
        if self.closed:
            return
        try:
            self.run(self._close_all(runtimes, resources))
        finally:
            self._background.close()

    async def aclose(self, runtimes: list[HostedRuntime], *resources: object) -> None:
        if self.closed:
            return
        try:
            await self.arun(self._close_all(runtimes, resources))
        finally:
            await asyncio.to_thread(self._background.close)


class HostedRuntime:
    """Operations on the runtime run one at a time, in the order they were given, on the
    adapter's loop: `call` / `acall` wait for the result; `submit` does not (a segment boundary
    whose work should not hold the framework, e.g. before a tool runs), and a failure of a
    submitted operation is raised by the next `call` / `acall` (once the operations given
    before it ran, instead of that call's own operation; several at once, as the first with
    notes naming the others)."""

    def __init__(self, loop: AdapterLoop, runtime: LookaheadRuntime) -> None:
        self.loop = loop
        self.runtime = runtime
        self._order: asyncio.Lock | None = None  # created on the adapter's loop
        self._failures: list[BaseException] = []

    def call(self, operation: Operation[T]) -> T:
        return self.loop.run(self._apply(operation, raise_failure=True))

    async def acall(self, operation: Operation[T]) -> T:
        return await self.loop.arun(self._apply(operation, raise_failure=True))

    def settle(self) -> None:
        """Wait until every submitted operation ran (before reading the runtime's state)."""
        self.call(_nothing)

    async def asettle(self) -> None:
        await self.acall(_nothing)

    def submit(self, operation: Operation[Any]) -> None:
        asyncio.run_coroutine_threadsafe(self._apply_submitted(operation), self.loop.loop)

    def close_soon(self) -> concurrent.futures.Future[None]:
        """Close the runtime after the operations already given (a commit in progress ends
        first), without waiting: a program the adapter let go of."""
        future = asyncio.run_coroutine_threadsafe(self._apply(_close), self.loop.loop)
        future.add_done_callback(_log_close_failure)
        return future

    async def _apply(self, operation: Operation[T], *, raise_failure: bool = False) -> T:
        async with self._fifo():
            # Checked here, after every operation given before this one ran: a submitted
            # operation that failed just before is raised now, not one call later.
            if raise_failure and self._failures:
                # All of them at once: one per call would fail as many calls after it, each
                # losing its own operation, and would pile up while a caller catches and goes on.
                first, *later = self._failures
                self._failures.clear()
                for failure in later:
                    first.add_note(f"a later submitted operation failed too: {failure!r}")
                raise first
            return await operation(self.runtime)

    async def _apply_submitted(self, operation: Operation[Any]) -> None:
        async with self._fifo():
            try:
                await operation(self.runtime)
            except Exception as error:  # kept for the next call, before it runs anything
                self._failures.append(error)

    def _fifo(self) -> asyncio.Lock:
        """Operations keep the order they were given in (on the adapter's loop only)."""
        if self._order is None:
            self._order = asyncio.Lock()
        return self._order


async def _nothing(runtime: LookaheadRuntime) -> None:
    return None


async def _close(runtime: LookaheadRuntime) -> None:
    await runtime.aclose()


def _log_close_failure(future: concurrent.futures.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("closing a released runtime failed: %r", future.exception())

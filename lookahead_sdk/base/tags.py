"""Request tags: which program a request belongs to and how urgent it is.

Tags live in a contextvar, so everything a program does inside `program(...)` (and every asyncio
task it starts) is tagged; `lookahead_sdk.client.transport` merges them into each outgoing JSON request.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar

import httpx

from lookahead_sdk.base.checks import require_number
from lookahead_sdk.base.protocol import RELEASE_PATH, RequestTags, release_body
from lookahead_sdk.errors import ConfigurationError

log = logging.getLogger(__name__)

RELEASE_URLS_ENV = "LOOKAHEAD_RELEASE_URLS"
T = TypeVar("T")


_current_tags: contextvars.ContextVar[RequestTags | None] = contextvars.ContextVar(
    "lookahead_sdk_request_tags", default=None
)


def current_tags() -> RequestTags | None:
    return _current_tags.get()


@contextmanager
def _scoped(variable: contextvars.ContextVar[T], value: T) -> Iterator[T]:
    token = variable.set(value)
    try:
        yield value
    finally:
        variable.reset(token)


def use_tags(tags: RequestTags | None) -> AbstractContextManager[RequestTags | None]:
    """Tag everything inside (and every task started inside) with `tags`."""
    return _scoped(_current_tags, tags)


@dataclass
class BackgroundWork:
    """The lookahead a piece of background work runs for. The runtime sets `promoted` when a
    commit starts waiting for it; work waiting for slack (`client.slack.SlackGate`) then goes
    at once. `due_at` is when its commit is expected (`time.monotonic()`; None: not
    forecast), refreshed at each boundary; the gate lets due work use less idle slack.
    `remaining_s` is the engine time the work still needs (a warmer's estimate, refreshed
    before each chunk; None: unknown). Visible to that work through `current_work()` (a
    contextvar, like the tags)."""

    group_id: str
    promoted: bool = False
    due_at: float | None = None
    remaining_s: float | None = None

    def due_within(self, seconds: float) -> bool:
        """Its commit is expected within `seconds`, or is not forecast (so may be any moment)."""
        return self.due_at is None or self.due_at - time.monotonic() <= seconds

    def outlasts_idle(self, idle_share: float) -> bool:
        """Whether the idle time expected before its commit (`idle_share` of the time left)
        is too short for the work left, so it must also run beside busy time. True when
        either is unknown: no forecast, or a job (a summary's decode) that cannot say."""
        if self.due_at is None or self.remaining_s is None:
            return True
        return self.remaining_s > max(0.0, self.due_at - time.monotonic()) * idle_share


_current_work: contextvars.ContextVar[BackgroundWork | None] = contextvars.ContextVar(
    "lookahead_sdk_background_work", default=None
)


def current_work() -> BackgroundWork | None:
    return _current_work.get()


def doing(work: BackgroundWork | None) -> AbstractContextManager[BackgroundWork | None]:
    """Everything inside works for `work` (its gate waits end when it is promoted)."""
    return _scoped(_current_work, work)


class ProgramEnvironments(Protocol):
    """Runs a program's tool environments (prepare, watch the routers, tear down exactly once):
    `lookahead_sdk.client.tool_environments` provides it and registers it on import (base
    cannot import client)."""

    def start(self) -> None: ...

    def close(self) -> None: ...

    async def astart(self) -> None: ...

    async def aclose(self) -> None: ...


_environments_factory: Callable[[program], ProgramEnvironments] | None = None


def register_environments(factory: Callable[[program], ProgramEnvironments]) -> None:
    global _environments_factory
    _environments_factory = factory


def release_urls_from_env() -> tuple[str, ...]:
    return tuple(url for url in os.environ.get(RELEASE_URLS_ENV, "").split(",") if url.strip())


def release_request(base_url: str, program_id: str) -> tuple[str, dict[str, Any]]:
    return f"{base_url.rstrip('/')}{RELEASE_PATH}", release_body(program_id)


class program:
    """Open a program id for everything inside; send a release signal on exit, errors included.

        async with program("agent-7", release_to=["http://router:8000"]) as tags: ...
        with program() as tags: ...   # a fresh id

    The release (`POST {url}/programs/release {"program_id": ...}`) lets a program-aware router
    free the program's accounting at once instead of waiting for an idle timeout.
    """

    def __init__(
        self,
        program_id: str | None = None,
        *,
        release_to: str | Sequence[str] | None = None,
        timeout_s: float = 5.0,
        environments: Any = None,
        **tag_fields: Any,
    ) -> None:
        self.tags = RequestTags(
            program_id=program_id or f"prog-{uuid.uuid4().hex[:12]}", **tag_fields
        )
        require_number(
            "timeout_s", timeout_s, low_open=True, meaning="the release request's timeout, seconds"
        )
        if isinstance(release_to, str):
            release_to = (release_to,)
        if release_to is not None and not all(
            isinstance(url, str) and url.startswith(("http://", "https://")) for url in release_to
        ):
            raise ValueError(
                f"release_to must be a router URL or a list of them (http:// or https://), "
                f"got {release_to!r}"
            )
        self.release_to = tuple(release_to) if release_to is not None else release_urls_from_env()
        self.timeout_s = timeout_s
        self._token: contextvars.Token[RequestTags | None] | None = None
        self.released: list[str] = []
        # Tool environments (`lookahead_sdk.client.tool_environments`): prepared on entry,
        # torn down once on exit or when a router expires the program's lease.
        self.environments = environments
        self._environments: ProgramEnvironments | None = None
        if environments:
            if _environments_factory is None:
                raise ConfigurationError(
                    "program(environments=...) needs lookahead_sdk.client.tool_environments: "
                    "import it (ToolEnvironment, TempDirEnvironment, DockerEnvironment live there)"
                )
            self._environments = _environments_factory(self)

    def __enter__(self) -> RequestTags:
        self._token = _current_tags.set(self.tags)
        if self._environments is not None:
            try:
                self._environments.start()
            except BaseException:
                self._reset()
                raise
        return self.tags

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._reset()
        self._release()
        if self._environments is not None:
            self._environments.close()

    async def __aenter__(self) -> RequestTags:
        self._token = _current_tags.set(self.tags)
        if self._environments is not None:
            try:
                await self._environments.astart()
            except BaseException:
                self._reset()
                raise
        return self.tags

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._reset()
        if self.release_to:  # the same release, off the event loop
            await asyncio.to_thread(self._release)
        if self._environments is not None:
            await self._environments.aclose()

    def _release(self) -> None:
        """Tell each router the program ended; a failure is logged, never raised over the body."""
        program_id = self.tags.program_id or ""
        with httpx.Client(timeout=self.timeout_s) as client:
            for base_url in self.release_to:
                url, body = release_request(base_url, program_id)
                try:
                    client.post(url, json=body, headers=self.tags.headers()).raise_for_status()
                except httpx.HTTPError as error:
                    self._release_failed(url, error)
                    continue
                self.released.append(base_url)

    def _release_failed(self, url: str, error: httpx.HTTPError) -> None:
        log.warning("release of program %s at %s failed: %s", self.tags.program_id, url, error)

    def _reset(self) -> None:
        if self._token is not None:
            _current_tags.reset(self._token)
            self._token = None

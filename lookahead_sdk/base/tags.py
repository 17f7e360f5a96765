"""Request tags: which program a request belongs to and how urgent it is.

Tags live in a contextvar, so everything a program does inside `program(...)` (and every asyncio
task it starts) is tagged; `lookahead_sdk.client.transport` merges them into each outgoing JSON request.
"""

from __future__ import annotations

import contextvars
import logging
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from types import TracebackType
from typing import Any, Literal

import httpx

log = logging.getLogger(__name__)

PriorityClass = Literal["lc", "be"]
PRIORITY_CLASSES: tuple[str, ...] = ("lc", "be")

# Integer priorities for engines with numeric priority scheduling, lower = more urgent: vLLM's
# convention, and SGLang's with --schedule-low-priority-values-first (which `lookahead-sdk
# sglang launch` passes; SGLang's own default is the reverse).
NUMERIC_PRIORITY = {"lc": 0, "be": 10}

RELEASE_URLS_ENV = "LOOKAHEAD_RELEASE_URLS"
PROGRAM_HEADER = "X-Program-Id"


@dataclass(frozen=True)
class RequestTags:
    program_id: str
    priority_class: PriorityClass = "lc"
    is_lookahead: bool = False
    lookahead_group_id: str | None = None
    # Expected commit, in ms after the request reaches the server (relative: no clock sync needed).
    commit_deadline_ms: int | None = None
    slo_ttft_ms: int | None = None
    slo_tbt_ms: int | None = None
    # A lookahead request whose prompt is the program's live context plus a tail (a summary
    # request): engines with explicit KV placement (llama.cpp slots) serve it where that
    # context is cached instead of re-prefilling it elsewhere. Not sent on the wire.
    extends_live_context: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.program_id, str) or not self.program_id:
            raise ValueError(f"program_id must be a non-empty string, got {self.program_id!r}")
        if self.priority_class not in PRIORITY_CLASSES:
            raise ValueError(
                f"priority_class must be 'lc' (latency-critical) or 'be' (best-effort), "
                f"got {self.priority_class!r}"
            )
        if not isinstance(self.is_lookahead, bool):
            raise TypeError(f"is_lookahead must be a bool, got {type(self.is_lookahead).__name__}")
        if self.is_lookahead and not self.lookahead_group_id:
            raise ValueError("lookahead_group_id is required when is_lookahead=True")
        for name in ("commit_deadline_ms", "slo_ttft_ms", "slo_tbt_ms"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(
                    f"{name} must be a non-negative int of milliseconds or None, got {value!r}"
                )

    def lookahead(self, group_id: str, *, commit_deadline_ms: int | None = None) -> RequestTags:
        """Tags for best-effort background work of this program."""
        return replace(
            self,
            priority_class="be",
            is_lookahead=True,
            lookahead_group_id=group_id,
            commit_deadline_ms=commit_deadline_ms,
        )

    def extending_live_context(self) -> RequestTags:
        return replace(self, extends_live_context=True)

    def promoted(self) -> RequestTags:
        """A lookahead about to be committed: still grouped, now latency-critical."""
        return replace(self, priority_class="lc")

    def to_body(self) -> dict[str, Any]:
        """Top-level JSON fields (the lookahead artifact's wire format); None fields omitted."""
        fields = asdict(self)
        del fields["extends_live_context"]
        return {key: value for key, value in fields.items() if value is not None}

    def to_sglang(self) -> dict[str, Any]:
        """SGLang drops unknown chat fields; `priority` and `custom_params` reach the scheduler."""
        return {"priority": NUMERIC_PRIORITY[self.priority_class], "custom_params": self.to_body()}

    def to_vllm(self) -> dict[str, Any]:
        return {"priority": NUMERIC_PRIORITY[self.priority_class]}

    def headers(self) -> dict[str, str]:
        return {PROGRAM_HEADER: self.program_id}


_current_tags: contextvars.ContextVar[RequestTags | None] = contextvars.ContextVar(
    "lookahead_sdk_request_tags", default=None
)


def current_tags() -> RequestTags | None:
    return _current_tags.get()


@contextmanager
def use_tags(tags: RequestTags | None) -> Iterator[RequestTags | None]:
    token = _current_tags.set(tags)
    try:
        yield tags
    finally:
        _current_tags.reset(token)


def release_urls_from_env() -> tuple[str, ...]:
    return tuple(url for url in os.environ.get(RELEASE_URLS_ENV, "").split(",") if url.strip())


def release_request(base_url: str, program_id: str) -> tuple[str, dict[str, Any]]:
    return f"{base_url.rstrip('/')}/programs/release", {"program_id": program_id}


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
        release_to: Sequence[str] | None = None,
        timeout_s: float = 5.0,
        **tag_fields: Any,
    ) -> None:
        self.tags = RequestTags(
            program_id=program_id or f"prog-{uuid.uuid4().hex[:12]}", **tag_fields
        )
        self.release_to = tuple(release_to) if release_to is not None else release_urls_from_env()
        self.timeout_s = timeout_s
        self._token: contextvars.Token[RequestTags | None] | None = None
        self.released: list[str] = []

    def __enter__(self) -> RequestTags:
        self._token = _current_tags.set(self.tags)
        return self.tags

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._reset()
        with httpx.Client(timeout=self.timeout_s) as client:
            for base_url in self.release_to:
                url, body = release_request(base_url, self.tags.program_id)
                try:
                    client.post(url, json=body, headers=self.tags.headers()).raise_for_status()
                    self.released.append(base_url)
                except httpx.HTTPError as error:
                    log.warning(
                        "release of program %s at %s failed: %s", self.tags.program_id, url, error
                    )

    async def __aenter__(self) -> RequestTags:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._reset()
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            for base_url in self.release_to:
                url, body = release_request(base_url, self.tags.program_id)
                try:
                    (
                        await client.post(url, json=body, headers=self.tags.headers())
                    ).raise_for_status()
                    self.released.append(base_url)
                except httpx.HTTPError as error:
                    log.warning(
                        "release of program %s at %s failed: %s", self.tags.program_id, url, error
                    )

    def _reset(self) -> None:
        if self._token is not None:
            _current_tags.reset(self._token)
            self._token = None

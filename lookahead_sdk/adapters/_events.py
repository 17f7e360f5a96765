"""Lookahead events as every adapter produces them, before each framework's own channel carries
them: LangChain custom events (`lookahead_commit`, `lookahead_warmup`), LlamaIndex
instrumentation events, AutoGen's event logger and an OpenTelemetry span.

Commits are reported by the model-call hook that made them. Warm-ups finish in the background,
on the adapter's loop: `ObservingWarmer` queues them per program and the adapter's next hook for
that program emits them inside the framework's run (LangChain's custom events need one).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import current_tags
from lookahead_sdk.core.runtime import CommitKind, CommitOutcome
from lookahead_sdk.core.warmer import DelegatingWarmer, RequestShape, WarmupResult, WarmupSpend

EventType = Literal["commit", "warmup"]
MAX_QUEUED = 256  # per program: events never emitted (no further hook) stay bounded


@dataclass(frozen=True)
class LookaheadEvent:
    """One commit or warm-up of a program.

    commit: `kind` "hit" (a lookahead result), "fallback" (the synchronous transform, the
    lookahead missing, failed or stale) or "sync" (sync mode); `cold` for a hit no warm-up had
    prefilled; `waited_s` the wait for a running lookahead; `context_tokens` the committed
    context. warmup: `kind` "complete", "partial" (stopped for a commit) or "failed";
    `prefilled_tokens` what the server computed."""

    type: EventType
    program_id: str
    kind: str
    cold: bool = False
    reason: str = ""
    waited_s: float = 0.0
    transform_s: float = 0.0
    context_tokens: int = 0
    unwarmed_tokens: int | None = None
    group_id: str | None = None
    prefilled_tokens: int = 0
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"lookahead_{self.type}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def commit_event(
    outcome: CommitOutcome, program_id: str, context_tokens: int
) -> LookaheadEvent | None:
    """The event of a model call's commit; None when nothing was committed."""
    if outcome.kind is CommitKind.NONE:
        return None
    return LookaheadEvent(
        type="commit",
        program_id=program_id,
        kind=outcome.kind.value,
        cold=outcome.cold,
        reason=outcome.reason,
        waited_s=outcome.waited_s,
        transform_s=outcome.transform_s,
        context_tokens=context_tokens,
        unwarmed_tokens=outcome.unwarmed_tokens,
    )


class EventQueue:
    """Background events waiting for their program's next hook (any thread may put or take)."""

    def __init__(self) -> None:
        self._queued: dict[str, deque[LookaheadEvent]] = {}
        self._lock = threading.Lock()

    def put(self, event: LookaheadEvent) -> None:
        with self._lock:
            self._queued.setdefault(event.program_id, deque(maxlen=MAX_QUEUED)).append(event)

    def take(self, program_id: str) -> list[LookaheadEvent]:
        with self._lock:
            queued = self._queued.pop(program_id, None)
        return list(queued or ())

    def discard(self, program_id: str) -> None:
        with self._lock:
            self._queued.pop(program_id, None)


class ObservingWarmer(DelegatingWarmer):
    """The adapter's warmer, reporting each warm-up to an `EventQueue` once it returned."""

    def __init__(self, inner: Any, events: EventQueue) -> None:
        super().__init__(inner)
        self.events = events

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        tags = current_tags()  # the runtime warms under the lookahead's tags
        started = time.perf_counter()
        spend = spend if spend is not None else WarmupSpend()
        try:
            result = await self.inner.warm(messages, shape=shape, open_last=open_last, spend=spend)
        except Exception:
            self._report(tags, "failed", spend.prefilled_tokens, time.perf_counter() - started)
            raise
        kind = "complete" if result.complete else "partial"
        self._report(tags, kind, result.prefilled_tokens, result.seconds)
        return result

    def _report(self, tags: Any, kind: str, prefilled: int, seconds: float) -> None:
        if tags is None or tags.program_id is None:
            return
        self.events.put(
            LookaheadEvent(
                type="warmup",
                program_id=tags.program_id,
                kind=kind,
                group_id=tags.lookahead_group_id,
                prefilled_tokens=prefilled,
                seconds=seconds,
            )
        )


def otel_span(event: LookaheadEvent) -> None:
    """An OpenTelemetry span for `event` when opentelemetry is installed (a no-op tracer until
    the application configures one)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return
    tracer = trace.get_tracer("lookahead_sdk")
    attributes = {
        f"lookahead.{key}": value
        for key, value in event.as_dict().items()
        if value is not None and key != "type"
    }
    now = time.time_ns()
    seconds = event.waited_s + event.transform_s if event.type == "commit" else event.seconds
    span = tracer.start_span(
        f"lookahead.{event.type}", start_time=now - int(seconds * 1e9), attributes=attributes
    )
    span.end(end_time=now)

"""What the policy decides, as values. The caller (the HTTP proxy, the fleet simulator) executes
them: it sends forwarded requests, keeps held ones waiting, answers rejected ones, and tears down
a program's tool resources on `Teardown`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

HoldReason = Literal[
    "paused",  # the program was paused; its request waits in the global queue
    "queued",  # a new program that does not fit yet
    "no_backend",  # every backend is down
]
RejectReason = Literal[
    "program_paused",  # best-effort lookahead work of a paused program (the SDK falls back)
    "program_pausing",  # best-effort lookahead work of a program marked for pause
    "no_free_slot",  # best-effort lookahead work would need a llama.cpp slot another program holds
    "program_released",  # the program was released or its lease expired while this was held
    "no_backend",  # the hold timed out and no backend is up to force it onto
]
TeardownCause = Literal["release", "lease"]


@dataclass(frozen=True, slots=True)
class Forward:
    """Send request `request_id` to `backend` now."""

    request_id: str
    program_id: str
    backend: str


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep the request waiting at the router; a later `Restore` or `ForceAdmit` forwards it
    (or a `Reject` answers it)."""

    request_id: str
    program_id: str
    reason: HoldReason


@dataclass(frozen=True, slots=True)
class Reject:
    """Answer the request with HTTP `status` without forwarding it."""

    request_id: str
    program_id: str
    reason: RejectReason
    status: int


@dataclass(frozen=True, slots=True)
class Restore:
    """A paused (or new) program is active again on `backend`; `forward` are its held requests
    to send now (none when it was restored while acting)."""

    program_id: str
    backend: str
    origin: str | None
    forward: tuple[Forward, ...]

    @property
    def migrated(self) -> bool:
        return self.origin is not None and self.origin != self.backend


@dataclass(frozen=True, slots=True)
class ForceAdmit:
    """A held request waited past the hold timeout: its program goes to `backend` regardless of
    capacity (counted in `RouterMetrics.forced_admits`)."""

    program_id: str
    backend: str
    held_s: float
    forward: tuple[Forward, ...]


@dataclass(frozen=True, slots=True)
class Pause:
    """The program left `backend`; its KV is left to the engine's LRU. Nothing to send."""

    program_id: str
    backend: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Teardown:
    """The program is gone from the table (released, or its idle lease expired): tear down its
    tool resources, exactly once."""

    program_id: str
    cause: TeardownCause
    idle_s: float


@dataclass(frozen=True, slots=True)
class Requeue:
    """`backend` went down with the program on it: the program waits for a new placement;
    `lost` are its requests that were in flight there (the caller fails them)."""

    program_id: str
    backend: str
    lost: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Ignored:
    """An event about a request or program the table does not know (finished twice, released
    already, lost with its backend): nothing changed."""

    subject: str
    reason: str


Admission = Forward | Hold | Reject
Decision = Forward | Hold | Reject | Restore | ForceAdmit | Pause | Teardown | Requeue | Ignored

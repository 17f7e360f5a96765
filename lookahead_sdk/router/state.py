"""The program table's records (mutable, owned by a policy) and their read-only views."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Phase = Literal["reasoning", "acting"]
Status = Literal["active", "paused", "terminated"]
LookaheadKind = Literal["best_effort", "promoted"]
LOOKAHEAD_KINDS: tuple[LookaheadKind, ...] = ("best_effort", "promoted")


@dataclass(slots=True)
class TrackedRequest:
    request_id: str
    program_id: str
    arrived_s: float
    lookahead: LookaheadKind | None
    # A lookahead branch's own tokens, counted toward its program while it runs.
    extra_tokens: int = 0


@dataclass(slots=True)
class Program:
    program_id: str
    last_seen_s: float
    tokens: int = 0  # main context: last usage.total_tokens, plus a pending request's new tokens
    last_usage_tokens: int = 0
    lookahead_tokens: int = 0
    backend: str | None = None  # None: in the waiting queue
    origin: str | None = None  # where its KV was last resident (may still be cached)
    home: str | None = None  # the only backend it may use, with per-backend queues
    placed_before: bool = False
    in_flight: dict[str, TrackedRequest] = field(default_factory=dict)
    held: dict[str, TrackedRequest] = field(default_factory=dict)  # in arrival order
    acting_since_s: float | None = None
    steps: int = 0
    marked_for_pause: bool = False

    @property
    def status(self) -> Status:
        return "paused" if self.backend is None else "active"

    @property
    def phase(self) -> Phase:
        return "reasoning" if self.in_flight or self.held else "acting"

    @property
    def accounted_tokens(self) -> int:
        return self.tokens + self.lookahead_tokens

    @property
    def oldest_held_s(self) -> float | None:
        for request in self.held.values():
            return request.arrived_s
        return None

    def view(self) -> ProgramView:
        return ProgramView(
            program_id=self.program_id,
            status=self.status,
            phase=self.phase,
            backend=self.backend,
            origin=self.origin,
            tokens=self.accounted_tokens,
            in_flight=tuple(self.in_flight),
            held=tuple(self.held),
            acting_since_s=self.acting_since_s,
            steps=self.steps,
            last_seen_s=self.last_seen_s,
            marked_for_pause=self.marked_for_pause,
        )


@dataclass(slots=True)
class Backend:
    name: str
    capacity_tokens: int
    up: bool = True
    programs: dict[str, None] = field(default_factory=dict)  # active program ids (ordered set)


@dataclass(frozen=True, slots=True)
class ProgramView:
    """One row of `/programs`."""

    program_id: str
    status: Status
    phase: Phase
    backend: str | None
    origin: str | None
    tokens: int
    in_flight: tuple[str, ...]
    held: tuple[str, ...]
    acting_since_s: float | None
    steps: int
    last_seen_s: float
    marked_for_pause: bool

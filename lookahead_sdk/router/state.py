"""The program table's records (mutable, owned by a policy) and their read-only views."""

from __future__ import annotations

import itertools
import math
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
    def has_lookahead(self) -> bool:
        """A lookahead branch of it runs or waits to."""
        requests = itertools.chain(self.in_flight.values(), self.held.values())
        return any(r.lookahead is not None for r in requests)

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


def share_limit(capacity_tokens: int, slots: int | None, share: float) -> float:
    """Tokens under `share` of a backend's capacity. On llama.cpp whole slots, rounded up: a
    context grows inside its own slot, so no headroom is kept for growth, and 0.9 of 2 slots is
    still 2 (rounding down would leave one slot of two idle)."""
    if slots is None:
        return share * capacity_tokens
    return math.ceil(share * slots - 1e-9) * (capacity_tokens // slots)


@dataclass(slots=True)
class Backend:
    name: str
    capacity_tokens: int
    up: bool = True
    programs: dict[str, None] = field(default_factory=dict)  # active program ids (ordered set)
    # llama.cpp splits its KV into `slots` equal parts, one context each; None: one shared pool.
    slots: int | None = None

    @property
    def slot_tokens(self) -> int | None:
        return None if self.slots is None else self.capacity_tokens // self.slots

    def limit(self, share: float) -> float:
        return share_limit(self.capacity_tokens, self.slots, share)

    def footprint(self, program: Program) -> int:
        """Tokens `program` takes here. On a pooled KV (SGLang, vLLM) its tokens; on llama.cpp a
        whole slot for its context however short, and another while a lookahead branch runs
        (the router gives it its own slot), so small programs cannot over-subscribe the slots."""
        slot_tokens = self.slot_tokens
        if slot_tokens is None:
            return program.accounted_tokens
        slots = 1 + program.has_lookahead
        return max(program.accounted_tokens, slots * slot_tokens)


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

"""`RouterCore`: the program table every routing policy shares.

It tracks programs, their requests and the backends, validates every call before changing
anything, keeps each program in exactly one place (on one backend, or in the waiting queue) and
applies the rules no policy may get wrong: a program leaves the reasoning phase whenever its last
request ends (success, error or client disconnect alike), releases are idempotent, an idle lease
removes programs whose client vanished. Policies (`ThunderPolicy`, the baselines) decide where a
request goes through four hooks: `_refusal`, `_route`, `_on_idle` and `_rebalance`.

Pure and single-threaded: no I/O, no clock of its own (every event carries `now_s`). The caller
serialises calls (one asyncio task or one lock), which also makes "pause vs arriving request"
race-free: each event is applied whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from lookahead_sdk.router.decisions import (
    Admission,
    Decision,
    Forward,
    Hold,
    HoldReason,
    Ignored,
    Reject,
    Requeue,
    Teardown,
)
from lookahead_sdk.router.metrics import BackendMetrics, RouterMetrics
from lookahead_sdk.router.state import (
    LOOKAHEAD_KINDS,
    Backend,
    LookaheadKind,
    Program,
    ProgramView,
    TrackedRequest,
)
from lookahead_sdk.router.validation import (
    require_capacity,
    require_id,
    require_time,
    require_tokens,
)


@dataclass(slots=True)
class _Counters:
    terminated: int = 0
    forced_admits: int = 0
    migrations: int = 0
    pauses: int = 0
    restores: int = 0
    preemptions: int = 0
    rejects: int = 0
    lease_expirations: int = 0


class RouterCore:
    name: ClassVar[str] = "core"

    def __init__(self, *, lease_s: float) -> None:
        self._lease_s = lease_s
        self._now = -math.inf
        self._backends: dict[str, Backend] = {}
        self._programs: dict[str, Program] = {}
        self._requests: dict[str, TrackedRequest] = {}
        self._waiting: dict[str, None] = {}  # programs without a backend (ordered set)
        self._counters = _Counters()

    # --- backends ------------------------------------------------------------------------------

    def add_backend(self, name: str, capacity_tokens: int, *, slots: int | None = None) -> None:
        """`slots`: llama.cpp's parallel slots, which split `capacity_tokens` into equal parts
        (a program then takes at least one, see `Backend.footprint`); None for a shared pool."""
        require_id("backend name", name)
        require_capacity(f"capacity_tokens of backend {name!r}", capacity_tokens)
        if slots is not None and (
            isinstance(slots, bool)
            or not isinstance(slots, int)
            or not 0 < slots <= capacity_tokens
        ):
            raise ValueError(
                f"slots of backend {name!r} must be None (a shared KV pool) or an int from 1 to "
                f"its capacity_tokens ({capacity_tokens}), got {slots!r}"
            )
        if name in self._backends:
            raise ValueError(f"backend {name!r} was already added; add each backend once")
        self._backends[name] = Backend(name, capacity_tokens, slots=slots)
        self._on_backend_added(name)

    def mark_down(self, name: str, now_s: float) -> list[Decision]:
        """The backend is unreachable: its programs go back to the waiting queue (never lost);
        their in-flight requests are reported in `Requeue.lost` and forgotten."""
        backend = self._known_backend(name)
        now = require_time(now_s, self._now)
        self._now = now
        if not backend.up:
            return []
        backend.up = False
        decisions: list[Decision] = []
        for program_id in list(backend.programs):
            program = self._programs[program_id]
            lost = tuple(program.in_flight)
            for request in program.in_flight.values():
                program.lookahead_tokens -= request.extra_tokens
                del self._requests[request.request_id]
            program.in_flight.clear()
            self._detach(program)
            program.origin = None  # its KV died with the backend
            if not program.held:
                program.acting_since_s = now
            decisions.append(Requeue(program_id, name, lost))
        for program_id in self._waiting:
            program = self._programs[program_id]
            if program.origin == name:
                program.origin = None
            if program.home == name:
                program.home = None
        decisions += self._rebalance(now, tick=False)
        return decisions

    def mark_up(self, name: str, now_s: float) -> list[Decision]:
        backend = self._known_backend(name)
        now = require_time(now_s, self._now)
        self._now = now
        if backend.up:
            return []
        backend.up = True
        return self._rebalance(now, tick=False)

    # --- events --------------------------------------------------------------------------------

    def request_arrived(
        self,
        program_id: str,
        request_id: str,
        new_tokens: int,
        now_s: float,
        *,
        lookahead: LookaheadKind | None = None,
    ) -> Admission:
        """A request of `program_id` arrived. `new_tokens`: for a main request, the tokens of the
        messages added since the program's last response (the caller counts them; the program's
        tokens become its last usage plus these); for a lookahead branch, the branch's own
        tokens, counted toward its program while it runs."""
        require_id("program_id", program_id)
        require_id("request_id", request_id)
        require_tokens("new_tokens", new_tokens)
        if lookahead is not None and lookahead not in LOOKAHEAD_KINDS:
            raise ValueError(
                f"lookahead must be None or one of {LOOKAHEAD_KINDS}, got {lookahead!r}"
            )
        now = require_time(now_s, self._now)
        if request_id in self._requests:
            raise ValueError(
                f"request_id {request_id!r} is already in flight or held; give every request "
                "its own id"
            )
        self._now = now
        program = self._programs.get(program_id)
        refusal = self._refusal(program, program_id, request_id, lookahead)
        if refusal is not None:
            self._counters.rejects += 1
            return refusal
        if program is None:
            program = Program(program_id, last_seen_s=now)
            self._programs[program_id] = program
            self._waiting[program_id] = None
        request = TrackedRequest(request_id, program_id, now, lookahead)
        if lookahead is None:
            program.tokens = max(program.tokens, program.last_usage_tokens + new_tokens)
        else:
            request.extra_tokens = new_tokens
            program.lookahead_tokens += new_tokens
        program.last_seen_s = now
        program.acting_since_s = None
        self._requests[request_id] = request
        return self._route(program, request, now)

    def request_finished(
        self,
        request_id: str,
        now_s: float,
        *,
        total_tokens: int | None = None,
        ok: bool = True,
    ) -> list[Decision]:
        """A request ended: its response completed (`ok`, with `usage.total_tokens` when the
        backend reported one), failed, or the client disconnected (`ok=False`; a held request
        is dropped without being forwarded). When it was the program's last request, the
        program is acting from now on, whatever the outcome."""
        require_id("request_id", request_id)
        if total_tokens is not None:
            require_tokens("total_tokens", total_tokens)
        if not isinstance(ok, bool):
            raise ValueError(f"ok must be True or False, got {ok!r}")
        now = require_time(now_s, self._now)
        request = self._requests.get(request_id)
        if request is None:
            return [Ignored(request_id, "unknown request (finished, released or lost already)")]
        self._now = now
        program = self._programs[request.program_id]
        del self._requests[request_id]
        program.lookahead_tokens -= request.extra_tokens
        program.last_seen_s = now
        if program.held.pop(request_id, None) is None:
            del program.in_flight[request_id]
            if request.lookahead is None and ok:
                program.steps += 1
                if total_tokens is not None:
                    program.tokens = total_tokens
                    program.last_usage_tokens = total_tokens
                    self._on_served(program, total_tokens)
        decisions: list[Decision] = []
        if not program.in_flight and not program.held:
            program.acting_since_s = now
            decisions += self._on_idle(program)
        decisions += self._rebalance(now, tick=False)
        return decisions

    def release(self, program_id: str, now_s: float) -> list[Decision]:
        """The program ended: free its tokens; `Teardown` comes exactly once (a repeated or
        unknown release returns nothing). Its held requests are rejected."""
        require_id("program_id", program_id)
        now = require_time(now_s, self._now)
        program = self._programs.get(program_id)
        if program is None:
            return []
        self._now = now
        decisions: list[Decision] = [Teardown(program_id, "release", now - program.last_seen_s)]
        decisions += self._remove(program)
        decisions += self._rebalance(now, tick=False)
        return decisions

    def tick(self, now_s: float) -> list[Decision]:
        """Periodic work (every `tick_s`): idle leases, then the policy's own (restore, hold
        timeouts, pause)."""
        now = require_time(now_s, self._now)
        self._now = now
        decisions: list[Decision] = []
        for program in list(self._programs.values()):
            idle_s = now - program.last_seen_s
            if not program.in_flight and not program.held and idle_s >= self._lease_s:
                decisions.append(Teardown(program.program_id, "lease", idle_s))
                decisions += self._remove(program)
                self._counters.lease_expirations += 1
        decisions += self._rebalance(now, tick=True)
        return decisions

    # --- queries -------------------------------------------------------------------------------

    @property
    def backend_names(self) -> tuple[str, ...]:
        return tuple(self._backends)

    def program(self, program_id: str) -> ProgramView | None:
        program = self._programs.get(program_id)
        return None if program is None else program.view()

    def programs(self) -> list[ProgramView]:
        return [program.view() for program in self._programs.values()]

    def waiting(self) -> tuple[str, ...]:
        return tuple(self._waiting)

    def restore_order(self, now_s: float) -> tuple[str, ...]:
        """The waiting programs in the order the policy would restore them at `now_s` (no later
        than the next event): what `queue_position` and `restoring_soon` report."""
        now = require_time(now_s, self._now)
        return tuple(p.program_id for p in self._restore_order(now))

    def context_tokens(self, program_id: str) -> int | None:
        """The program's main context (last usage plus a pending request's new tokens), without
        its lookahead branches' tokens; None for an unknown program."""
        program = self._programs.get(program_id)
        return None if program is None else program.tokens

    def accounted_tokens(self, backend: str) -> int:
        """Tokens the programs active on `backend` take there (no decay; `Backend.footprint`)."""
        return self._load(self._known_backend(backend))

    def capacity_tokens(self, backend: str) -> int:
        return self._known_backend(backend).capacity_tokens

    def is_up(self, backend: str) -> bool:
        return self._known_backend(backend).up

    def metrics(self) -> RouterMetrics:
        programs = self._programs.values()
        reasoning = sum(1 for p in programs if p.in_flight or p.held)
        counters = self._counters
        return RouterMetrics(
            policy=self.name,
            programs=len(self._programs),
            active=len(self._programs) - len(self._waiting),
            paused=len(self._waiting),
            reasoning=reasoning,
            acting=len(self._programs) - reasoning,
            marked_for_pause=sum(1 for p in programs if p.marked_for_pause),
            held_requests=sum(len(p.held) for p in programs),
            in_flight_requests=sum(len(p.in_flight) for p in programs),
            terminated=counters.terminated,
            forced_admits=counters.forced_admits,
            migrations=counters.migrations,
            pauses=counters.pauses,
            restores=counters.restores,
            preemptions=counters.preemptions,
            rejects=counters.rejects,
            lease_expirations=counters.lease_expirations,
            backends=tuple(
                BackendMetrics(
                    b.name, b.up, b.capacity_tokens, self.accounted_tokens(b.name), len(b.programs)
                )
                for b in self._backends.values()
            ),
        )

    # --- policy hooks --------------------------------------------------------------------------

    def _refusal(
        self,
        program: Program | None,
        program_id: str,
        request_id: str,
        lookahead: LookaheadKind | None,
    ) -> Reject | None:
        """Decided before anything is recorded: a refused request leaves no trace."""
        return None

    def _route(self, program: Program, request: TrackedRequest, now: float) -> Forward | Hold:
        raise NotImplementedError

    def _on_idle(self, program: Program) -> list[Decision]:
        """The program's last request just ended (it is acting now)."""
        return []

    def _on_served(self, program: Program, total_tokens: int) -> None:
        """A main request of `program` completed on its backend with `usage.total_tokens`."""
        return None

    def _rebalance(self, now: float, *, tick: bool) -> list[Decision]:
        """After every usage, release and backend event, and on each tick."""
        return []

    def _on_backend_added(self, name: str) -> None:
        return None

    def _restore_order(self, now: float) -> list[Program]:
        """Waiting programs, first to be restored first (a policy that restores has its own)."""
        return [self._programs[p] for p in self._waiting]

    # --- helpers for policies ------------------------------------------------------------------

    def _up_backends(self) -> list[Backend]:
        return [b for b in self._backends.values() if b.up]

    def _load(self, backend: Backend) -> int:
        return sum(backend.footprint(self._programs[p]) for p in backend.programs)

    def _least_loaded(self) -> str:
        return min(
            self._up_backends(), key=lambda b: (self._load(b) / b.capacity_tokens, b.name)
        ).name

    def _footprint(self, program: Program, backend: str) -> int:
        return self._backends[backend].footprint(program)

    def _forward(self, program: Program, request: TrackedRequest) -> Forward:
        assert program.backend is not None, "only an active program's requests are forwarded"
        program.held.pop(request.request_id, None)
        program.in_flight[request.request_id] = request
        return Forward(request.request_id, program.program_id, program.backend)

    def _hold(self, program: Program, request: TrackedRequest, reason: HoldReason) -> Hold:
        program.held[request.request_id] = request
        return Hold(request.request_id, program.program_id, reason)

    def _attach(self, program: Program, backend: str) -> None:
        if program.backend is not None:
            self._detach(program)
        del self._waiting[program.program_id]
        self._backends[backend].programs[program.program_id] = None
        program.backend = backend
        program.origin = backend
        program.placed_before = True

    def _detach(self, program: Program) -> None:
        if program.backend is None:
            return
        del self._backends[program.backend].programs[program.program_id]
        program.backend = None
        program.marked_for_pause = False
        self._waiting[program.program_id] = None

    def _remove(self, program: Program) -> list[Decision]:
        """Take the program out of the table; its held requests are answered, its in-flight
        ones forgotten (their `request_finished` is then ignored)."""
        decisions: list[Decision] = []
        for request in program.held.values():
            decisions.append(
                Reject(request.request_id, program.program_id, "program_released", 409)
            )
            self._counters.rejects += 1
        for request_id in (*program.held, *program.in_flight):
            del self._requests[request_id]
        if program.backend is not None:
            del self._backends[program.backend].programs[program.program_id]
        else:
            del self._waiting[program.program_id]
        del self._programs[program.program_id]
        self._counters.terminated += 1
        return decisions

    def _known_backend(self, name: str) -> Backend:
        backend = self._backends.get(name)
        if backend is None:
            raise ValueError(
                f"unknown backend {name!r}; add it with add_backend first (known: "
                f"{sorted(self._backends)})"
            )
        return backend

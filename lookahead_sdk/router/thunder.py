"""`ThunderPolicy`: program-aware pause and restore across backends (ThunderAgent,
arXiv 2602.13692; REFERENCE.md section 2), with the upstream bugs designed out.

On every tick and after every usage, release or backend event: restore, then pause.

- Restore (`restore.py`): one global waiting queue, aged requests first, then reasoning programs
  with a held request (smallest first), new programs (first come first served), acting programs
  (smallest first); placed largest first, on the origin backend when it fits, else on the
  backend with the most room. A waiting program takes free room only, except a request held
  past `aging_s`: it may also count acting programs' tokens as decayed (half-life
  `decay_half_life_s`), and the pause pass then pauses them for it. That bounds every wait at
  about `aging_s` while the fleet can afford it; `swap_budget` caps the re-prefill such
  preemption causes, so a deeper overload lengthens waits instead of collapsing throughput.
- Pause (`pause.py`): a backend over `pause_at` x capacity pauses acting programs (the one idle
  longest first, as the engine's LRU evicts) and marks reasoning ones down to `pause_to`; a
  marked program pauses when its last request ends.
- A request held past `hold_timeout_s` is force-admitted onto the least-loaded backend and
  counted. An arriving request of a paused or new program is forwarded at once only when it fits
  and no other request is held (it would otherwise jump the queue); else the next restore pass
  (the next usage event or tick) takes it in queue order.
- Lookahead-aware: a lookahead request runs where its program lives and its tokens count toward
  the program; best-effort lookahead work of a paused (or pausing) program is refused with 409,
  a promoted lookahead is held and restored with its program.

Why preemption waits for the aging bound: upstream lets every waiting request count decayed
acting tokens, which with a 1 s half-life makes acting programs nearly free; restore then admits
more than fits and the pause pass evicts programs about to come back. In the fleet simulation
that made ~90% of all prefill re-prefill at 2x overload, and steps/min fell to 0.39-0.42 of the
peak already at 1.33x.
"""

from __future__ import annotations

from collections.abc import Sequence

from lookahead_sdk.router.config import ThunderConfig
from lookahead_sdk.router.decisions import (
    Decision,
    ForceAdmit,
    Forward,
    Hold,
    Pause,
    Reject,
    Restore,
)
from lookahead_sdk.router.pause import plan_pauses
from lookahead_sdk.router.restore import (
    AGED,
    HELD_NEW,
    RestoreRank,
    Room,
    choose_backend,
    plan_restores,
    restore_rank,
)
from lookahead_sdk.router.state import LookaheadKind, Program, TrackedRequest
from lookahead_sdk.router.table import RouterCore

# Preemption credit a backend starts with and may bank, as a fraction of its capacity: enough
# for a burst of aged requests, bounded so that a quiet spell cannot pile up a burst of
# re-prefill later.
SWAP_CREDIT_CAP = 0.3


class ThunderPolicy(RouterCore):
    name = "thunder"

    def __init__(self, config: ThunderConfig | None = None) -> None:
        config = ThunderConfig() if config is None else config
        if not isinstance(config, ThunderConfig):
            raise TypeError(f"config must be a ThunderConfig, got {type(config).__name__}")
        self.config = config
        self._swap_credit: dict[str, float] = {}  # per backend, tokens preemption may re-admit
        super().__init__(lease_s=config.lease_s)

    # --- hooks ---------------------------------------------------------------------------------

    def _refusal(
        self,
        program: Program | None,
        program_id: str,
        request_id: str,
        lookahead: LookaheadKind | None,
    ) -> Reject | None:
        if lookahead != "best_effort":
            return None
        if program is None or program.backend is None:
            return Reject(request_id, program_id, "program_paused", 409)
        if program.marked_for_pause:
            return Reject(request_id, program_id, "program_pausing", 409)
        backend = self._backends[program.backend]
        slot_tokens = backend.slot_tokens
        if (
            slot_tokens is not None
            and not program.has_lookahead
            and self._load(backend) + slot_tokens > backend.limit(self.config.pause_at)
        ):
            # Its branch would take a slot that another program's context holds: best-effort
            # work never pauses anyone (the SDK counts it as a failed warm-up).
            return Reject(request_id, program_id, "no_free_slot", 409)
        return None

    def _route(self, program: Program, request: TrackedRequest, now: float) -> Forward | Hold:
        if program.backend is not None:
            return self._forward(program, request)
        if not self._up_backends():
            return self._hold(program, request, "no_backend")
        hold = self._hold(program, request, "paused" if program.placed_before else "queued")
        self._assign_homes([program])
        if self._others_held(program):
            return hold
        rooms = self._rooms(now)
        backend = choose_backend(
            program, self._candidates(program), rooms, footprint=self._footprint
        )
        if backend is None:
            return hold
        restore = self._restore(program, backend)
        return restore.forward[0]

    def _on_idle(self, program: Program) -> list[Decision]:
        if not program.marked_for_pause or program.backend is None:
            return []
        return [self._pause(program)]

    def _on_backend_added(self, name: str) -> None:
        self._swap_credit[name] = self._credit_cap(name)

    def _on_served(self, program: Program, total_tokens: int) -> None:
        backend = program.backend
        if backend is None or self.config.swap_budget == 0:
            return
        credit = self._swap_credit[backend] + self.config.swap_budget * total_tokens
        self._swap_credit[backend] = min(credit, self._credit_cap(backend))

    def _rebalance(self, now: float, *, tick: bool) -> list[Decision]:
        if not self._up_backends():
            return self._reject_timed_out(now) if tick else []
        self._assign_homes([self._programs[p] for p in self._waiting])
        decisions: list[Decision] = list(self._restore_pass(now))
        if tick:
            decisions += self._force_timed_out(now)
        decisions += self._pause_pass()
        return decisions

    # --- restore -------------------------------------------------------------------------------

    def _restorable(self) -> list[Program]:
        """Waiting programs a restore pass may take: those with a held request, and paused ones
        (a new program whose request was dropped waits for its next request)."""
        return [
            self._programs[p]
            for p in self._waiting
            if self._programs[p].held or self._programs[p].placed_before
        ]

    def _ranked(self, programs: list[Program], now: float) -> list[tuple[RestoreRank, Program]]:
        by_size = self.config.new_program_order == "smallest"
        aging_s = self.config.aging_s
        return sorted(
            (restore_rank(p, now, aging_s, new_by_size=by_size), p) for p in programs
        )  # ranks are unique (they end with the program id): programs are never compared

    def _restore_order(self, now: float) -> list[Program]:
        restorable = self._restorable()
        ranked = [p for _, p in self._ranked(restorable, now)]
        ids = {p.program_id for p in restorable}
        return ranked + [self._programs[p] for p in self._waiting if p not in ids]

    def _restore_pass(self, now: float) -> list[Restore]:
        waiting = self._restorable()
        if not waiting:
            return []
        rooms = self._rooms(now)
        if all(
            room.decayed < min(self._footprint(p, name) for p in waiting)
            for name, room in rooms.items()
        ):
            return []  # nothing fits anywhere (the common case in an overloaded fleet)
        by_size = self.config.new_program_order == "smallest"
        ranked = self._ranked(waiting, now)
        groups = {p.program_id: rank[0] for rank, p in ranked}
        share = self.config.restore_to

        def blocks(program: Program) -> bool:
            # Only one that would fit once room frees may hold the others back; a program larger
            # than any backend's restore share waits for its hold timeout instead.
            group = groups[program.program_id]
            if not (group == AGED or (group == HELD_NEW and not by_size)):
                return False
            return any(
                self._footprint(program, name) <= self._backends[name].limit(share)
                for name in self._candidates(program)
            )

        def may_preempt(program: Program) -> bool:
            return groups[program.program_id] == AGED

        plan = plan_restores(
            [p for _, p in ranked], rooms, self._candidates, blocks, may_preempt,
            self._swap_credit, self._footprint,
        )  # fmt: skip
        free = {name: room.raw for name, room in rooms.items()}
        restores: list[Restore] = []
        for program, backend in plan:
            need = self._footprint(program, backend)
            self._charge(backend, need - max(free[backend], 0.0))
            free[backend] -= need
            restores.append(self._restore(program, backend))
        return restores

    def _charge(self, backend: str, preempted_tokens: float) -> None:
        """A restore that did not fit in free room spends swap credit (its tokens beyond it)."""
        if preempted_tokens > 0:
            self._swap_credit[backend] -= preempted_tokens
            self._counters.preemptions += 1

    def _credit_cap(self, backend: str) -> float:
        if self.config.swap_budget == 0:
            return 0.0
        return SWAP_CREDIT_CAP * self._backends[backend].capacity_tokens

    def _rooms(self, now: float) -> dict[str, Room]:
        half_life = self.config.decay_half_life_s
        share = self.config.restore_to
        rooms: dict[str, Room] = {}
        for backend in self._up_backends():
            raw = decayed = 0.0
            for program_id in backend.programs:
                program = self._programs[program_id]
                tokens = backend.footprint(program)
                raw += tokens
                since = program.acting_since_s
                if half_life > 0 and since is not None and not program.in_flight:
                    decayed += tokens * 2.0 ** (-(now - since) / half_life)
                else:
                    decayed += tokens
            limit = backend.limit(share)
            rooms[backend.name] = Room(limit - decayed, limit - raw)
        return rooms

    def _candidates(self, program: Program) -> Sequence[str]:
        if self.config.global_queue:
            return [b.name for b in self._up_backends()]
        home = program.home
        return [home] if home is not None and self._backends[home].up else []

    def _assign_homes(self, programs: list[Program]) -> None:
        """Per-backend queues (the ablation): a program joins the shortest queue once, counting
        the tokens active on a backend and those already queued for it; it changes queue only
        when that backend goes down."""
        if self.config.global_queue:
            return
        up = self._up_backends()
        load = {b.name: float(self._load(b)) for b in up}
        for program_id in self._waiting:
            queued = self._programs[program_id]
            if queued.home in load:
                load[queued.home] += self._footprint(queued, queued.home)
        capacity = {b.name: b.capacity_tokens for b in up}
        for program in programs:
            if program.home is None or program.home not in load:
                program.home = min(load, key=lambda name: (load[name] / capacity[name], name))
                load[program.home] += self._footprint(program, program.home)

    def _others_held(self, program: Program) -> bool:
        if len(program.held) > 1:
            return True
        return any(self._programs[p].held for p in self._waiting if p != program.program_id)

    def _restore(self, program: Program, backend: str) -> Restore:
        origin = program.origin
        self._counters.restores += 1
        return Restore(program.program_id, backend, origin, self._place(program, backend))

    def _place(self, program: Program, backend: str) -> tuple[Forward, ...]:
        """Make a waiting program active on `backend`; its held requests go now."""
        if program.origin is not None and program.origin != backend:
            self._counters.migrations += 1
        self._attach(program, backend)
        return tuple(self._forward(program, r) for r in list(program.held.values()))

    # --- hold timeout --------------------------------------------------------------------------

    def _timed_out(self, now: float) -> list[tuple[Program, float]]:
        timeout = self.config.hold_timeout_s
        expired: list[tuple[Program, float]] = []
        for program_id in self._waiting:
            program = self._programs[program_id]
            oldest = program.oldest_held_s
            if oldest is not None and now - oldest >= timeout:
                expired.append((program, now - oldest))
        return expired

    def _force_timed_out(self, now: float) -> list[ForceAdmit]:
        decisions: list[ForceAdmit] = []
        for program, held_s in self._timed_out(now):
            if self.config.global_queue:
                backend = self._least_loaded()
            else:
                (backend,) = self._candidates(program)  # its home (assigned on every pass)
            self._counters.forced_admits += 1
            forward = self._place(program, backend)
            decisions.append(ForceAdmit(program.program_id, backend, held_s, forward))
        return decisions

    def _reject_timed_out(self, now: float) -> list[Decision]:
        decisions: list[Decision] = []
        for program, _ in self._timed_out(now):
            for request in list(program.held.values()):
                del program.held[request.request_id]
                del self._requests[request.request_id]
                program.lookahead_tokens -= request.extra_tokens
                decisions.append(Reject(request.request_id, program.program_id, "no_backend", 503))
                self._counters.rejects += 1
            program.acting_since_s = now
        return decisions

    # --- pause ---------------------------------------------------------------------------------

    def _pause_pass(self) -> list[Pause]:
        decisions: list[Pause] = []
        config = self.config
        for backend in self._up_backends():
            programs = [self._programs[p] for p in backend.programs]
            for program in programs:
                program.marked_for_pause = False  # re-planned from scratch on every pass
            plan = plan_pauses(
                programs, backend, config.pause_at, config.pause_to, config.pause_order
            )
            decisions += [self._pause(program) for program in plan.pause_now]
            for program in plan.mark:
                program.marked_for_pause = True
        return decisions

    def _pause(self, program: Program) -> Pause:
        backend = program.backend
        assert backend is not None
        freed = self._footprint(program, backend)
        self._detach(program)
        self._counters.pauses += 1
        return Pause(program.program_id, backend, freed)

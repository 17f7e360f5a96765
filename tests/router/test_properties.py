"""Random event sequences against every policy: the table's invariants hold after each event,
nothing is forwarded twice, and every held request is resolved once capacity frees."""

import math
from collections import Counter
from collections.abc import Callable

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from lookahead_sdk.router import (
    BaselineConfig,
    Decision,
    ForceAdmit,
    Forward,
    Hold,
    Ignored,
    ProgramView,
    Reject,
    Requeue,
    Restore,
    RouterCore,
    Teardown,
    ThunderConfig,
    ThunderPolicy,
    make_policy,
)

HOLD_TIMEOUT_S = 20.0
LEASE_S = 60.0


def _thunder(**overrides: object) -> Callable[[], RouterCore]:
    base: dict[str, object] = {
        "aging_s": 5.0,
        "hold_timeout_s": HOLD_TIMEOUT_S,
        "lease_s": LEASE_S,
    }
    return lambda: ThunderPolicy(ThunderConfig(**{**base, **overrides}))  # type: ignore[arg-type]


POLICIES: dict[str, Callable[[], RouterCore]] = {
    "thunder": _thunder(),
    "thunder-no-decay": _thunder(decay_half_life_s=0.0),
    "thunder-no-queue": _thunder(global_queue=False),
    "thunder-smallest-new": _thunder(new_program_order="smallest"),
    "thunder-tight": _thunder(pause_at=0.8, pause_to=0.5, restore_to=0.6),
    "thunder-eager-preempt": _thunder(aging_s=0.5, swap_budget=5.0),
    "thunder-no-preempt": _thunder(swap_budget=0.0),
    "thunder-smallest-pause": _thunder(pause_order="smallest"),
    "round-robin": lambda: make_policy("round-robin", baseline=BaselineConfig(lease_s=LEASE_S)),
    "session": lambda: make_policy("session", baseline=BaselineConfig(lease_s=LEASE_S)),
    "least-loaded": lambda: make_policy("least-loaded", baseline=BaselineConfig(lease_s=LEASE_S)),
}
BACKENDS = (("a", 1500), ("b", 1000), ("c", 2500))
LLAMACPP_SLOTS = 3  # backend "a" as a llama.cpp server: three slots of 500 tokens
PROGRAMS = tuple(f"p{i}" for i in range(6))


class RouterMachine(RuleBasedStateMachine):
    @initialize(
        kind=st.sampled_from(sorted(POLICIES)), backends=st.integers(1, 3), slotted=st.booleans()
    )
    def setup(self, kind: str, backends: int, slotted: bool) -> None:
        self.policy = POLICIES[kind]()
        self.thunder = isinstance(self.policy, ThunderPolicy)
        self.backends = BACKENDS[:backends]
        self.slots = {"a": LLAMACPP_SLOTS} if slotted else {}
        for name, capacity in self.backends:
            self.policy.add_backend(name, capacity, slots=self.slots.get(name))
        self.now = 0.0
        self.counter = 0
        self.ever_forwarded: set[str] = set()
        self.held: dict[str, str] = {}  # request -> program, as the caller sees it
        self.in_flight: dict[str, str] = {}
        self.released: set[str] = set()
        self.lookaheads: set[str] = set()  # requests that are lookahead branches

    # --- executing decisions like a caller -----------------------------------------------------

    def apply(self, decisions: list[Decision], arriving: tuple[str, str] | None = None) -> None:
        for decision in decisions:
            if isinstance(decision, Forward):
                self.forward(decision)
            elif isinstance(decision, Restore | ForceAdmit):
                for forward in decision.forward:
                    assert (forward.program_id, forward.backend) == (
                        decision.program_id,
                        decision.backend,
                    )
                    self.forward(forward)
            elif isinstance(decision, Hold):
                assert self.thunder, "baselines never hold"
                assert arriving is not None and decision.request_id == arriving[0]
                self.held[decision.request_id] = decision.program_id
            elif isinstance(decision, Reject):
                is_arrival = arriving is not None and decision.request_id == arriving[0]
                assert is_arrival or self.held.pop(decision.request_id) == decision.program_id
            elif isinstance(decision, Requeue):
                for request_id in decision.lost:
                    assert self.in_flight.pop(request_id) == decision.program_id
            elif isinstance(decision, Teardown):
                self.released.add(decision.program_id)
                for request_id, program_id in list(self.in_flight.items()):
                    if program_id == decision.program_id:
                        del self.in_flight[request_id]  # forgotten by the table

    def forward(self, forward: Forward) -> None:
        assert forward.request_id not in self.ever_forwarded, "forwarded twice"
        self.ever_forwarded.add(forward.request_id)
        self.held.pop(forward.request_id, None)
        self.in_flight[forward.request_id] = forward.program_id

    def advance(self, dt: float) -> float:
        self.now += dt
        return self.now

    # --- events --------------------------------------------------------------------------------

    @rule(
        program=st.sampled_from(PROGRAMS),
        tokens=st.integers(0, 900),
        lookahead=st.sampled_from([None, None, None, "best_effort", "promoted"]),
        dt=st.floats(0, 3),
    )
    def arrive(self, program: str, tokens: int, lookahead: str | None, dt: float) -> None:
        request_id = f"r{self.counter}"
        self.counter += 1
        self.released.discard(program)
        if lookahead is not None:
            self.lookaheads.add(request_id)
        decision = self.policy.request_arrived(
            program,
            request_id,
            tokens,
            self.advance(dt),
            lookahead=lookahead,  # type: ignore[arg-type]
        )
        self.apply([decision], arriving=(request_id, program))

    @precondition(lambda self: bool(self.in_flight or self.held))
    @rule(
        data=st.data(),
        outcome=st.sampled_from(["ok", "ok", "error", "disconnect"]),
        growth=st.integers(0, 600),
        dt=st.floats(0, 3),
    )
    def finish(self, data: st.DataObject, outcome: str, growth: int, dt: float) -> None:
        request_id = data.draw(st.sampled_from(sorted(self.in_flight) + sorted(self.held)))
        program = self.in_flight.pop(request_id, None) or self.held.pop(request_id)
        view = self.policy.program(program)
        assert view is not None
        total = view.tokens + growth if outcome == "ok" else None
        decisions = self.policy.request_finished(
            request_id, self.advance(dt), total_tokens=total, ok=outcome == "ok"
        )
        self.apply(decisions)

    @rule(program=st.sampled_from(PROGRAMS), dt=st.floats(0, 3))
    def release(self, program: str, dt: float) -> None:
        existed = self.policy.program(program) is not None
        decisions = self.policy.release(program, self.advance(dt))
        assert existed == any(isinstance(d, Teardown) for d in decisions)
        self.apply(decisions)
        assert self.policy.program(program) is None
        assert program not in self.held.values()

    @rule(dt=st.floats(0.1, 30))
    def tick(self, dt: float) -> None:
        self.apply(self.policy.tick(self.advance(dt)))
        if self.thunder:
            self.check_thresholds()

    @rule(index=st.integers(0, 2), up=st.booleans(), dt=st.floats(0, 3))
    def flip_backend(self, index: int, up: bool, dt: float) -> None:
        name = self.backends[index % len(self.backends)][0]
        now = self.advance(dt)
        self.apply(self.policy.mark_up(name, now) if up else self.policy.mark_down(name, now))

    @rule()
    def unknown_request_finishes(self) -> None:
        before = (self.policy.programs(), self.policy.metrics())
        decisions = self.policy.request_finished("never-seen", self.now)
        assert len(decisions) == 1 and isinstance(decisions[0], Ignored)
        assert (self.policy.programs(), self.policy.metrics()) == before

    # --- invariants ----------------------------------------------------------------------------

    def footprint(self, view: ProgramView, backend: str) -> int:
        """What the program takes on `backend`, worked out here from what the caller saw: its
        tokens, and on the llama.cpp backend no less than a slot (two with a lookahead)."""
        slots = self.slots.get(backend)
        if slots is None:
            return view.tokens
        capacity = dict(self.backends)[backend]
        branch = any(r in self.lookaheads for r in (*view.in_flight, *view.held))
        return max(view.tokens, (1 + branch) * (capacity // slots))

    def check_thresholds(self) -> None:
        """After a tick every backend is at or under `pause_at` x capacity, counting the tokens
        of programs marked for pause as already gone; on a llama.cpp backend (pause_at <= 1)
        that means no more contexts than slots."""
        config = self.policy.config  # type: ignore[attr-defined]
        for name, capacity in self.backends:
            if not self.policy.is_up(name):
                continue
            staying = [
                v for v in self.policy.programs() if v.backend == name and not v.marked_for_pause
            ]
            if name not in self.slots:
                assert sum(v.tokens for v in staying) <= config.pause_at * capacity + 1e-6
                continue
            # Whole slots: pause_at of them, rounded up (a context grows inside its own slot).
            held_slots = sum(
                1 + any(r in self.lookaheads for r in (*v.in_flight, *v.held)) for v in staying
            )
            assert held_slots <= math.ceil(config.pause_at * self.slots[name] - 1e-9)
            assert held_slots <= self.slots[name]

    @invariant()
    def each_program_is_in_exactly_one_place(self) -> None:
        views = {v.program_id: v for v in self.policy.programs()}
        placements = Counter(
            program_id
            for name, _ in self.backends
            for program_id in self.policy._backends[name].programs  # type: ignore[attr-defined]
        )
        waiting = set(self.policy.waiting())
        assert all(count == 1 for count in placements.values())
        assert not waiting & set(placements)
        assert waiting | set(placements) == set(views)
        for program_id, view in views.items():
            assert (view.status == "active") == (program_id in placements)
            assert (view.backend is None) == (program_id in waiting)
        for program_id in self.released:
            assert program_id not in views

    @invariant()
    def requests_match_what_the_caller_saw(self) -> None:
        for view in self.policy.programs():
            mine_held = {r for r, p in self.held.items() if p == view.program_id}
            mine_in_flight = {r for r, p in self.in_flight.items() if p == view.program_id}
            assert set(view.held) == mine_held
            assert set(view.in_flight) == mine_in_flight
            assert (view.phase == "reasoning") == bool(mine_held or mine_in_flight)
            if view.held:
                assert view.status == "paused"
            if view.phase == "acting":
                assert view.acting_since_s is not None
        metrics = self.policy.metrics()
        assert metrics.held_requests == len(self.held)
        assert metrics.in_flight_requests == len(self.in_flight)

    @invariant()
    def backends_account_exactly_their_programs(self) -> None:
        for name, _ in self.backends:
            on_it = [v for v in self.policy.programs() if v.backend == name]
            assert self.policy.accounted_tokens(name) == sum(self.footprint(v, name) for v in on_it)
            assert all(v.tokens >= 0 for v in on_it)

    def teardown(self) -> None:
        if not hasattr(self, "policy"):
            return
        for name, _ in self.backends:
            self.apply(self.policy.mark_up(name, self.advance(0.0)))
        # Replies come back, ticks continue: every held request gets forwarded or refused.
        for _ in range(10):
            for request_id in sorted(self.in_flight):
                del self.in_flight[request_id]
                self.apply(self.policy.request_finished(request_id, self.advance(0.5), ok=True))
            self.apply(self.policy.tick(self.advance(HOLD_TIMEOUT_S + 1)))
            if not self.held and not self.in_flight:
                break
        assert self.held == {}
        # And with clients gone quiet, the lease empties the table.
        self.apply(self.policy.tick(self.advance(LEASE_S + 1)))
        assert self.policy.programs() == []
        assert self.policy.waiting() == ()
        assert all(self.policy.accounted_tokens(name) == 0 for name, _ in self.backends)


RouterMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRouterProperties = RouterMachine.TestCase

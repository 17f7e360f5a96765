"""The fleet simulation: closed-loop agent programs -> a routing policy (the real policy core,
unchanged) -> N simulated engines, in virtual time, deterministic for a seed.

The driver plays the part the HTTP proxy plays in production: it feeds the policy arrivals,
usage and releases, runs its ticks, and executes its decisions (forward a request to an engine,
keep a held one waiting, forward held ones on restore or force-admit).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from dataclasses import dataclass, field

from lookahead_sdk.router.decisions import (
    Decision,
    ForceAdmit,
    Forward,
    Hold,
    Reject,
    Restore,
)
from lookahead_sdk.router.fleet_sim.engine import EngineRequest, EngineStats, SimEngine
from lookahead_sdk.router.fleet_sim.workload import ProgramSpec, WorkloadConfig, sample_program
from lookahead_sdk.router.interface import RouterPolicy
from lookahead_sdk.scheduling import LatencyModel, load_profile


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """`programs` closed-loop slots (a finished program is replaced by a new one when `refill`)
    on `backends` engines of `kv_tokens_per_backend`. Measured over [`warmup_s`, `duration_s`].
    `stationary_start`: each slot starts inside a program (length-biased, at a random step) so
    the fleet starts near its steady state; otherwise every program starts at step 0, first
    requests spread uniformly over `arrival_spread_s`."""

    programs: int
    kv_tokens_per_backend: int
    backends: int = 2
    profile: str = "h200-qwen3-8b"
    duration_s: float = 600.0
    warmup_s: float = 120.0
    seed: int = 0
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    tick_s: float = 1.0
    chunk_tokens: int = 8192
    max_macro_s: float = 0.1
    stationary_start: bool = True
    arrival_spread_s: float = 5.0
    refill: bool = True

    def __post_init__(self) -> None:
        if self.programs < 1 or self.backends < 1 or self.kv_tokens_per_backend < 1:
            raise ValueError(
                "FleetConfig.programs, backends and kv_tokens_per_backend must be >= 1"
            )
        if not 0 <= self.warmup_s < self.duration_s:
            raise ValueError("FleetConfig needs 0 <= warmup_s < duration_s")
        if self.tick_s <= 0 or self.arrival_spread_s < 0:
            raise ValueError("FleetConfig.tick_s must be > 0 and arrival_spread_s >= 0")


@dataclass(frozen=True, slots=True)
class FirstResponse:
    program_id: str
    initial: bool  # one of the programs the run started with (not a refill)
    prompt_tokens: int
    arrived_s: float
    responded_s: float


@dataclass(frozen=True, slots=True)
class FleetResult:
    policy: str
    backends: int
    steps: int  # replies completed inside the window
    window_s: float
    step_latency_s: tuple[float, ...]  # request arrival at the router -> reply complete
    hold_s: tuple[float, ...]  # per request forwarded inside the window (0 when not held), and
    # per request still held at the end (its wait so far)
    forced_admits: int
    migrations: int
    pauses: int
    restores: int
    preemptions: int  # restores that paused acting programs to make room (thunder only)
    engine: EngineStats  # summed over engines, inside the window
    first_responses: tuple[FirstResponse, ...]
    programs_completed: int
    end_held_requests: int

    @property
    def steps_per_min(self) -> float:
        return self.steps * 60.0 / self.window_s


@dataclass(slots=True)
class _Slot:
    index: int
    rng: random.Random  # the slot's own stream: every arm runs the same programs
    spec: ProgramSpec
    program_id: str
    generation: int  # programs this slot ran before this one
    step: int
    last_total: int = 0  # tokens after the program's last reply (0: none in this simulation)


@dataclass(slots=True)
class _Pending:
    slot: _Slot
    step: int
    arrived_s: float
    prompt_tokens: int
    fresh_tokens: int
    forwarded_s: float | None = None


_ARRIVE, _ENGINE, _TICK = range(3)
_FIELDS = tuple(f.name for f in dataclasses.fields(EngineStats))


class FleetSimulation:
    def __init__(self, policy: RouterPolicy, config: FleetConfig) -> None:
        self.policy = policy
        self.config = config
        model = LatencyModel(load_profile(config.profile))
        self._engines = {
            f"b{index}": SimEngine(
                f"b{index}",
                config.kv_tokens_per_backend,
                model,
                chunk_tokens=config.chunk_tokens,
                max_macro_s=config.max_macro_s,
            )
            for index in range(config.backends)
        }
        for name in self._engines:
            policy.add_backend(name, config.kv_tokens_per_backend)
        self._events: list[tuple[float, int, int, object]] = []
        self._sequence = itertools.count()
        self._pending: dict[str, _Pending] = {}
        self._now = 0.0
        self._steps = 0
        self._step_latency: list[float] = []
        self._holds: list[float] = []
        self._first: dict[str, FirstResponse] = {}
        self._programs_completed = 0
        self._window_start: dict[str, EngineStats] | None = None
        self._policy_start = policy.metrics()

    def run(self) -> FleetResult:
        config = self.config
        for index in range(config.programs):
            rng = random.Random(config.seed * 1_000_003 + index)
            slot = self._new_slot(index, 0, rng, stationary=config.stationary_start)
            self._push(rng.uniform(0, config.arrival_spread_s), _ARRIVE, slot)
        self._push(config.tick_s, _TICK, None)
        warmed = False
        while self._events and self._events[0][0] <= config.duration_s:
            now, _, kind, payload = heapq.heappop(self._events)
            if not warmed and now >= config.warmup_s:
                self._start_window()
                warmed = True
            self._now = now
            if kind == _ARRIVE:
                assert isinstance(payload, _Slot)
                self._arrive(payload)
            elif kind == _ENGINE:
                assert isinstance(payload, SimEngine)
                self._engine_done(payload)
            else:
                self._execute(self.policy.tick(now))
                self._push(now + config.tick_s, _TICK, None)
        if not warmed:
            self._start_window()
        return self._result()

    # --- workload ------------------------------------------------------------------------------

    def _new_slot(
        self, index: int, generation: int, rng: random.Random, *, stationary: bool
    ) -> _Slot:
        spec = sample_program(rng, self.config.workload, length_biased=stationary)
        step = rng.randrange(spec.steps) if stationary else 0
        return _Slot(index, rng, spec, f"s{index}-p{generation}", generation, step)

    def _arrive(self, slot: _Slot) -> None:
        prompt = slot.spec.prompt_tokens(slot.step)
        new_tokens = prompt - slot.last_total
        request_id = f"{slot.program_id}/{slot.step}"
        self._pending[request_id] = _Pending(
            slot,
            slot.step,
            self._now,
            prompt,
            # The first request of a program here has never been computed anywhere.
            fresh_tokens=new_tokens if slot.last_total else prompt,
        )
        self._execute(
            [self.policy.request_arrived(slot.program_id, request_id, new_tokens, self._now)]
        )

    def _reply(self, request: EngineRequest) -> None:
        pending = self._pending.pop(request.request_id)
        slot = pending.slot
        now = self._now
        if self._window_start is not None:
            self._steps += 1
            self._step_latency.append(now - pending.arrived_s)
        if slot.program_id not in self._first:
            self._first[slot.program_id] = FirstResponse(
                slot.program_id, slot.generation == 0, pending.prompt_tokens, pending.arrived_s, now
            )
        total = request.kv_tokens
        self._execute(self.policy.request_finished(request.request_id, now, total_tokens=total))
        slot.last_total = total
        slot.step += 1
        if slot.step < slot.spec.steps:
            self._push(now + slot.spec.tool_s[slot.step - 1], _ARRIVE, slot)
            return
        self._programs_completed += 1
        self._execute(self.policy.release(slot.program_id, now))
        if self.config.refill:
            refill = self._new_slot(slot.index, slot.generation + 1, slot.rng, stationary=False)
            self._push(now, _ARRIVE, refill)

    # --- decisions -----------------------------------------------------------------------------

    def _execute(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            if isinstance(decision, Forward):
                self._send(decision)
            elif isinstance(decision, Restore | ForceAdmit):
                for forward in decision.forward:
                    self._send(forward)
            elif isinstance(decision, Reject):
                raise RuntimeError(f"the simulated workload sends no refusable work: {decision}")
            elif isinstance(decision, Hold):
                continue  # the client keeps waiting; a Restore or ForceAdmit forwards it
            # Pause (KV left to the engine's LRU), Teardown, Ignored: nothing to execute.

    def _send(self, forward: Forward) -> None:
        pending = self._pending[forward.request_id]
        assert pending.forwarded_s is None, f"{forward.request_id} forwarded twice"
        pending.forwarded_s = self._now
        if self._window_start is not None:
            self._holds.append(self._now - pending.arrived_s)
        slot = pending.slot
        engine = self._engines[forward.backend]
        engine.submit(
            EngineRequest(
                forward.request_id,
                forward.program_id,
                pending.prompt_tokens,
                slot.spec.decode_tokens[pending.step],
                pending.fresh_tokens,
            ),
            self._now,
        )
        self._kick(engine)

    # --- engines -------------------------------------------------------------------------------

    def _kick(self, engine: SimEngine) -> None:
        if not engine.busy:
            end = engine.start_batch(self._now)
            if end is not None:
                self._push(end, _ENGINE, engine)

    def _engine_done(self, engine: SimEngine) -> None:
        for request in engine.finish_batch():
            self._reply(request)
        self._kick(engine)

    def _push(self, at: float, kind: int, payload: object) -> None:
        heapq.heappush(self._events, (at, next(self._sequence), kind, payload))

    # --- results -------------------------------------------------------------------------------

    def _start_window(self) -> None:
        self._window_start = {name: _copy(e.stats) for name, e in self._engines.items()}
        self._policy_start = self.policy.metrics()

    def _result(self) -> FleetResult:
        assert self._window_start is not None
        config = self.config
        end = self.policy.metrics()
        start = self._policy_start
        engine = EngineStats()
        for name, current in self._engines.items():
            before = self._window_start[name]
            for field_name in _FIELDS:
                value = getattr(current.stats, field_name) - getattr(before, field_name)
                setattr(engine, field_name, getattr(engine, field_name) + value)
        return FleetResult(
            policy=self.policy.name,
            backends=config.backends,
            steps=self._steps,
            window_s=config.duration_s - config.warmup_s,
            step_latency_s=tuple(self._step_latency),
            # Requests still held at the end count with their wait so far (a lower bound).
            hold_s=(
                *self._holds,
                *(
                    config.duration_s - p.arrived_s
                    for p in self._pending.values()
                    if p.forwarded_s is None
                ),
            ),
            forced_admits=end.forced_admits - start.forced_admits,
            migrations=end.migrations - start.migrations,
            pauses=end.pauses - start.pauses,
            restores=end.restores - start.restores,
            preemptions=end.preemptions - start.preemptions,
            engine=engine,
            first_responses=tuple(self._first.values()),
            programs_completed=self._programs_completed,
            end_held_requests=end.held_requests,
        )


def run_fleet(policy: RouterPolicy, config: FleetConfig) -> FleetResult:
    return FleetSimulation(policy, config).run()


def _copy(stats: EngineStats) -> EngineStats:
    return EngineStats(*(getattr(stats, name) for name in _FIELDS))

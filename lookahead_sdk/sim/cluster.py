"""A simulated deployment: one co-located engine, or a prefill + a decode instance (PD
disaggregation), with the admission policy chosen by name. Clock-agnostic: a driver (virtual time
in `simulation.py`, wall clock in `realtime.py`) calls `start_idle` / `finish_due`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from lookahead_sdk.scheduling.admission import (
    AdmissionPolicy,
    DisaggConfig,
    HybridConfig,
    HybridPolicy,
    SlackAwarePolicy,
    VanillaConfig,
    VanillaPolicy,
)
from lookahead_sdk.scheduling.latency_model import LatencyModel, LatencyProfile
from lookahead_sdk.sim.ground_truth import GpuLikeTruth, GroundTruth
from lookahead_sdk.sim.prefix_cache import KvPool
from lookahead_sdk.sim.request import SimRequest
from lookahead_sdk.sim.worker import Iteration, Worker

Mode = Literal["colocated", "disagg"]
PolicyName = Literal["vanilla", "lookahead"]
MODES: tuple[Mode, ...] = ("colocated", "disagg")
POLICIES: tuple[PolicyName, ...] = ("vanilla", "lookahead")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """`kv_tokens` is per instance. `vanilla_batch_tokens`: the baseline's chunked-prefill size."""

    mode: Mode = "colocated"
    policy: PolicyName = "lookahead"
    kv_tokens: int = 400_000
    block_tokens: int = 16
    max_running: int = 256
    hybrid: HybridConfig = field(default_factory=HybridConfig)
    disagg: DisaggConfig = field(default_factory=DisaggConfig)
    vanilla_batch_tokens: int = 8192

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if (
            isinstance(self.kv_tokens, bool)
            or not isinstance(self.kv_tokens, int)
            or self.kv_tokens <= 0
        ):
            raise ValueError(f"kv_tokens must be an int > 0, got {self.kv_tokens!r}")


@dataclass(slots=True)
class LookaheadCounts:
    completed: int = 0
    on_time: int = 0
    late: int = 0
    late_prefill_tokens: int = 0  # prefill computed for lookaheads that missed their deadline


class SimCluster:
    def __init__(
        self, profile: LatencyProfile, config: ClusterConfig, truth: GroundTruth | None = None
    ) -> None:
        self.profile = profile
        self.config = config
        model = LatencyModel(profile)
        self.truth = truth if truth is not None else GpuLikeTruth(profile)
        self.requests_by_class: Counter[str] = Counter()
        self.lookaheads = LookaheadCounts()
        self._requests: dict[str, SimRequest] = {}
        common: dict[str, Any] = {
            "truth": self.truth,
            "kv_tokens": config.kv_tokens,
            "block_tokens": config.block_tokens,
            "max_running": config.max_running,
            "estimator": model,
            "on_finished": self._account_finished,
        }
        if config.mode == "colocated":
            self.entry = Worker("colocated", policy=self._policy(model, "colocated"), **common)
            self.decode_worker: Worker | None = None
            self.workers = [self.entry]
        else:
            self.entry = Worker("prefill", policy=self._policy(model, "disagg"), **common)
            self.decode_worker = Worker("decode", **common)
            self.workers = [self.entry, self.decode_worker]

    def _policy(self, model: LatencyModel, mode: Mode) -> AdmissionPolicy:
        if self.config.policy == "vanilla":
            return VanillaPolicy(VanillaConfig(self.config.vanilla_batch_tokens), model)
        if mode == "colocated":
            return HybridPolicy(model, self.config.hybrid)
        return SlackAwarePolicy(model, self.config.disagg)

    # --- requests --------------------------------------------------------------------------

    def submit(self, request: SimRequest) -> None:
        if request.rid in self._requests:
            raise ValueError(f"request id {request.rid!r} is already in the simulator")
        if request.prompt_tokens + request.max_new_tokens > self.config.kv_tokens:
            raise ValueError(
                f"request {request.rid!r} needs {request.prompt_tokens + request.max_new_tokens} "
                f"KV tokens; an instance holds {self.config.kv_tokens} (raise kv_tokens)"
            )
        self._requests[request.rid] = request
        self.requests_by_class[
            "lookahead" if request.tags.is_lookahead else request.tags.priority_class
        ] += 1
        self.entry.submit(request)

    def promote(
        self,
        *,
        rid: str | None = None,
        lookahead_group_id: str | None = None,
        program_id: str | None = None,
    ) -> list[str]:
        """Raise matching best-effort requests still in flight to latency-critical."""
        if rid is None and lookahead_group_id is None and program_id is None:
            raise ValueError("promote needs rid, lookahead_group_id or program_id")
        promoted = []
        for request in self._requests.values():
            tags = request.tags
            if request.finish_ms is not None or not tags.is_best_effort:
                continue
            if (
                (rid is not None and request.rid == rid)
                or (
                    lookahead_group_id is not None and tags.lookahead_group_id == lookahead_group_id
                )
                or (program_id is not None and tags.program_id == program_id)
            ):
                request.promoted = True
                promoted.append(request.rid)
        return promoted

    def abort(self, rid: str, now_ms: float) -> bool:
        """The client of request `rid` went away: stop simulating it and free its KV. False
        when it finished already (or never existed)."""
        request = self._requests.get(rid)
        if request is None:
            return False
        return any(worker.abort(request, now_ms) for worker in self.workers)

    def _account_finished(self, request: SimRequest) -> None:
        self._requests.pop(request.rid, None)
        if request.aborted or not request.tags.is_lookahead:
            return
        deadline = request.commit_deadline_abs_ms
        self.lookaheads.completed += 1
        if deadline is None or (request.finish_ms is not None and request.finish_ms <= deadline):
            self.lookaheads.on_time += 1
        else:
            self.lookaheads.late += 1
            self.lookaheads.late_prefill_tokens += request.prompt_tokens - request.cached_tokens

    # --- driving ---------------------------------------------------------------------------

    def start_idle(self, now_ms: float) -> list[Iteration]:
        started = []
        for worker in self.workers:
            if worker.busy is None and worker.has_work():
                iteration = worker.start(now_ms)
                if iteration is not None:
                    started.append(iteration)
        return started

    def next_end_ms(self) -> float | None:
        ends = [w.busy.end_ms for w in self.workers if w.busy is not None]
        return min(ends) if ends else None

    def finish_due(self, now_ms: float) -> None:
        for worker in self.workers:
            if worker.busy is not None and worker.busy.end_ms <= now_ms:
                for request in worker.finish(worker.busy.end_ms):
                    assert self.decode_worker is not None
                    self.decode_worker.submit(request)

    def flush_cache(self) -> bool:
        """Drop every cached prefix (SGLang's /flush_cache); only while nothing is in flight."""
        if not self.idle():
            return False
        for worker in self.workers:
            worker.pool = KvPool(worker.pool.capacity_tokens, worker.pool.block_tokens)
        return True

    def idle(self) -> bool:
        return all(w.busy is None and not w.has_work() for w in self.workers)

    # --- reporting -------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        entry = self.entry.stats
        return {
            "mode": self.config.mode,
            "policy": self.config.policy,
            "profile": self.profile.name,
            "requests": dict(self.requests_by_class),
            "lookahead": {
                "admitted_chunks": entry.admitted_chunks["be"],
                "admitted_prefill_tokens": entry.prefill_tokens["be"],
                "deferred": sum(n for (cls, _), n in entry.deferred.items() if cls == "be"),
                "deferred_by_reason": {
                    reason: n for (cls, reason), n in entry.deferred.items() if cls == "be"
                },
                "preempted": len(entry.preempted),
                "preempted_events": entry.preempted_events,
                "promoted": len(entry.promoted),
                "judged_infeasible": len(entry.infeasible),
                "completed": self.lookaheads.completed,
                "on_time": self.lookaheads.on_time,
                "late": self.lookaheads.late,
                "late_prefill_tokens": self.lookaheads.late_prefill_tokens,
            },
            "workers": {
                w.name: {
                    "iterations": w.stats.iterations,
                    "busy_ms": w.stats.busy_ms,
                    "waiting": len(w.queue),
                    "decoding": len(w.decoding),
                    "kv_capacity_tokens": w.pool.capacity_tokens,
                    "kv_cached_tokens": w.pool.cached_tokens,
                    "kv_reserved_tokens": w.pool.reserved_tokens,
                    "kv_evicted_tokens": w.pool.evicted_tokens,
                    "kv_blocked": w.stats.kv_blocked,
                    "retracted": w.stats.retracted,
                    "aborted": w.stats.aborted,
                    "running": w.running_count,
                }
                for w in self.workers
            },
        }

"""One simulated engine instance: a continuous-batching loop over a KV pool with a prefix cache.

Roles: "colocated" (prefill and decode in hybrid batches), "prefill" and "decode" (the two
instances of a PD-disaggregated deployment). Each iteration the worker asks its admission policy
(the same objects the SGLang plugin calls) which prefill chunks join the batch, charges the
iteration's duration from the ground truth, and applies its effects when it finishes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from lookahead_sdk.scheduling.admission import AdmissionPolicy, Admit
from lookahead_sdk.scheduling.latency_model import BatchShape, LatencyEstimator, PrefillChunk
from lookahead_sdk.sim.ground_truth import GroundTruth
from lookahead_sdk.sim.prefix_cache import KvPool, block_names
from lookahead_sdk.sim.request import Phase, SimRequest

Role = Literal["colocated", "prefill", "decode"]


@dataclass(slots=True)
class Iteration:
    start_ms: float
    duration_ms: float
    est_ms: float | None
    chunks: list[tuple[SimRequest, int]]
    decodes: list[SimRequest]

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.duration_ms


@dataclass(slots=True)
class WorkerStats:
    iterations: int = 0
    busy_ms: float = 0.0
    prefill_tokens: Counter[str] = field(default_factory=Counter)  # by the request's own class
    admitted_chunks: Counter[str] = field(default_factory=Counter)
    deferred: Counter[tuple[str, str]] = field(default_factory=Counter)  # (own class, reason)
    preempted_events: int = 0
    preempted: set[str] = field(default_factory=set)
    promoted: set[str] = field(default_factory=set)
    infeasible: set[str] = field(default_factory=set)  # lookaheads triaged as unable to be on time
    kv_blocked: int = 0
    retracted: int = 0
    aborted: int = 0


class Worker:
    def __init__(
        self,
        role: Role,
        *,
        truth: GroundTruth,
        kv_tokens: int,
        policy: AdmissionPolicy | None = None,
        estimator: LatencyEstimator | None = None,
        block_tokens: int = 16,
        max_running: int = 256,
        name: str | None = None,
        on_finished: Callable[[SimRequest], None] | None = None,
    ) -> None:
        if role != "decode" and policy is None:
            raise ValueError(f"a {role!r} worker needs an admission policy")
        self.role: Role = role
        self.name = name or role
        self.policy = policy
        self.truth = truth
        self.estimator = estimator
        self.pool = KvPool(kv_tokens, block_tokens)
        self.max_running = max_running
        self.queue: list[SimRequest] = []  # WAITING or PREFILL (prefill roles); TRANSFER (decode)
        self.decoding: list[SimRequest] = []
        self.busy: Iteration | None = None
        self.stats = WorkerStats()
        self._on_finished = on_finished

    # --- intake ----------------------------------------------------------------------------

    def submit(self, request: SimRequest) -> None:
        if self.role == "decode":
            request.phase = Phase.TRANSFER
        else:
            request.names = block_names(request.prompt, self.pool.block_tokens)
            request.phase = Phase.WAITING
        self.queue.append(request)

    def has_work(self) -> bool:
        return bool(self.queue or self.decoding)

    @property
    def running_count(self) -> int:
        return len(self.decoding) + sum(1 for r in self.queue if r.phase is Phase.PREFILL)

    # --- one iteration ---------------------------------------------------------------------

    def start(self, now_ms: float) -> Iteration | None:
        assert self.busy is None, "a worker runs one iteration at a time"
        if self.role == "decode":
            self._accept_transfers()
            chunks: list[tuple[SimRequest, int]] = []
            est = None
        else:
            chunks, est = self._plan_prefill(now_ms)
        decodes = list(self.decoding)
        if not chunks and not decodes:
            return None
        batch = BatchShape(
            tuple(r.context_tokens for r in decodes),
            tuple(PrefillChunk(k, r.prefilled_tokens) for r, k in chunks),
        )
        if est is None and self.estimator is not None:
            est = self.estimator.est_ms(batch)
        iteration = Iteration(now_ms, self.truth.duration_ms(batch), est, chunks, decodes)
        self.busy = iteration
        self.stats.iterations += 1
        self.stats.busy_ms += iteration.duration_ms
        return iteration

    def finish(self, now_ms: float) -> list[SimRequest]:
        """Apply the running iteration; returns requests handed to a decode instance."""
        iteration = self.busy
        assert iteration is not None
        self.busy = None
        handoffs: list[SimRequest] = []
        for request, tokens in iteration.chunks:
            if request.aborted:
                continue
            self._apply_chunk(request, tokens)
            if request.prefilled_tokens == request.prompt_tokens:
                self.queue.remove(request)
                handoffs.extend(self._prefill_done(request, now_ms))
        for request in iteration.decodes:
            if not request.aborted:
                self._emit_token(request, now_ms)
        return handoffs

    def abort(self, request: SimRequest, now_ms: float) -> bool:
        """Drop a request whose client went away: its KV reservation and block locks are freed
        now (blocks it computed stay cached); an iteration already running skips it. False when
        the request is not on this worker."""
        if request in self.queue:
            self.queue.remove(request)
        elif request in self.decoding:
            self.decoding.remove(request)
        else:
            return False
        request.aborted = True
        self._release(request, cache_output=False)
        self.stats.aborted += 1
        self._finish(request, now_ms)
        return True

    # --- prefill planning ------------------------------------------------------------------

    def _plan_prefill(self, now_ms: float) -> tuple[list[tuple[SimRequest, int]], float | None]:
        assert self.policy is not None
        by_rid = {r.rid: r for r in self.queue}
        descriptors = [r.descriptor(self._cached_prefix(r)) for r in self.queue]
        admission = self.policy.begin_round(
            now_ms, [r.context_tokens for r in self.decoding], descriptors
        )
        chunks: list[tuple[SimRequest, int]] = []
        lc_kv_blocked = False  # an LC request found no KV this round: BE must not take it
        for descriptor in admission.ordered(descriptors):
            if (
                lc_kv_blocked
                and by_rid[descriptor.rid].phase is Phase.WAITING
                and admission.scheduled_class(descriptor) == "be"
            ):
                self.stats.deferred[(descriptor.priority_class, "lc_kv_blocked")] += 1
                continue
            decision = admission.offer(descriptor)
            if not isinstance(decision, Admit):
                self.stats.deferred[(descriptor.priority_class, decision.reason)] += 1
                continue
            request = by_rid[descriptor.rid]
            if request.phase is Phase.WAITING and not self._admit(
                request, descriptor.cached_prefix_tokens
            ):
                if not (
                    decision.scheduled_as == "lc"
                    and self._retract_paused_best_effort({r.rid for r, _ in chunks})
                    and self._admit(request, descriptor.cached_prefix_tokens)
                ):
                    admission.settle(descriptor.rid, 0)
                    self.stats.kv_blocked += 1
                    lc_kv_blocked = lc_kv_blocked or decision.scheduled_as == "lc"
                    continue
            chunks.append((request, decision.tokens))
            self.stats.admitted_chunks[descriptor.priority_class] += 1
            self.stats.prefill_tokens[descriptor.priority_class] += decision.tokens
        self.stats.preempted_events += len(admission.preempted)
        self.stats.preempted.update(admission.preempted)
        self.stats.promoted.update(admission.promoted)
        self.stats.infeasible.update(admission.infeasible)
        return chunks, admission.est_ms

    def _retract_paused_best_effort(self, in_batch: set[str]) -> bool:
        """Free the KV reserved by BE requests paused mid-prefill, so LC work that does not fit
        can start (like SGLang retracting requests when memory runs out). Their computed blocks
        stay in the prefix cache, unlocked: if not evicted, the retried request hits them."""
        retracted = False
        for request in self.queue:
            if (
                request.phase is Phase.PREFILL
                and request.tags.priority_class == "be"
                and not request.promoted
                and request.rid not in in_batch
            ):
                self._release(request, cache_output=False)
                request.phase = Phase.WAITING
                request.prefilled_tokens = request.cached_tokens = 0
                self.stats.retracted += 1
                retracted = True
        return retracted

    def _cached_prefix(self, request: SimRequest) -> int:
        if request.phase is Phase.PREFILL:
            return request.prefilled_tokens
        # At least one prompt token is always computed (its logits give the first token).
        usable = request.names[: (request.prompt_tokens - 1) // self.pool.block_tokens]
        return self.pool.match(usable) * self.pool.block_tokens

    def _admit(self, request: SimRequest, planned_cached: int) -> bool:
        if self.running_count >= self.max_running:
            return False
        blocks = self._cached_prefix(request) // self.pool.block_tokens
        if blocks * self.pool.block_tokens < planned_cached:
            return False  # evicted since the round was planned: retry next round
        matched = request.names[:blocks]
        self.pool.lock(matched)
        need = request.prompt_tokens - blocks * self.pool.block_tokens
        if self.role == "colocated":
            need += request.max_new_tokens
        if not self.pool.reserve(need):
            self.pool.unlock(matched)
            return False
        self.pool.touch(matched)
        request.locked = list(matched)
        request.reserved_tokens = need
        request.cached_tokens = request.prefilled_tokens = blocks * self.pool.block_tokens
        request.phase = Phase.PREFILL
        return True

    def _apply_chunk(self, request: SimRequest, tokens: int) -> None:
        request.prefilled_tokens += tokens
        full_blocks = min(request.prefilled_tokens // self.pool.block_tokens, len(request.names))
        new_names = request.names[len(request.locked) : full_blocks]
        if new_names:
            # The whole chain from the root, so each new block is linked to its parent (the blocks
            # before it are cached and locked by this request already; insert skips them).
            self.pool.insert(request.names[:full_blocks])
            self.pool.lock(new_names)
            request.locked.extend(new_names)
            moved = len(new_names) * self.pool.block_tokens
            self.pool.release(moved)
            request.reserved_tokens -= moved

    def _prefill_done(self, request: SimRequest, now_ms: float) -> list[SimRequest]:
        if self.role == "prefill":
            self._release(request, cache_output=False)
            if request.max_new_tokens > 0:
                self._token(request, now_ms)  # the prefill instance samples the first token
            if request.generated >= request.max_new_tokens:
                self._finish(request, now_ms)
                return []
            return [request]
        if request.max_new_tokens == 0:
            self._release(request, cache_output=False)
            self._finish(request, now_ms)
            return []
        request.phase = Phase.DECODE
        self.decoding.append(request)
        self._emit_token(request, now_ms)
        return []

    # --- decode ----------------------------------------------------------------------------

    def _accept_transfers(self) -> None:
        while self.queue:
            request = self.queue[0]
            need = request.context_tokens + request.max_new_tokens - request.generated
            if self.running_count >= self.max_running or not self.pool.reserve(need):
                self.stats.kv_blocked += 1
                return
            self.queue.pop(0)
            request.reserved_tokens = need
            request.locked = []
            request.phase = Phase.DECODE
            self.decoding.append(request)

    def _emit_token(self, request: SimRequest, now_ms: float) -> None:
        self._token(request, now_ms)
        if request.generated >= request.max_new_tokens:
            self.decoding.remove(request)
            self._release(request, cache_output=self.role == "colocated")
            self._finish(request, now_ms)

    def _token(self, request: SimRequest, now_ms: float) -> None:
        request.generated += 1
        request.token_times_ms.append(now_ms)
        if request.listener is not None:
            request.listener.on_token(request, now_ms)

    def _release(self, request: SimRequest, *, cache_output: bool) -> None:
        if cache_output:
            output = [request.output_token(i) for i in range(request.generated)]
            names = block_names([*request.prompt, *output], self.pool.block_tokens)
            self.pool.insert(names)
        self.pool.release(request.reserved_tokens)
        request.reserved_tokens = 0
        if request.locked:
            self.pool.unlock(request.locked)
            request.locked = []

    def _finish(self, request: SimRequest, now_ms: float) -> None:
        request.phase = Phase.DONE
        request.finish_ms = now_ms
        if self._on_finished is not None:
            self._on_finished(request)
        if request.listener is not None:
            request.listener.on_finish(request, now_ms)

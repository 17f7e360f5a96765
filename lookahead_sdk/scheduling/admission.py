"""Lookahead-aware admission: which waiting requests enter the next prefill batch, and how many of
their prompt tokens (a chunk).

Three policies share one round mechanism (`AdmissionRound`):

- `HybridPolicy` (co-located prefill + decode, paper Algorithm 2): the batch fills in the order
  decode -> latency-critical (LC) prefill chunks -> best-effort (BE) prefill chunks, each chunk
  sized so that Est(batch) stays within the TBT bound.
- `SlackAwarePolicy` (prefill instance of a PD-disaggregated deployment, Algorithm 1): LC first;
  budget = max(0, min over LC of slack), slack_j = deadline_j - now - estimated prefill time up
  to and including j; BE chunks may add at most `budget` ms to the batch (no budget: no BE).
- `VanillaPolicy`: the class-blind baseline (what an engine does without this work): FCFS, every
  request treated like LC, chunks bounded by a token budget only.

Both class-aware policies order BE work earliest-deadline-first, after a deadline triage
(`deadlines.py`, Moore-Hodgson over the latency model's estimates): lookaheads that can no longer
finish before their commit deadline (past it, or given up so that more of the others make theirs)
only get room left over by the feasible ones, so late work never delays work that can be on time.
They promote a lookahead whose commit deadline is near and that can still make it (or that is
flagged `promoted`) to LC, and preempt BE whenever LC work is left over (an LC backlog): a paused
chunked BE request keeps its KV and resumes in a later round.

Round API (what an engine hook calls, e.g. around SGLang's `PrefillAdder.add_one_req`):

    round = policy.begin_round(now_ms, decode_contexts, waiting)
    for request in round.ordered(waiting):
        decision = round.offer(request)          # Admit(tokens=k) or Defer(reason)
        ...engine admits up to k tokens...
        round.settle(request.rid, admitted)       # only if the engine admitted fewer than k

LC chunks are planned in `begin_round` from the LC requests alone, so an LC decision never depends
on which BE requests exist or on the order of offers: BE can never take LC's room.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from lookahead_sdk.scheduling.deadlines import DeadlineTriage, infeasible_lookaheads
from lookahead_sdk.scheduling.latency_model import BatchFeatures, LatencyEstimator
from lookahead_sdk.scheduling.requests import PriorityClass, RequestDescriptor

DeferReason = Literal[
    "over_bound",  # the chunk would push Est(batch) over the bound (TBT or BE ceiling)
    "batch_full",  # the batch's token budget is used up
    "lc_backlog",  # BE preempted: LC work is left over this round
    "no_slack",  # BE blocked: the LC slack budget is 0
    "beside_lc_prefill",  # BE kept out of a batch that prefills LC work (HybridConfig)
    "nothing_to_prefill",
    "engine_declined",  # the engine admitted nothing after an Admit (memory, slots)
]


@dataclass(frozen=True, slots=True)
class Admit:
    tokens: int
    scheduled_as: PriorityClass


@dataclass(frozen=True, slots=True)
class Defer:
    reason: DeferReason


Decision = Admit | Defer


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """A finished round: decisions in offer order plus what the round estimated and counted."""

    decisions: dict[str, Decision]
    features: BatchFeatures
    est_ms: float | None
    promoted: tuple[str, ...]
    preempted: tuple[str, ...]
    lc_backlog: bool
    infeasible: tuple[str, ...] = ()

    def admitted_tokens(self) -> dict[str, int]:
        return {rid: d.tokens for rid, d in self.decisions.items() if isinstance(d, Admit)}


@dataclass(frozen=True, slots=True)
class HybridConfig:
    """Co-located hybrid batching.

    `min_lc_chunk_tokens`: an LC chunk admitted even when decodes alone exceed the bound, so LC
    prefill always progresses. `promote_within_ms`: a lookahead whose commit deadline is this close
    is scheduled as LC. `be_step_ms`: the most BE chunks may add to one batch's Est over its
    decodes and LC chunks, so an LC request that arrives while a batch runs waits at most this
    long for best-effort work (and a decoding reply's step grows by at most this much); None lets
    BE fill up to `tbt_bound_ms` (the paper's Algorithm 2), where an arrival may wait a whole
    bound behind a warm-up chunk. `be_beside_lc_prefill`: whether BE chunks may share a batch
    with LC prefill chunks (the paper's fill); off, an LC request's first token never waits for
    best-effort work computed in its own batch, and BE runs in the batches around it.
    """

    tbt_bound_ms: float = 50.0
    max_batch_tokens: int = 8192
    min_lc_chunk_tokens: int = 256
    promote_within_ms: float = 500.0
    be_step_ms: float | None = 15.0
    be_beside_lc_prefill: bool = False

    def __post_init__(self) -> None:
        _require_positive("HybridConfig.tbt_bound_ms", self.tbt_bound_ms)
        if not isinstance(self.be_beside_lc_prefill, bool):
            raise ValueError(
                f"HybridConfig.be_beside_lc_prefill must be a bool, got {self.be_beside_lc_prefill!r}"
            )
        if self.be_step_ms is not None:
            _require_positive("HybridConfig.be_step_ms", self.be_step_ms)
        _require_positive_int("HybridConfig.max_batch_tokens", self.max_batch_tokens)
        _require_positive_int("HybridConfig.min_lc_chunk_tokens", self.min_lc_chunk_tokens)
        _require_non_negative("HybridConfig.promote_within_ms", self.promote_within_ms)


@dataclass(frozen=True, slots=True)
class DisaggConfig:
    """Slack-aware admission on a prefill instance.

    `slo_ttft_ms`: TTFT target of LC requests without their own `slo_ttft_ms`.
    `idle_be_budget_ms`: with no LC waiting, how long a BE batch may take (an LC request arriving
    meanwhile waits at most about this long).
    """

    slo_ttft_ms: float = 500.0
    max_batch_tokens: int = 16384
    idle_be_budget_ms: float = 100.0
    promote_within_ms: float = 500.0

    def __post_init__(self) -> None:
        _require_positive("DisaggConfig.slo_ttft_ms", self.slo_ttft_ms)
        _require_positive_int("DisaggConfig.max_batch_tokens", self.max_batch_tokens)
        _require_non_negative("DisaggConfig.idle_be_budget_ms", self.idle_be_budget_ms)
        _require_non_negative("DisaggConfig.promote_within_ms", self.promote_within_ms)


@dataclass(frozen=True, slots=True)
class VanillaConfig:
    """FCFS with a per-batch token budget (like SGLang's `--chunked-prefill-size`)."""

    max_batch_tokens: int = 8192

    def __post_init__(self) -> None:
        _require_positive_int("VanillaConfig.max_batch_tokens", self.max_batch_tokens)


@dataclass(frozen=True, slots=True)
class _Rules:
    """What differs between policies, fixed at `begin_round`."""

    class_aware: bool
    max_batch_tokens: int
    promote_within_ms: float
    lc_ceiling_ms: float | None  # None: LC chunks bounded by tokens only
    min_lc_chunk_tokens: int = 0
    # Deadline triage of BE lookaheads: BE gets the part of this per-iteration bound that decodes
    # leave (None: the whole engine, e.g. a prefill instance), at most `be_step_ms` of a step.
    be_share_bound_ms: float | None = None
    be_step_ms: float | None = None


@dataclass(slots=True)
class _Offered:
    descriptor: RequestDescriptor
    tokens: int
    scheduled_as: PriorityClass


class AdmissionRound:
    """One prefill-batch construction. Create it with a policy's `begin_round`."""

    def __init__(
        self,
        *,
        estimator: LatencyEstimator | None,
        now_ms: float,
        decode_contexts: Sequence[int],
        waiting: Sequence[RequestDescriptor],
        rules: _Rules,
        be_ceiling: _BeCeiling | None,
    ) -> None:
        _check_inputs(now_ms, decode_contexts, waiting)
        self.now_ms = now_ms
        self._estimator = estimator
        self._rules = rules
        self._features = BatchFeatures().with_decodes(decode_contexts)
        self._decisions: dict[str, Decision] = {}
        self._offered: dict[str, _Offered] = {}
        self._reserved: dict[str, int] = {}
        self._reserve_reason: dict[str, DeferReason] = {}
        self._promoted: list[str] = []
        self._preempted: list[str] = []
        self._prefill_admitted = False
        self._triage = DeadlineTriage()
        if rules.class_aware and estimator is not None:
            # Before LC planning: a lookahead near its deadline is promoted only if it can still
            # make it (promoting a hopeless one would only delay the ones that can).
            self._triage = infeasible_lookaheads(
                now_ms,
                [d for d in waiting if d.priority_class == "be" and not d.promoted],
                lambda d: estimator.est_features_ms(
                    BatchFeatures().with_chunk(d.remaining_prefill_tokens, d.cached_prefix_tokens)
                ),
                self._be_share(estimator.est_features_ms(self._features)),
            )
        lc_waiting = [d for d in self.ordered(waiting) if self._is_lc(d)]
        for descriptor in lc_waiting:
            tokens, reason = self._size_lc_chunk(descriptor)
            self._reserved[descriptor.rid] = tokens
            if tokens > 0:
                self._features = self._features.with_chunk(tokens, descriptor.cached_prefix_tokens)
                self._prefill_admitted = True
            elif reason is not None:
                self._reserve_reason[descriptor.rid] = reason
        self.lc_backlog = any(
            self._reserved[d.rid] < d.remaining_prefill_tokens for d in lc_waiting
        )
        # BE chunks must keep Est(batch) <= this ceiling; None: only the token budget bounds them.
        self._be_ceiling_ms: float | None = None
        self._be_block_reason: DeferReason | None = None
        if be_ceiling is not None:
            self._be_ceiling_ms, self._be_block_reason = be_ceiling(
                now_ms, lc_waiting, self._features
            )

    # --- queries -------------------------------------------------------------------------------

    @property
    def features(self) -> BatchFeatures:
        """The batch as planned so far: decodes, LC reservations and admitted BE chunks."""
        return self._features

    @property
    def est_ms(self) -> float | None:
        return None if self._estimator is None else self._estimator.est_features_ms(self._features)

    @property
    def promoted(self) -> tuple[str, ...]:
        return tuple(self._promoted)

    @property
    def infeasible(self) -> frozenset[str]:
        """Lookaheads judged unable to finish before their commit deadline (see `deadlines.py`):
        offered room only after every feasible best-effort request."""
        return self._triage.infeasible

    @property
    def preempted(self) -> tuple[str, ...]:
        return tuple(self._preempted)

    def scheduled_class(self, descriptor: RequestDescriptor) -> PriorityClass:
        return "lc" if self._is_lc(descriptor) else "be"

    def ordered(self, candidates: Iterable[RequestDescriptor]) -> list[RequestDescriptor]:
        """Queue order: LC first-come-first-served, then promoted lookaheads, then BE that can
        still meet its commit deadline (or has none), then lookaheads judged unable to (those
        given up by the deadline triage, then those already past their deadline); all but LC by
        earliest commit deadline, then arrival (so a flood of promotions cannot starve genuine
        LC work, and late work never delays work that can still be on time). Class-blind
        policies: everything first-come-first-served."""
        indexed = list(enumerate(candidates))
        if not self._rules.class_aware:
            return [d for _, d in sorted(indexed, key=lambda item: (item[1].arrival_ms, item[0]))]

        def key(item: tuple[int, RequestDescriptor]) -> tuple[int, float, float, int]:
            index, descriptor = item
            if descriptor.priority_class == "lc":
                return (0, descriptor.arrival_ms, 0.0, index)
            deadline = descriptor.commit_deadline_ms
            rank = 1 if self._is_lc(descriptor) else self._be_rank(descriptor)
            return (rank, math.inf if deadline is None else deadline, descriptor.arrival_ms, index)

        return [d for _, d in sorted(indexed, key=key)]

    # --- decisions -----------------------------------------------------------------------------

    def offer(self, descriptor: RequestDescriptor) -> Decision:
        if descriptor.rid in self._decisions:
            raise ValueError(f"request {descriptor.rid!r} was already offered in this round")
        decision = self._decide(descriptor)
        self._decisions[descriptor.rid] = decision
        if isinstance(decision, Admit):
            self._offered[descriptor.rid] = _Offered(
                descriptor, decision.tokens, decision.scheduled_as
            )
            self._prefill_admitted = True
            if (
                self._rules.class_aware
                and decision.scheduled_as == "lc"
                and descriptor.priority_class == "be"
            ):
                self._promoted.append(descriptor.rid)
        return decision

    def settle(self, rid: str, admitted_tokens: int) -> None:
        """The engine admitted `admitted_tokens` (<= the Admit's tokens) of request `rid`."""
        offered = self._offered.get(rid)
        if offered is None:
            raise ValueError(f"settle({rid!r}): the request was not admitted in this round")
        if isinstance(admitted_tokens, bool) or not isinstance(admitted_tokens, int):
            raise TypeError("settle(admitted_tokens) must be an int")
        if not 0 <= admitted_tokens <= offered.tokens:
            raise ValueError(
                f"settle(admitted_tokens) must be within 0..{offered.tokens} (the admitted chunk), "
                f"got {admitted_tokens}"
            )
        prefix = offered.descriptor.cached_prefix_tokens
        self._features = self._features.without_chunk(offered.tokens, prefix).with_chunk(
            admitted_tokens, prefix
        )
        offered.tokens = admitted_tokens
        self._decisions[rid] = (
            Admit(admitted_tokens, offered.scheduled_as)
            if admitted_tokens > 0
            else Defer("engine_declined")
        )
        if admitted_tokens == 0 and rid in self._promoted:
            self._promoted.remove(rid)

    def plan(self) -> RoundPlan:
        return RoundPlan(
            decisions=dict(self._decisions),
            features=self._features,
            est_ms=self.est_ms,
            promoted=self.promoted,
            preempted=self.preempted,
            lc_backlog=self.lc_backlog,
            infeasible=tuple(sorted(self._triage.infeasible)),
        )

    # --- internals -----------------------------------------------------------------------------

    def _be_rank(self, descriptor: RequestDescriptor) -> int:
        """2: can still be on time (or has no deadline); 3: given up by the deadline triage;
        4: past its deadline (checked directly: a request offered without being passed to
        `begin_round` was not triaged)."""
        deadline = descriptor.commit_deadline_ms
        # As the triage: one with nothing left to prefill is never late.
        late = deadline is not None and deadline < self.now_ms
        if late and descriptor.remaining_prefill_tokens > 0:
            return 4
        return 3 if descriptor.rid in self._triage.shed else 2

    def _be_share(self, decode_only_ms: float) -> float:
        """Fraction of engine time BE work can expect: what decodes leave of each iteration."""
        bound = self._rules.be_share_bound_ms
        if bound is None:
            return 1.0
        be_ms = max(
            0.0, _be_ceiling_ms(bound, decode_only_ms, self._rules.be_step_ms) - decode_only_ms
        )
        step_ms = decode_only_ms + be_ms
        return be_ms / step_ms if step_ms > 0 else 1.0

    def _is_lc(self, descriptor: RequestDescriptor) -> bool:
        if not self._rules.class_aware or descriptor.priority_class == "lc" or descriptor.promoted:
            return True
        return descriptor.rid not in self._triage.infeasible and descriptor.is_latency_critical(
            self.now_ms, self._rules.promote_within_ms
        )

    def _decide(self, descriptor: RequestDescriptor) -> Decision:
        if descriptor.remaining_prefill_tokens == 0:
            return Defer("nothing_to_prefill")
        if self._is_lc(descriptor):
            if descriptor.rid in self._reserved:
                tokens = self._reserved.pop(descriptor.rid)
                if tokens > 0:
                    return Admit(tokens, "lc")
                return Defer(self._reserve_reason.get(descriptor.rid, "batch_full"))
            tokens, reason = self._size_lc_chunk(descriptor)
            if tokens == 0:
                return Defer(reason or "batch_full")
            self._features = self._features.with_chunk(tokens, descriptor.cached_prefix_tokens)
            return Admit(tokens, "lc")
        return self._decide_be(descriptor)

    def _decide_be(self, descriptor: RequestDescriptor) -> Decision:
        blocked_by: DeferReason | None = "lc_backlog" if self.lc_backlog else self._be_block_reason
        if blocked_by is not None:
            if descriptor.in_progress:
                self._preempted.append(descriptor.rid)
            return Defer(blocked_by)
        room = self._rules.max_batch_tokens - self._features.forward_tokens
        cap = min(descriptor.remaining_prefill_tokens, room)
        if cap <= 0:
            return Defer("batch_full")
        ceiling = self._be_ceiling_ms
        tokens = (
            cap
            if ceiling is None
            else self._max_tokens_within(descriptor.cached_prefix_tokens, cap, ceiling)
        )
        if tokens == 0:
            return Defer("over_bound")
        self._features = self._features.with_chunk(tokens, descriptor.cached_prefix_tokens)
        return Admit(tokens, "be")

    def _size_lc_chunk(self, descriptor: RequestDescriptor) -> tuple[int, DeferReason | None]:
        room = self._rules.max_batch_tokens - self._features.forward_tokens
        cap = min(descriptor.remaining_prefill_tokens, room)
        if cap <= 0:
            return 0, "batch_full"
        ceiling = self._rules.lc_ceiling_ms
        if ceiling is None:
            return cap, None
        tokens = self._max_tokens_within(descriptor.cached_prefix_tokens, cap, ceiling)
        if not self._prefill_admitted and tokens < self._rules.min_lc_chunk_tokens:
            # Progress guarantee: LC prefill advances even when decodes alone fill the bound.
            tokens = min(cap, self._rules.min_lc_chunk_tokens)
        return tokens, (None if tokens > 0 else "over_bound")

    def _max_tokens_within(self, prefix_tokens: int, cap: int, ceiling_ms: float) -> int:
        """Largest chunk k <= cap with Est(batch + chunk(k)) <= ceiling (Est grows with k)."""
        assert self._estimator is not None, "a latency bound needs an estimator"
        estimate = self._estimator.est_features_ms
        if estimate(self._features.with_chunk(1, prefix_tokens)) > ceiling_ms:
            return 0
        low, high = 1, cap
        while low < high:
            middle = (low + high + 1) // 2
            if estimate(self._features.with_chunk(middle, prefix_tokens)) <= ceiling_ms:
                low = middle
            else:
                high = middle - 1
        return low


class _BeCeiling(Protocol):
    """Given the LC part of the batch, the Est ceiling for BE chunks, or a reason to block BE."""

    def __call__(
        self, now_ms: float, lc_waiting: Sequence[RequestDescriptor], lc_features: BatchFeatures
    ) -> tuple[float | None, DeferReason | None]: ...


class AdmissionPolicy(Protocol):
    name: str

    def begin_round(
        self,
        now_ms: float,
        decode_contexts: Sequence[int],
        waiting: Sequence[RequestDescriptor],
    ) -> AdmissionRound: ...

    def plan(
        self,
        now_ms: float,
        decode_contexts: Sequence[int],
        waiting: Sequence[RequestDescriptor],
    ) -> RoundPlan: ...


@dataclass(slots=True)
class _PolicyBase:
    def begin_round(
        self,
        now_ms: float,
        decode_contexts: Sequence[int],
        waiting: Sequence[RequestDescriptor],
    ) -> AdmissionRound:
        raise NotImplementedError

    def plan(
        self,
        now_ms: float,
        decode_contexts: Sequence[int],
        waiting: Sequence[RequestDescriptor],
    ) -> RoundPlan:
        """The whole batch at once: `begin_round`, then offer every request in queue order."""
        admission_round = self.begin_round(now_ms, decode_contexts, waiting)
        for descriptor in admission_round.ordered(waiting):
            admission_round.offer(descriptor)
        return admission_round.plan()


@dataclass(slots=True)
class HybridPolicy(_PolicyBase):
    estimator: LatencyEstimator
    config: HybridConfig = field(default_factory=HybridConfig)
    name: str = "hybrid"

    def begin_round(
        self,
        now_ms: float,
        decode_contexts: Sequence[int],
        waiting: Sequence[RequestDescriptor],
    ) -> AdmissionRound:
        bound, step = self.config.tbt_bound_ms, self.config.be_step_ms
        return AdmissionRound(
            estimator=self.estimator,
            now_ms=now_ms,
            decode_contexts=decode_contexts,
            waiting=waiting,
            rules=_Rules(
                class_aware=True,
                max_batch_tokens=self.config.max_batch_tokens,
                promote_within_ms=self.config.promote_within_ms,
                lc_ceiling_ms=bound,
                min_lc_chunk_tokens=self.config.min_lc_chunk_tokens,
                be_share_bound_ms=bound,
                be_step_ms=step,
            ),
            be_ceiling=self._be_ceiling,
        )

    def _be_ceiling(
        self, _now_ms: float, lc_waiting: Sequence[RequestDescriptor], lc_features: BatchFeatures
    ) -> tuple[float | None, DeferReason | None]:
        if lc_waiting and not self.config.be_beside_lc_prefill:
            return None, "beside_lc_prefill"
        lc_ms = self.estimator.est_features_ms(lc_features)
        return _be_ceiling_ms(self.config.tbt_bound_ms, lc_ms, self.config.be_step_ms), None


@dataclass(slots=True)
class SlackAwarePolicy(_PolicyBase):
    estimator: LatencyEstimator
    config: DisaggConfig = field(default_factory=DisaggConfig)
    name: str = "slack-aware"

    def begin_round(
        self,
        now_ms: float,
        decode_contexts: Sequence[int],
        waiting: Sequence[RequestDescriptor],
    ) -> AdmissionRound:
        return AdmissionRound(
            estimator=self.estimator,
            now_ms=now_ms,
            decode_contexts=decode_contexts,
            waiting=waiting,
            rules=_Rules(
                class_aware=True,
                max_batch_tokens=self.config.max_batch_tokens,
                promote_within_ms=self.config.promote_within_ms,
                lc_ceiling_ms=None,
            ),
            be_ceiling=self._be_ceiling,
        )

    def lc_slack_budget_ms(self, now_ms: float, lc_waiting: Sequence[RequestDescriptor]) -> float:
        """max(0, min_j slack_j) over LC requests in queue order; `idle_be_budget_ms` if none."""
        if not lc_waiting:
            return self.config.idle_be_budget_ms
        ahead_ms = 0.0
        min_slack = math.inf
        for descriptor in lc_waiting:
            ahead_ms += self.estimator.est_features_ms(
                BatchFeatures().with_chunk(
                    descriptor.remaining_prefill_tokens, descriptor.cached_prefix_tokens
                )
            )
            min_slack = min(min_slack, self._deadline_ms(descriptor) - now_ms - ahead_ms)
        return max(0.0, min_slack)

    def _deadline_ms(self, descriptor: RequestDescriptor) -> float:
        if descriptor.priority_class == "be" and descriptor.commit_deadline_ms is not None:
            return descriptor.commit_deadline_ms  # a promoted lookahead is due at its commit
        slo = (
            descriptor.slo_ttft_ms
            if descriptor.slo_ttft_ms is not None
            else self.config.slo_ttft_ms
        )
        return descriptor.arrival_ms + slo

    def _be_ceiling(
        self, now_ms: float, lc_waiting: Sequence[RequestDescriptor], lc_features: BatchFeatures
    ) -> tuple[float | None, DeferReason | None]:
        budget = self.lc_slack_budget_ms(now_ms, lc_waiting)
        if budget <= 0:
            return None, "no_slack"
        # BE chunks delay every queued LC request by what they add to this batch: at most budget.
        return self.estimator.est_features_ms(lc_features) + budget, None


@dataclass(slots=True)
class VanillaPolicy(_PolicyBase):
    config: VanillaConfig = field(default_factory=VanillaConfig)
    estimator: LatencyEstimator | None = None  # only to report est_ms
    name: str = "vanilla"

    def begin_round(
        self,
        now_ms: float,
        decode_contexts: Sequence[int],
        waiting: Sequence[RequestDescriptor],
    ) -> AdmissionRound:
        return AdmissionRound(
            estimator=self.estimator,
            now_ms=now_ms,
            decode_contexts=decode_contexts,
            waiting=waiting,
            rules=_Rules(
                class_aware=False,
                max_batch_tokens=self.config.max_batch_tokens,
                promote_within_ms=0.0,
                lc_ceiling_ms=None,
            ),
            be_ceiling=None,
        )


def _be_ceiling_ms(bound_ms: float, lc_ms: float, step_ms: float | None) -> float:
    """The Est a batch whose decodes and LC chunks take `lc_ms` may reach with BE chunks: the
    bound, and at most `step_ms` over `lc_ms` (None: no such cap)."""
    return bound_ms if step_ms is None else min(bound_ms, lc_ms + step_ms)


def _check_inputs(
    now_ms: float, decode_contexts: Sequence[int], waiting: Sequence[RequestDescriptor]
) -> None:
    if isinstance(now_ms, bool) or not isinstance(now_ms, int | float) or not math.isfinite(now_ms):
        raise ValueError(f"now_ms must be a finite number, got {now_ms!r}")
    for index, context in enumerate(decode_contexts):
        if isinstance(context, bool) or not isinstance(context, int) or context < 0:
            raise ValueError(f"decode_contexts[{index}] must be an int >= 0, got {context!r}")
    seen: set[str] = set()
    for index, descriptor in enumerate(waiting):
        if not isinstance(descriptor, RequestDescriptor):
            raise TypeError(
                f"waiting[{index}] must be a RequestDescriptor, got {type(descriptor).__name__}"
            )
        if descriptor.rid in seen:
            raise ValueError(f"waiting[{index}].rid {descriptor.rid!r} appears twice")
        seen.add(descriptor.rid)


def _require_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


def _require_non_negative(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")


def _require_positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be an int > 0, got {value!r}")

"""One prefill-batch construction in an SGLang scheduler, seen by the admission policy.

`Scheduler._get_new_batch_prefill_raw` (wrapped) opens a `PrefillPass`; `SchedulePolicy.
calc_priority` (hooked after it sorted the waiting queue) starts the policy's round over the
waiting requests plus the in-progress chunked request and re-orders the queue (LC first); the
`PrefillAdder` subclass (see `adder.py`) asks the round about every request SGLang offers.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator, MutableSequence, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from weakref import WeakKeyDictionary

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.scheduling import AdmissionPolicy, AdmissionRound, RequestDescriptor
from lookahead_sdk.sglang_plugin.descriptors import describe, now_ms, prefill_split, request_tags
from lookahead_sdk.sglang_plugin.state import PluginState

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PrefillPass:
    """State of one `_get_new_batch_prefill_raw` call.

    `chunk_slot_taken`: SGLang keeps at most one partly prefilled ("chunked") request; once the
    continuing chunk stays unfinished (running or parked) or a new request is cut into a chunk, no
    other request of this pass may be cut.
    """

    scheduler: Any
    state: PluginState
    round: AdmissionRound | None = None
    descriptors: dict[str, RequestDescriptor] = field(default_factory=dict)
    chunk_slot_taken: bool = False
    parked_rid: str | None = None

    def descriptor_for(self, req: Any) -> RequestDescriptor | None:
        """The round's descriptor of `req`, refreshed with the prefix SGLang just matched."""
        planned = self.descriptors.get(req.rid)
        if planned is None:
            return None
        cached, remaining = prefill_split(req)
        return replace(planned, cached_prefix_tokens=cached, remaining_prefill_tokens=remaining)


_active_pass: contextvars.ContextVar[PrefillPass | None] = contextvars.ContextVar(
    "lookahead_sglang_prefill_pass", default=None
)
_policies: WeakKeyDictionary[Any, AdmissionPolicy | None] = WeakKeyDictionary()


def active_pass() -> PrefillPass | None:
    return _active_pass.get()


@contextmanager
def open_pass(scheduler: Any, state: PluginState) -> Iterator[PrefillPass]:
    prefill_pass = PrefillPass(scheduler=scheduler, state=state)
    token = _active_pass.set(prefill_pass)
    try:
        yield prefill_pass
    finally:
        _active_pass.reset(token)
        state.stats.passes += 1
        if prefill_pass.round is not None:
            state.stats.rounds += 1
            state.stats.last_round_est_ms = prefill_pass.round.est_ms


def policy_for(scheduler: Any, state: PluginState) -> AdmissionPolicy | None:
    """The scheduler's admission policy, built on first use from the plugin settings."""
    if scheduler not in _policies:
        mode = getattr(getattr(scheduler, "disaggregation_mode", None), "value", "null")
        engine_batch_tokens = scheduler.chunked_prefill_size or scheduler.max_prefill_tokens
        _policies[scheduler] = state.settings.build_policy(
            disaggregated_prefill=mode == "prefill", engine_batch_tokens=int(engine_batch_tokens)
        )
        tp_size = getattr(scheduler, "tp_size", 1)
        if tp_size and tp_size > 1:
            log.warning(
                "lookahead admission with tp_size=%s: deadline promotion and slack budgets read "
                "each rank's own clock, which SGLang does not synchronise across ranks",
                tp_size,
            )
    return _policies[scheduler]


def start_round(
    prefill_pass: PrefillPass,
    policy: AdmissionPolicy,
    waiting_queue: MutableSequence[Any],
    running_reqs: Sequence[Any],
    chunked_req: Any | None,
) -> None:
    """Describe the waiting requests, begin the policy's round and re-order the queue in place."""
    state = prefill_pass.state
    by_rid: dict[str, Any] = {}
    waiting: list[RequestDescriptor] = []
    for req in waiting_queue:
        if req.rid in by_rid:
            log.warning("duplicate rid %s in the waiting queue: no admission round", req.rid)
            return
        by_rid[req.rid] = req
        waiting.append(describe(req, tags_or_default(state, req), promoted_groups=state.promoted))
    if chunked_req is not None and not chunked_req.finished() and chunked_req.rid not in by_rid:
        waiting.append(
            describe(
                chunked_req,
                tags_or_default(state, chunked_req),
                promoted_groups=state.promoted,
                in_progress=True,
            )
        )
    decode_contexts = [int(req.seqlen) for req in running_reqs if not req.finished()]
    admission_round = policy.begin_round(now_ms(), decode_contexts, waiting)
    prefill_pass.round = admission_round
    prefill_pass.descriptors = {descriptor.rid: descriptor for descriptor in waiting}
    queued = [descriptor for descriptor in waiting if descriptor.rid in by_rid]
    waiting_queue[:] = [by_rid[descriptor.rid] for descriptor in admission_round.ordered(queued)]


def tags_or_default(state: PluginState, req: Any) -> RequestTags:
    """The tags of `req`; malformed ones (possible only when a request bypassed the ingress check)
    are counted and treated as none, so a bad request can never stop the scheduler."""
    try:
        return request_tags(req)
    except (TypeError, ValueError) as error:
        state.stats.invalid_tags += 1
        log.warning("request %s: ignoring malformed lookahead tags: %s", req.rid, error)
        return RequestTags()

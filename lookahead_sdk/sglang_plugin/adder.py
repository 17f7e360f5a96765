"""SGLang's `PrefillAdder` with the admission policy in front of it.

SGLang's scheduler loop offers waiting requests one by one to `PrefillAdder.add_one_req` and stops
at the first verdict other than CONTINUE; the continuing chunked request goes through
`add_chunked_req` first. This subclass asks the policy round about each request:

- Defer: the request is skipped (CONTINUE, it stays queued); a deferred chunked request is parked
  (it keeps its KV and SGLang's chunked-request slot, and resumes in a later pass).
- Admit(k): SGLang admits at most k tokens (its own memory and token budgets still apply); what
  it really admitted is reported back with `round.settle`.

SGLang tracks a single partly prefilled request, so once that slot is taken in a pass no other
request may be cut: it is admitted whole within the chunk budget or not at all. If an LC request
needs the slot that a parked BE chunk holds, the BE chunk is resumed until it finishes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lookahead_sdk.scheduling import Admit, Defer, RequestDescriptor
from lookahead_sdk.sglang_plugin.prefill_pass import PrefillPass, active_pass

_adder_classes: dict[type, type] = {}


def adder_class_for(base: type) -> type:
    """`base` (SGLang's PrefillAdder or a subclass another plugin chose) with the policy in front."""
    if issubclass(base, LookaheadAdderMixin):
        return base
    if base not in _adder_classes:
        _adder_classes[base] = type(f"Lookahead{base.__name__}", (LookaheadAdderMixin, base), {})
    return _adder_classes[base]


class LookaheadAdderMixin:
    """Only usable mixed into `sglang.srt.managers.schedule_policy.PrefillAdder`."""

    def add_chunked_req(self, req: Any) -> Any:
        prefill_pass = active_pass()
        descriptor = None if prefill_pass is None else prefill_pass.descriptor_for(req)
        if prefill_pass is None or prefill_pass.round is None or descriptor is None:
            return super().add_chunked_req(req)  # type: ignore[misc]
        state = prefill_pass.state
        if state.resume_rid == req.rid:
            result = super().add_chunked_req(req)  # type: ignore[misc]
            if result is None:
                state.resume_rid = None
            else:
                prefill_pass.chunk_slot_taken = True
            return result
        decision = prefill_pass.round.offer(descriptor)
        state.stats.record_decision(descriptor, decision)
        if isinstance(decision, Defer):
            state.stats.parked_chunks += 1
            prefill_pass.chunk_slot_taken = True
            prefill_pass.parked_rid = req.rid
            return req
        limit = self.rem_chunk_tokens
        if decision.tokens < descriptor.remaining_prefill_tokens:
            limit = decision.tokens if limit is None else min(limit, decision.tokens)
        with self._chunk_budget(limit):
            result = super().add_chunked_req(req)  # type: ignore[misc]
        self._settle(prefill_pass, descriptor, decision, req)
        if result is not None:
            prefill_pass.chunk_slot_taken = True
        return result

    def add_one_req(
        self, req: Any, has_chunked_req: bool, truncation_align_size: int | None
    ) -> Any:
        from sglang.srt.managers.schedule_policy import AddReqResult

        prefill_pass = active_pass()
        descriptor = None if prefill_pass is None else prefill_pass.descriptor_for(req)
        if prefill_pass is None or prefill_pass.round is None or descriptor is None:
            return super().add_one_req(req, has_chunked_req, truncation_align_size)  # type: ignore[misc]
        admission_round = prefill_pass.round
        decision = admission_round.offer(descriptor)
        prefill_pass.state.stats.record_decision(descriptor, decision)
        if isinstance(decision, Defer):
            self._forget_unadmitted(req)
            return self.budget_state()
        cut = decision.tokens < descriptor.remaining_prefill_tokens
        if prefill_pass.chunk_slot_taken and (
            cut or not self._fits_uncut(descriptor.remaining_prefill_tokens)
        ):
            admission_round.settle(req.rid, 0)
            if decision.scheduled_as == "lc" and prefill_pass.parked_rid is not None:
                prefill_pass.state.resume_rid = prefill_pass.parked_rid
                prefill_pass.state.stats.forced_resumes += 1
                return AddReqResult.OTHER  # end the pass; SGLang releases what req matched
            self._forget_unadmitted(req)
            return self.budget_state()
        if cut and self.rem_chunk_tokens is None and decision.scheduled_as == "be":
            admission_round.settle(req.rid, 0)  # chunked prefill is off: BE goes whole or not
            self._forget_unadmitted(req)
            return self.budget_state()
        if prefill_pass.chunk_slot_taken:
            limit = None
        elif cut and self.rem_chunk_tokens is not None:
            limit = min(decision.tokens, self.rem_chunk_tokens)
        else:
            limit = self.rem_chunk_tokens
        with self._chunk_budget(limit):
            verdict = super().add_one_req(req, has_chunked_req, truncation_align_size)  # type: ignore[misc]
        admitted = self._settle(prefill_pass, descriptor, decision, req)
        if admitted == 0:
            return verdict  # SGLang refused (memory, request slots): it stops the pass itself
        if self.new_chunked_req is req:
            prefill_pass.chunk_slot_taken = True
        return self.budget_state()

    # --- helpers ------------------------------------------------------------------------------

    @contextmanager
    def _chunk_budget(self, limit: int | None) -> Iterator[None]:
        """Run one admission with `rem_chunk_tokens` set to `limit` (None: no cut possible), then
        charge the tokens it used to the real chunk budget."""
        saved = self.rem_chunk_tokens
        input_before = self.rem_input_tokens
        self.rem_chunk_tokens = limit
        try:
            yield
        finally:
            used = input_before - self.rem_input_tokens
            self.rem_chunk_tokens = None if saved is None else saved - used

    def _fits_uncut(self, tokens: int) -> bool:
        return (
            self.rem_chunk_tokens is None or self.ceil_paged_tokens(tokens) <= self.rem_chunk_tokens
        )

    def _settle(
        self, prefill_pass: PrefillPass, descriptor: RequestDescriptor, decision: Admit, req: Any
    ) -> int:
        """Tell the round what SGLang really admitted of `req`; returns that token count."""
        added = bool(self.can_run_list) and self.can_run_list[-1] is req
        admitted = min(int(req.extend_len), decision.tokens) if added else 0
        if admitted < decision.tokens:
            assert prefill_pass.round is not None
            prefill_pass.round.settle(req.rid, admitted)
        if admitted > 0:
            prefill_pass.state.stats.record_admission(descriptor, decision.scheduled_as, admitted)
        return admitted

    def _forget_unadmitted(self, req: Any) -> None:
        """What SGLang's loop does for a request it matched but did not admit: drop a Mamba state
        slot that `init_next_round_input` may have staged (a no-op for attention-only models)."""
        kv = req.kv
        kv.mamba_cow_src_index = None
        kv.mamba_needs_clear = False
        if kv.holds_mamba and not getattr(req, "session", None):
            self.tree_cache.req_to_token_pool.mamba_allocator.free(kv.mamba_pool_idx.unsqueeze(-1))
            kv.mamba_pool_idx = None

"""A real `sglang.srt.managers.scheduler.Scheduler` without `__init__` (which needs a GPU): its
own methods run against real CPU memory pools, radix cache and schedule policy; only
collaborators that the prefill path merely consults are plain namespaces."""

from __future__ import annotations

import itertools
from array import array
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import SchedulePolicy
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.radix_cache import RadixCache
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

_token_ids = itertools.count(1)


def make_req(
    rid: str,
    prompt_tokens: int,
    custom_params: dict[str, Any] | None = None,
    max_new_tokens: int = 16,
) -> Req:
    """A real `Req` with a prompt of distinct token ids (no accidental prefix sharing)."""
    ids = array("q", (next(_token_ids) for _ in range(prompt_tokens)))
    return Req(
        rid, "", ids, SamplingParams(max_new_tokens=max_new_tokens, custom_params=custom_params)
    )


@dataclass
class SchedulerHarness:
    chunked_prefill_size: int = 4096
    max_prefill_tokens: int = 16384
    kv_tokens: int = 1 << 17
    request_slots: int = 64
    scheduler: Scheduler = field(init=False)

    def __post_init__(self) -> None:
        allocator = TokenToKVPoolAllocator(
            size=self.kv_tokens, dtype=torch.float16, device="cpu", kvcache=None, need_sort=False
        )
        request_pool = ReqToTokenPool(
            size=self.request_slots, max_context_len=65536, device="cpu", enable_memory_saver=False
        )
        tree_cache = RadixCache(
            CacheInitParams(
                disable=False,
                req_to_token_pool=request_pool,
                token_to_kv_pool_allocator=allocator,
                page_size=1,
            )
        )
        scheduler = object.__new__(Scheduler)
        scheduler.__dict__.update(
            waiting_queue=[],
            chunked_req=None,
            tree_cache=tree_cache,
            token_to_kv_pool_allocator=allocator,
            req_to_token_pool=request_pool,
            policy=SchedulePolicy("fcfs", tree_cache, False, False, False),
            page_size=1,
            chunked_prefill_size=self.chunked_prefill_size,
            max_prefill_tokens=self.max_prefill_tokens,
            max_running_requests=self.request_slots,
            max_prefill_bs=0,
            max_queued_requests=None,
            is_mixed_chunk=False,
            is_hybrid_swa=False,
            enable_priority_scheduling=False,
            enable_priority_preemption=False,
            abort_on_priority_when_disabled=False,
            priority_scheduling_preemption_threshold=10,
            processed_tokens_counter=0,
            disaggregation_mode=DisaggregationMode.NULL,
            spec_algorithm=SpeculativeAlgorithm.NONE,
            enable_overlap=False,
            enable_lora=False,
            enable_hicache_storage=False,
            enable_lmcache=False,
            enable_hierarchical_cache=False,
            enable_unified_cache_external_linker=False,
            truncation_align_size=None,
            dllm_config=None,
            dynamic_chunk_sizer=None,
            min_free_slots_delayer=None,
            hisparse_coordinator=None,
            tp_size=1,
            model_config=SimpleNamespace(
                vocab_size=32000, is_encoder_decoder=False, is_multimodal=False
            ),
            grammar_manager=SimpleNamespace(has_waiting_grammars=lambda: False),
            tp_worker=SimpleNamespace(
                model_runner=SimpleNamespace(attn_backend=object(), prefill_aware_swa=False)
            ),
            new_token_ratio_tracker=SimpleNamespace(current=0.7),
            beam_coordinator=SimpleNamespace(pending_member_rows=lambda batch: 0),
            load_inquirer=SimpleNamespace(_get_num_pending_tokens=lambda chunk_deduct=0: 0),
        )
        self.scheduler = scheduler

    def enqueue(self, *reqs: Req) -> None:
        """Through SGLang's own `_add_request_to_queue` (where the plugin reads promotions)."""
        for req in reqs:
            self.scheduler._add_request_to_queue(req)

    def prefill_pass(self, running: list[Req] | None = None) -> tuple[ScheduleBatch | None, Any]:
        """One `Scheduler._get_new_batch_prefill_raw` call: (prefill batch or None, running)."""
        running_batch = ScheduleBatch(reqs=list(running or []), batch_is_full=False)
        return self.scheduler._get_new_batch_prefill_raw(
            prefill_delayer_single_pass=None, running_batch=running_batch
        )

    def waiting_rids(self) -> list[str]:
        return [req.rid for req in self.scheduler.waiting_queue]


def batch_chunks(batch: ScheduleBatch | None) -> dict[str, tuple[int, int]]:
    """rid -> (new tokens computed in this batch, prefix tokens already in KV)."""
    if batch is None:
        return {}
    return {req.rid: (req.extend_len, req.prefix_len) for req in batch.reqs}


def decoding_reqs(contexts: list[int]) -> list[Req]:
    """Requests standing in for a running decode batch: only their lengths are read."""
    return [make_req(f"decode-{index}", context) for index, context in enumerate(contexts)]

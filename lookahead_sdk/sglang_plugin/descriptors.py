"""The one place that reads SGLang's `Req`: it becomes the policy's `RequestDescriptor`.

Attributes read (sglang 0.5.23 `sglang.srt.managers.schedule_batch.Req`): `rid`,
`sampling_params.custom_params`, `time_stats.scheduler_recv_time` (a `time.perf_counter()`
stamp taken when the scheduler created the request), `seqlen` (prompt + generated tokens) and
`prefix_len` (tokens already in KV: the radix-cache match, or what earlier chunks computed).
"""

from __future__ import annotations

import time
from collections.abc import Container
from typing import Any

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.scheduling import RequestDescriptor


def now_ms() -> float:
    """The policy clock: the scheduler's own `perf_counter`, in milliseconds."""
    return time.perf_counter() * 1000.0


def request_tags(req: Any) -> RequestTags:
    """The tags of a scheduler-side request (ValueError if they are malformed)."""
    custom_params = getattr(req.sampling_params, "custom_params", None)
    if not custom_params:
        return RequestTags()
    return RequestTags.from_mapping(custom_params, where="custom_params")


def prefill_split(req: Any) -> tuple[int, int]:
    """(cached prefix tokens, tokens still to prefill) of `req` now.

    The last prompt token is always computed (a full cache hit still prefills one token), so the
    cached prefix is capped at `seqlen - 1`.
    """
    total_tokens = int(req.seqlen)
    cached = max(0, min(int(req.prefix_len), total_tokens - 1))
    return cached, total_tokens - cached


def describe(
    req: Any,
    tags: RequestTags,
    *,
    promoted_groups: Container[str],
    in_progress: bool = False,
) -> RequestDescriptor:
    """A descriptor of `req` for this round. A lookahead sent with `priority_class="lc"` is a
    promoted lookahead: best-effort by nature, scheduled as latency-critical."""
    cached, remaining = prefill_split(req)
    arrival_ms = float(req.time_stats.scheduler_recv_time) * 1000.0
    group = tags.lookahead_group_id if tags.is_lookahead else None
    promoted = tags.is_lookahead and (
        tags.priority_class == "lc" or (group is not None and group in promoted_groups)
    )
    return RequestDescriptor(
        rid=req.rid,
        priority_class="be" if tags.is_best_effort else "lc",
        arrival_ms=arrival_ms,
        cached_prefix_tokens=cached,
        remaining_prefill_tokens=remaining,
        is_lookahead=tags.is_lookahead,
        program_id=tags.program_id,
        lookahead_group_id=group,
        commit_deadline_ms=(
            None if tags.commit_deadline_ms is None else arrival_ms + tags.commit_deadline_ms
        ),
        promoted=promoted,
        slo_ttft_ms=tags.slo_ttft_ms,
        in_progress=in_progress,
    )

"""Plain request descriptors: what an admission policy knows about a waiting request.

Clocks are milliseconds on one monotonic clock chosen by the caller (the simulator's virtual
clock, or `time.monotonic() * 1000` inside an engine); `commit_deadline_ms` is absolute on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lookahead_sdk.base.protocol import PRIORITY_CLASSES, PriorityClass


@dataclass(frozen=True, slots=True)
class RequestDescriptor:
    """A request waiting for (more) prefill.

    `cached_prefix_tokens`: tokens of the prompt already in KV (prefix-cache hit plus any chunks
    this request already prefilled); `remaining_prefill_tokens`: prompt tokens still to compute.
    `promoted`: an explicit raise of a best-effort lookahead to latency-critical (it is about to
    be committed). `in_progress`: part of the prompt was prefilled by an earlier chunk; deferring
    such a request pauses it (it keeps the KV it built).
    """

    rid: str
    priority_class: PriorityClass
    arrival_ms: float
    cached_prefix_tokens: int
    remaining_prefill_tokens: int
    is_lookahead: bool = False
    program_id: str | None = None
    lookahead_group_id: str | None = None
    commit_deadline_ms: float | None = None
    promoted: bool = False
    slo_ttft_ms: float | None = None
    in_progress: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.rid, str) or not self.rid:
            raise ValueError("RequestDescriptor.rid must be a non-empty string")
        if self.priority_class not in PRIORITY_CLASSES:
            raise ValueError(
                f"RequestDescriptor.priority_class must be one of {PRIORITY_CLASSES}, got "
                f"{self.priority_class!r}"
            )
        if self.is_lookahead and self.priority_class != "be":
            raise ValueError(
                "RequestDescriptor.priority_class must be 'be' when is_lookahead=True (a lookahead "
                "is best-effort; set promoted=True to schedule it as latency-critical)"
            )
        for name in ("is_lookahead", "promoted", "in_progress"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"RequestDescriptor.{name} must be a bool")
        for name in ("cached_prefix_tokens", "remaining_prefill_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"RequestDescriptor.{name} must be an int >= 0, got {value!r}")
        _require_time("arrival_ms", self.arrival_ms, optional=False)
        _require_time("commit_deadline_ms", self.commit_deadline_ms, optional=True)
        _require_time("slo_ttft_ms", self.slo_ttft_ms, optional=True)
        if self.slo_ttft_ms is not None and self.slo_ttft_ms <= 0:
            raise ValueError(f"RequestDescriptor.slo_ttft_ms must be > 0, got {self.slo_ttft_ms}")

    def is_latency_critical(self, now_ms: float, promote_within_ms: float) -> bool:
        """LC, explicitly promoted, or a lookahead due within the next `promote_within_ms` (about
        to be committed). Once its deadline has passed, a lookahead is best-effort again: the
        commit has fallen back to the synchronous path and the work can only be reused later."""
        if self.priority_class == "lc" or self.promoted:
            return True
        if not self.is_lookahead or self.commit_deadline_ms is None:
            return False
        return 0 <= self.commit_deadline_ms - now_ms <= promote_within_ms


def _require_time(name: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"RequestDescriptor.{name} must be a finite number of ms, got {value!r}")

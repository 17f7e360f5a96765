"""A simulated request: its tags (`base.protocol.RequestTags`), its token ids, and its progress."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.scheduling.requests import RequestDescriptor
from lookahead_sdk.sim.prefix_cache import BlockName


class Phase(enum.Enum):
    WAITING = "waiting"  # not admitted yet (no KV reserved)
    PREFILL = "prefill"  # admitted, prompt partly computed (chunked prefill)
    TRANSFER = "transfer"  # disaggregated: prefilled, waiting for room on the decode instance
    DECODE = "decode"
    DONE = "done"


class RequestListener(Protocol):
    """Receives a request's output as simulated time passes (the HTTP layer, or a bench)."""

    def on_token(self, request: SimRequest, now_ms: float) -> None: ...

    def on_finish(self, request: SimRequest, now_ms: float) -> None: ...


@dataclass(eq=False, slots=True)
class SimRequest:
    rid: str
    prompt: Sequence[int]
    max_new_tokens: int
    arrival_ms: float
    tags: RequestTags = field(default_factory=RequestTags)
    output_ids: Sequence[int] = ()
    listener: RequestListener | None = None
    promoted: bool = False
    # Progress, owned by the engine.
    phase: Phase = Phase.WAITING
    cached_tokens: int = 0  # prefix-cache hit at admission
    prefilled_tokens: int = 0  # prompt tokens in KV (cache hit + computed chunks)
    generated: int = 0
    token_times_ms: list[float] = field(default_factory=list)
    finish_ms: float | None = None
    names: list[BlockName] = field(default_factory=list)
    locked: list[BlockName] = field(default_factory=list)
    reserved_tokens: int = 0
    aborted: bool = False  # the client went away; its KV was freed

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not self.prompt:
            raise ValueError("prompt must hold at least one token")

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)

    @property
    def commit_deadline_abs_ms(self) -> float | None:
        deadline = self.tags.commit_deadline_ms
        return None if deadline is None else self.arrival_ms + deadline

    @property
    def first_token_ms(self) -> float | None:
        return self.token_times_ms[0] if self.token_times_ms else None

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    def output_token(self, index: int) -> int:
        return self.output_ids[index] if index < len(self.output_ids) else 0

    def descriptor(self, cached_prefix_tokens: int) -> RequestDescriptor:
        tags = self.tags
        return RequestDescriptor(
            rid=self.rid,
            priority_class="be" if tags.is_best_effort else "lc",
            arrival_ms=self.arrival_ms,
            cached_prefix_tokens=cached_prefix_tokens,
            remaining_prefill_tokens=self.prompt_tokens - cached_prefix_tokens,
            is_lookahead=tags.is_lookahead,
            program_id=tags.program_id,
            lookahead_group_id=tags.lookahead_group_id,
            commit_deadline_ms=self.commit_deadline_abs_ms,
            # A lookahead sent as "lc" is a promoted one (`RequestTags.group_to_promote`).
            promoted=self.promoted or (tags.is_lookahead and tags.priority_class == "lc"),
            slo_ttft_ms=tags.slo_ttft_ms,
            in_progress=self.phase is Phase.PREFILL and self.prefilled_tokens > self.cached_tokens,
        )

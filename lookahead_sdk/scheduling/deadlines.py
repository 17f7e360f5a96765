"""Which waiting lookaheads can still finish before their commit deadline.

A lookahead that misses its commit deadline is useless for that commit (the runtime falls back to
the synchronous transform), so under overload the prefill it gets is waste, and worse, it delays
lookaheads that could still make it. Earliest-deadline-first alone is optimal while every deadline
can be met, and collapses under overload (late work sorts first and makes the next one late: the
domino effect). The classic fix for maximising the number of jobs done on time on one machine is
Moore-Hodgson: walk the jobs in deadline order, and whenever the current one would finish late,
give up the longest job kept so far. That is what `infeasible_lookaheads` does, with job lengths
from the latency model and the share of engine time best-effort work gets.

Pure function over plain descriptors; an admission round uses it to order best-effort work (the
infeasible ones go after every feasible one), never to take room from latency-critical work.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lookahead_sdk.scheduling.requests import RequestDescriptor


@dataclass(frozen=True, slots=True)
class DeadlineTriage:
    """`past_deadline`: lookaheads whose commit deadline has already passed. `shed`: lookaheads
    still before their deadline that cannot all make it at the estimated best-effort rate; these
    are the ones Moore-Hodgson gives up so that the largest number of the others finish on time."""

    past_deadline: frozenset[str] = frozenset()
    shed: frozenset[str] = frozenset()

    @property
    def infeasible(self) -> frozenset[str]:
        return self.past_deadline | self.shed


def infeasible_lookaheads(
    now_ms: float,
    best_effort: Sequence[RequestDescriptor],
    service_ms: Callable[[RequestDescriptor], float],
    be_share: float,
) -> DeadlineTriage:
    """Triage the best-effort requests that carry a commit deadline (others are ignored).

    `service_ms(d)`: estimated engine time to prefill the rest of `d` on its own. `be_share`: the
    fraction of engine time best-effort work can expect (0..1); a lookahead's work then takes
    `service_ms / be_share` of wall time. With `be_share <= 0` nothing is known about future
    capacity, so only lookaheads already past their deadline are infeasible.
    """
    if not math.isfinite(be_share) or be_share > 1:
        raise ValueError(f"be_share must be a finite fraction <= 1, got {be_share!r}")
    deadlines = {
        d.rid: d.commit_deadline_ms
        for d in best_effort
        if d.commit_deadline_ms is not None and d.remaining_prefill_tokens > 0
    }
    past = frozenset(rid for rid, deadline in deadlines.items() if deadline < now_ms)
    if be_share <= 0:
        return DeadlineTriage(past_deadline=past)
    pending = sorted(
        (d for d in best_effort if d.rid in deadlines and d.rid not in past),
        key=lambda d: (deadlines[d.rid], d.arrival_ms, d.rid),
    )
    kept: list[tuple[float, str]] = []  # max-heap by wall time: (-wall_ms, rid)
    shed: set[str] = set()
    finish_ms = now_ms
    for descriptor in pending:
        wall_ms = service_ms(descriptor) / be_share
        heapq.heappush(kept, (-wall_ms, descriptor.rid))
        finish_ms += wall_ms
        if finish_ms > deadlines[descriptor.rid]:
            longest_negated, rid = heapq.heappop(kept)
            finish_ms += longest_negated
            shed.add(rid)
    return DeadlineTriage(past_deadline=past, shed=frozenset(shed))

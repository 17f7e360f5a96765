"""Per-process plugin state: settings, promoted lookahead groups, counters."""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from lookahead_sdk.scheduling import Admit, Decision, RequestDescriptor
from lookahead_sdk.sglang_plugin.settings import PluginSettings

log = logging.getLogger(__name__)


class PromotedGroups:
    """Lookahead groups raised to latency-critical; bounded (oldest forgotten first)."""

    def __init__(self, capacity: int = 65536) -> None:
        if capacity <= 0:
            raise ValueError(f"PromotedGroups capacity must be > 0, got {capacity}")
        self.capacity = capacity
        self._groups: OrderedDict[str, None] = OrderedDict()

    def add(self, group_id: str) -> bool:
        """Promote `group_id`; True if it was not promoted before."""
        is_new = group_id not in self._groups
        self._groups[group_id] = None
        self._groups.move_to_end(group_id)
        while len(self._groups) > self.capacity:
            self._groups.popitem(last=False)
        return is_new

    def __contains__(self, group_id: object) -> bool:
        return group_id in self._groups

    def __len__(self) -> int:
        return len(self._groups)


@dataclass(slots=True)
class AdmissionStats:
    """Counters exposed in SGLang's `/server_info` (`internal_states[i]["lookahead"]`).

    `admitted_*` count prefill admissions (a request chunked over k passes counts k times);
    `promoted_admissions`: best-effort requests admitted as latency-critical; `deferred` is keyed
    "<class>:<reason>"; `parked_chunks`: passes in which a partly prefilled BE request was paused;
    `forced_resumes`: parked BE chunks resumed because an LC request needed the chunk slot.
    """

    passes: int = 0
    rounds: int = 0
    offered: Counter[str] = field(default_factory=Counter)
    admitted_requests: Counter[str] = field(default_factory=Counter)
    admitted_tokens: Counter[str] = field(default_factory=Counter)
    promoted_admissions: int = 0
    deferred: Counter[str] = field(default_factory=Counter)
    parked_chunks: int = 0
    forced_resumes: int = 0
    promoted_groups: int = 0
    invalid_tags: int = 0
    last_round_est_ms: float | None = None

    def record_decision(self, descriptor: RequestDescriptor, decision: Decision) -> None:
        self.offered[descriptor.priority_class] += 1
        if isinstance(decision, Admit):
            return
        self.deferred[f"{descriptor.priority_class}:{decision.reason}"] += 1

    def record_admission(
        self, descriptor: RequestDescriptor, scheduled_as: str, tokens: int
    ) -> None:
        self.admitted_requests[descriptor.priority_class] += 1
        self.admitted_tokens[descriptor.priority_class] += tokens
        if descriptor.priority_class == "be" and scheduled_as == "lc":
            self.promoted_admissions += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "passes": self.passes,
            "rounds": self.rounds,
            "offered": dict(self.offered),
            "admitted_requests": dict(self.admitted_requests),
            "admitted_tokens": dict(self.admitted_tokens),
            "promoted_admissions": self.promoted_admissions,
            "deferred": dict(self.deferred),
            "parked_chunks": self.parked_chunks,
            "forced_resumes": self.forced_resumes,
            "promoted_groups": self.promoted_groups,
            "invalid_tags": self.invalid_tags,
            "last_round_est_ms": self.last_round_est_ms,
        }


@dataclass(slots=True)
class PluginState:
    """Everything the hooks share inside one SGLang process.

    `resume_rid`: a parked best-effort chunk that must run to completion because a
    latency-critical request needed SGLang's single chunked-request slot.
    """

    settings: PluginSettings
    stats: AdmissionStats = field(default_factory=AdmissionStats)
    promoted: PromotedGroups = field(default_factory=PromotedGroups)
    resume_rid: str | None = None

    def promote(self, group_id: str) -> None:
        if self.promoted.add(group_id):
            self.stats.promoted_groups += 1
            log.info("lookahead group %s promoted to latency-critical", group_id)


_state: PluginState | None = None


def plugin_state() -> PluginState:
    """The process's state, created from the environment on first use."""
    global _state
    if _state is None:
        _state = PluginState(PluginSettings.from_env())
    return _state


def reset_plugin_state(settings: PluginSettings | None = None) -> PluginState:
    """Fresh state (tests, or a process that changes its settings)."""
    global _state
    _state = PluginState(settings if settings is not None else PluginSettings.from_env())
    return _state

"""Small builders for router tests."""

from __future__ import annotations

from collections.abc import Iterable

from lookahead_sdk.router import (
    Decision,
    ForceAdmit,
    Forward,
    Restore,
    RouterCore,
    ThunderConfig,
    ThunderPolicy,
)


def thunder(*backends: tuple[str, int], **config: object) -> ThunderPolicy:
    policy = ThunderPolicy(ThunderConfig(**config))  # type: ignore[arg-type]
    for name, capacity in backends:
        policy.add_backend(name, capacity)
    return policy


def forwarded(decisions: Iterable[Decision]) -> dict[str, str]:
    """request id -> backend, for every forward in `decisions` (direct or on restore)."""
    result: dict[str, str] = {}
    for decision in decisions:
        if isinstance(decision, Forward):
            result[decision.request_id] = decision.backend
        elif isinstance(decision, Restore | ForceAdmit):
            result.update({f.request_id: f.backend for f in decision.forward})
    return result


def snapshot(policy: RouterCore) -> tuple[object, ...]:
    return (policy.programs(), policy.waiting(), policy.metrics())

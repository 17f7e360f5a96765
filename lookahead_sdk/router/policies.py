"""Policies by name, as `--policy` spells them."""

from __future__ import annotations

from lookahead_sdk.router.baselines import (
    LeastLoadedStickyPolicy,
    RoundRobinPolicy,
    SessionAffinityPolicy,
)
from lookahead_sdk.router.config import BaselineConfig, ThunderConfig
from lookahead_sdk.router.table import RouterCore
from lookahead_sdk.router.thunder import ThunderPolicy

POLICY_NAMES: tuple[str, ...] = ("thunder", "round-robin", "session", "least-loaded")


def make_policy(
    name: str,
    *,
    thunder: ThunderConfig | None = None,
    baseline: BaselineConfig | None = None,
) -> RouterCore:
    if name == "thunder":
        return ThunderPolicy(thunder)
    if name == "round-robin":
        return RoundRobinPolicy(baseline)
    if name == "session":
        return SessionAffinityPolicy(baseline)
    if name == "least-loaded":
        return LeastLoadedStickyPolicy(baseline)
    raise ValueError(f"unknown policy {name!r}; choose one of {POLICY_NAMES}")

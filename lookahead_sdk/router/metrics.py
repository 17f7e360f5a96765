"""A snapshot of the router's counters, for `/metrics` (Prometheus) and the benchmarks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackendMetrics:
    name: str
    up: bool
    capacity_tokens: int
    accounted_tokens: int
    programs: int


@dataclass(frozen=True, slots=True)
class RouterMetrics:
    policy: str
    programs: int
    active: int
    paused: int
    reasoning: int
    acting: int
    marked_for_pause: int
    held_requests: int
    in_flight_requests: int
    terminated: int  # programs released or expired so far
    forced_admits: int
    migrations: int
    pauses: int
    restores: int
    rejects: int
    lease_expirations: int
    backends: tuple[BackendMetrics, ...]
    # Restores that took room from acting programs (paused for them): an aged request's.
    preemptions: int = 0

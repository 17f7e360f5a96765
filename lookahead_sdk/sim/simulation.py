"""Virtual-time driver: a discrete-event loop over a `SimCluster` (fast, deterministic)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from lookahead_sdk.sim.cluster import SimCluster
from lookahead_sdk.sim.request import SimRequest


class Simulation:
    """Events are request arrivals and callbacks (`at`); iteration ends come from the cluster.
    At equal times: finishing iterations first, then arrivals, then starting idle workers."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.now_ms = 0.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._sequence = itertools.count()

    def at(self, time_ms: float, action: Callable[[], None]) -> None:
        if time_ms < self.now_ms:
            raise ValueError(f"cannot schedule at {time_ms} ms: the clock is at {self.now_ms} ms")
        heapq.heappush(self._events, (time_ms, next(self._sequence), action))

    def submit_at(self, request: SimRequest) -> None:
        """Submit `request` at its `arrival_ms`."""
        self.at(request.arrival_ms, lambda: self.cluster.submit(request))

    def run(self, until_ms: float | None = None) -> None:
        while True:
            candidates = [t for t in (self.cluster.next_end_ms(),) if t is not None]
            if self._events:
                candidates.append(self._events[0][0])
            if not candidates:
                return
            now = min(candidates)
            if until_ms is not None and now > until_ms:
                self.now_ms = until_ms
                return
            self.now_ms = now
            self.cluster.finish_due(now)
            while self._events and self._events[0][0] <= now:
                _, _, action = heapq.heappop(self._events)
                action()
            self.cluster.start_idle(now)

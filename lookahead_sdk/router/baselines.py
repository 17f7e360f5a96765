"""Baseline routers with the same interface as `ThunderPolicy`: they choose a backend per request
and never hold or pause (with every backend down they refuse with 503).

- `RoundRobinPolicy`: each request to the next backend in turn (a program's requests spread).
- `SessionAffinityPolicy`: a program always goes to its consistent-hash backend.
- `LeastLoadedStickyPolicy`: a program's first request goes to the backend with the fewest
  accounted tokens per capacity; later ones stick to it (until it goes down).
"""

from __future__ import annotations

from lookahead_sdk.router.config import BaselineConfig
from lookahead_sdk.router.decisions import Forward, Hold, Reject
from lookahead_sdk.router.hashring import ConsistentHashRing
from lookahead_sdk.router.state import LookaheadKind, Program, TrackedRequest
from lookahead_sdk.router.table import RouterCore


class _Baseline(RouterCore):
    def __init__(self, config: BaselineConfig | None = None) -> None:
        config = BaselineConfig() if config is None else config
        if not isinstance(config, BaselineConfig):
            raise TypeError(f"config must be a BaselineConfig, got {type(config).__name__}")
        super().__init__(lease_s=config.lease_s)
        self.config = config

    def _refusal(
        self,
        program: Program | None,
        program_id: str,
        request_id: str,
        lookahead: LookaheadKind | None,
    ) -> Reject | None:
        if not self._up_backends():
            return Reject(request_id, program_id, "no_backend", 503)
        return None

    def _route(self, program: Program, request: TrackedRequest, now: float) -> Forward | Hold:
        backend = self._pick(program)
        if program.backend != backend:
            self._attach(program, backend)
        return self._forward(program, request)

    def _pick(self, program: Program) -> str:
        raise NotImplementedError


class RoundRobinPolicy(_Baseline):
    name = "round-robin"

    def __init__(self, config: BaselineConfig | None = None) -> None:
        super().__init__(config)
        self._turn = 0

    def _pick(self, program: Program) -> str:
        up = self._up_backends()
        backend = up[self._turn % len(up)]
        self._turn += 1
        return backend.name


class SessionAffinityPolicy(_Baseline):
    name = "session"

    def __init__(self, config: BaselineConfig | None = None, virtual_nodes: int = 64) -> None:
        super().__init__(config)
        self._ring = ConsistentHashRing(virtual_nodes)

    def _on_backend_added(self, name: str) -> None:
        self._ring.add(name)

    def _pick(self, program: Program) -> str:
        up = {b.name for b in self._up_backends()}
        backend = self._ring.lookup(program.program_id, up)
        assert backend is not None, "_refusal guarantees a backend is up"
        return backend


class LeastLoadedStickyPolicy(_Baseline):
    name = "least-loaded"

    def _pick(self, program: Program) -> str:
        if program.backend is not None:
            return program.backend
        return self._least_loaded()

"""The interface every routing policy offers (what the HTTP proxy and the simulator drive)."""

from __future__ import annotations

from typing import Protocol

from lookahead_sdk.router.decisions import Admission, Decision
from lookahead_sdk.router.metrics import RouterMetrics
from lookahead_sdk.router.state import LookaheadKind, ProgramView


class RouterPolicy(Protocol):
    name: str

    def add_backend(self, name: str, capacity_tokens: int, *, slots: int | None = None) -> None: ...

    def mark_down(self, name: str, now_s: float) -> list[Decision]: ...

    def mark_up(self, name: str, now_s: float) -> list[Decision]: ...

    def request_arrived(
        self,
        program_id: str,
        request_id: str,
        new_tokens: int,
        now_s: float,
        *,
        lookahead: LookaheadKind | None = None,
    ) -> Admission: ...

    def request_finished(
        self,
        request_id: str,
        now_s: float,
        *,
        total_tokens: int | None = None,
        ok: bool = True,
    ) -> list[Decision]: ...

    def release(self, program_id: str, now_s: float) -> list[Decision]: ...

    def tick(self, now_s: float) -> list[Decision]: ...

    def program(self, program_id: str) -> ProgramView | None: ...

    def programs(self) -> list[ProgramView]: ...

    def waiting(self) -> tuple[str, ...]: ...

    def restore_order(self, now_s: float) -> tuple[str, ...]: ...

    def context_tokens(self, program_id: str) -> int | None: ...

    def metrics(self) -> RouterMetrics: ...

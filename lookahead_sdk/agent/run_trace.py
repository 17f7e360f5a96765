"""One run's trace: every model turn and every request the run's agents sent, on one clock.

The bench tables sum each turn's wait by cause over a run (`RunResult.turn_wait_s`); a trace
keeps them per turn, with the requests themselves, so one slow turn can be read on its own:
what the agent did before its request went out (a commit's wait, a synchronous transform) and
what the server ran meanwhile (its own warm-ups, a background summary, other agents' replies).
`lookahead-sdk bench ttft --trace PATH` writes one per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from lookahead_sdk.agent.loop import TurnRecord
from lookahead_sdk.client.timeline import TimelineEntry, turn_wait

DIGITS = 4  # 0.1 ms: finer than anything the traces are read for


@dataclass(frozen=True)
class RunTrace:
    """`started_at` / `ended_at`: the run's clock start and end (`time.perf_counter()`, the
    clock turns and requests are stamped with); every time in `to_json` counts from the start."""

    turns: Sequence[TurnRecord]
    requests: Sequence[TimelineEntry]
    started_at: float
    ended_at: float

    def __post_init__(self) -> None:
        if self.ended_at < self.started_at:
            raise ValueError(
                f"ended_at ({self.ended_at}) is before started_at ({self.started_at}): pass the "
                "run's perf_counter() stamps in order"
            )

    def _at(self, stamp: float | None) -> float | None:
        """A perf_counter stamp as seconds since the run started; None (or 0.0, a turn's "not
        known") stays None."""
        return round(stamp - self.started_at, DIGITS) if stamp else None

    @cached_property
    def waits(self) -> list[dict[str, float]]:
        """Each turn's TTFT split by cause (`turn_wait`, summing to the TTFT), in `turns`' order;
        empty for a turn whose request never went out. The run's tables sum these
        (`RunResult.add_wait_breakdown`); `to_json` lists them."""
        return [
            turn_wait(
                turn.started_at,
                turn.sent_at,
                turn.first_token_at,
                turn.program_id,
                self.requests,
                now=self.ended_at,
            )
            if turn.sent_at
            else {}
            for turn in self.turns
        ]

    def to_json(self) -> dict[str, Any]:
        """Turns in the order they started, each with its `waits`; requests in the order they
        were sent."""
        turns = sorted(
            zip(self.turns, self.waits, strict=True), key=lambda pair: pair[0].started_at
        )
        return {
            "duration_s": round(self.ended_at - self.started_at, DIGITS),
            "turns": [self._turn(turn, wait) for turn, wait in turns],
            "requests": [
                {
                    "kind": entry.kind,
                    "program_id": entry.program_id,
                    "path": entry.path,
                    "sent_s": self._at(entry.sent_at),
                    "first_output_s": self._at(entry.first_output_at),
                    "ended_s": self._at(entry.ended_at),
                    "batch_tokens": entry.batch_tokens,
                }
                for entry in sorted(self.requests, key=lambda entry: entry.sent_at)
            ],
        }

    def _turn(self, turn: TurnRecord, wait: dict[str, float]) -> dict[str, Any]:
        return {
            "program_id": turn.program_id,
            "agent": turn.agent,
            "step": turn.step,
            "commit": turn.commit.value,
            "ttft_s": round(turn.ttft_s, DIGITS),
            "new_tokens": turn.new_tokens,
            "context_tokens": turn.context_tokens,
            "prompt_tokens": turn.prompt_tokens,
            "cached_tokens": turn.cached_tokens,
            "unwarmed_tokens": turn.unwarmed_tokens,
            "started_s": self._at(turn.started_at),
            "sent_s": self._at(turn.sent_at),
            "first_token_s": self._at(turn.first_token_at),
            "wait_s": {cause: round(seconds, DIGITS) for cause, seconds in wait.items()},
        }

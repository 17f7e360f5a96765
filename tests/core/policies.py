"""Deterministic policies for runtime tests: outcomes depend only on the messages they see."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from lookahead_sdk import (
    Completion,
    ContextPolicy,
    LookaheadState,
    MainState,
    RequestShape,
    TransformContext,
    TransformResult,
)
from lookahead_sdk.base.messages import Message
from lookahead_sdk.core.state import LookaheadStatus
from lookahead_sdk.core.warmer import Warmer, WarmupResult, WarmupSpend


def digest(messages: Sequence[Message]) -> str:
    return hashlib.sha1(json.dumps(list(messages), sort_keys=True).encode()).hexdigest()[:12]


def drop_middle(messages: Sequence[Message]) -> list[Message]:
    """Keep the first message and the last two; add a marker naming what was dropped."""
    if len(messages) <= 3:
        return list(messages)
    return [
        messages[0],
        {"role": "user", "content": f"dropped {len(messages) - 3} of {digest(messages)}"},
        *messages[-2:],
    ]


@dataclass
class CountingPolicy(ContextPolicy):
    """Lookahead at `soft` messages, commit at `hard` (decided ahead at `ahead`, if set, when a
    model turn ends with tool calls); the transform sleeps `delays[i]` seconds on its i-th call
    and raises when the input digest is in `fail_on`."""

    soft: int = 6
    hard: int = 9
    ahead: int | None = None
    delays: list[float] = field(default_factory=list)
    fail_on: set[str] = field(default_factory=set)
    seen_inputs: list[tuple[bool, list[Message]]] = field(default_factory=list)

    name = "counting"

    def should_lookahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        return len(main) >= self.soft and lookahead.status in (
            LookaheadStatus.IDLE,
            LookaheadStatus.FAILED,
            LookaheadStatus.STALE,
        )

    def should_commit(self, main: MainState, lookahead: LookaheadState) -> bool:
        return len(main) >= self.hard

    def should_commit_ahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        return self.ahead is not None and len(main) >= self.ahead

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        call = len(self.seen_inputs)
        self.seen_inputs.append((ctx.is_lookahead, list(messages)))
        delay = self.delays[call % len(self.delays)] if self.delays else 0.0
        if delay:
            await asyncio.sleep(delay)
        if ctx.is_lookahead and digest(messages) in self.fail_on:
            raise RuntimeError("injected transform failure")
        return TransformResult(drop_middle(messages))


def user(text: str) -> Message:
    return {"role": "user", "content": text}


async def misbehave(*, hang: bool, fail: bool) -> None:
    """What a warmer call injected with a hang or a failure does before anything else."""
    if hang:
        await asyncio.sleep(3600)
    if fail:
        raise ConnectionError("engine unreachable")


class RecordingWarmer(Warmer):
    def __init__(self, *, fail: bool = False, hang: bool = False) -> None:
        self.fail, self.hang = fail, hang
        self.warmed: list[list[Message]] = []
        self.closed = False

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        await misbehave(hang=self.hang, fail=self.fail)
        self.warmed.append(list(messages))
        return WarmupResult(prompt_tokens=10 * len(messages), cached_tokens=0, seconds=0.0)

    async def aclose(self) -> None:
        self.closed = True


class FakeSummarizer:
    """Deterministic LLM stand-in for unit tests of Summarize alone."""

    def __init__(self) -> None:
        self.requests: list[tuple[list[Message], int, float]] = []

    async def complete(
        self, messages: Sequence[Message], *, max_tokens: int, temperature: float
    ) -> Completion:
        self.requests.append((list(messages), max_tokens, temperature))
        return Completion(
            text=f"summary of {len(messages) - 1} messages",
            prompt_tokens=50,
            cached_tokens=40,
            completion_tokens=8,
        )

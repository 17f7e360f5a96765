"""KeepRecent: the system prompt (and task) plus the most recent turns within a token budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lookahead_sdk.base.checks import require_flag, require_int
from lookahead_sdk.base.messages import (
    Message,
    answered_prefix_end,
    atomic_groups,
    leading_system_count,
)
from lookahead_sdk.core.policy import Budget, TransformContext, TransformResult, check_budget
from lookahead_sdk.core.state import MainState
from lookahead_sdk.strategies._limits import HARD_LIMIT, LimitTriggered


def recent_groups_start(
    messages: Sequence[Message],
    head: int,
    budget_tokens: int,
    ctx: TransformContext,
    *,
    max_turns: int | None = None,
) -> int:
    """Index where the kept recent suffix begins: whole tool-call groups, newest first, while they
    fit `budget_tokens` (and `max_turns` assistant turns). The newest group is always kept, except
    by a lookahead expecting growth: newer groups arrive before its commit and take its place.
    A newest turn still waiting for its tool results is kept even then: the results arrive in
    the suffix, and a result without its call is an orphan servers reject."""
    waiting = answered_prefix_end(messages, head) < len(messages)
    keep_newest = waiting or not (ctx.is_lookahead and ctx.expected_growth_tokens > 0)
    groups = atomic_groups(messages, head)
    start = len(messages)
    used = turns = 0
    for begin, end in reversed(groups):
        tokens = sum(ctx.count(messages[i]) for i in range(begin, end))
        group_turns = sum(messages[i].get("role") == "assistant" for i in range(begin, end))
        over_tokens = used + tokens > budget_tokens
        over_turns = max_turns is not None and turns + group_turns > max_turns
        if (start < len(messages) or not keep_newest) and (over_tokens or over_turns):
            break
        start, used, turns = begin, used + tokens, turns + group_turns
    return start


@dataclass
class KeepRecent(LimitTriggered):
    """Keep-recent-K / sliding window. `budget` bounds the whole kept context (paper: 10K of 32K);
    `max_turns` optionally bounds it in assistant turns; the first user message (the task) is
    kept when `keep_task` is set, since an agent that forgets its task is useless.

    Its lookahead starts as many turns ahead of the commit as its newest one took to be warm,
    counted in the agent's tool waits (`MainState.lookahead_turns`), plus one, between
    `min_lead_turns` (3) and `lead_turns` (6); `lead_turns` until one has been timed, or always
    when `min_lead_turns` is None. What it prefills (the kept turns, then each turn as it
    arrives) is what a synchronous commit prefills again, so on a slow engine an earlier start
    costs no extra compute and lets the warm-up run in the tool waits: three turns of ~1 s tool
    calls left a 2.4K-token window to be warmed beside the agent's decoding replies, which
    decode that much slower on a CPU. A warm-up's own time is no measure of that, since beside
    the replies it finishes sooner, at their cost; so the lead counts what it took in tool
    waits. On a fast engine the window is warm within one, and each turn of lead beyond that
    prefills the turn's tokens twice, once beside the agent's own request (docs/benchmarks.md,
    "KeepRecent's lead")."""

    budget: Budget = 10 / 32
    max_turns: int | None = None
    keep_task: bool = True
    hard_limit: Budget = HARD_LIMIT
    lookahead_at: Budget | None = None
    lead_turns: float = 6.0
    commit_ahead: bool = True
    min_lead_turns: float | None = 3.0

    name = "keep_recent"

    def __post_init__(self) -> None:
        self._check_limits()
        lowest = self.min_lead_turns
        if lowest is not None and (
            isinstance(lowest, bool)
            or not isinstance(lowest, (int, float))
            or not 0 < lowest <= self.lead_turns
        ):
            raise ValueError(
                f"min_lead_turns must be positive and at most lead_turns ({self.lead_turns}), got "
                f"{self.min_lead_turns!r}: lower it, or pass min_lead_turns=None to start the "
                "lookahead lead_turns ahead every time"
            )
        check_budget(self.budget, "budget")
        if self.max_turns is not None:
            require_int("max_turns", self.max_turns, low=1)
        require_flag("keep_task", self.keep_task)
        if type(self.budget) is type(self.hard_limit) and self.budget >= self.hard_limit:
            raise ValueError(
                f"budget ({self.budget}) must be below hard_limit ({self.hard_limit}), or the window never shrinks"
            )

    def validate(self, window_tokens: int) -> None:
        super().validate(window_tokens)
        self._check_below_hard(
            self.budget, window_tokens, "budget", "the window would never shrink"
        )

    def lead_turns_for(self, main: MainState) -> float:
        taken = main.lookahead_turns
        if self.min_lead_turns is None or taken is None:
            return self.lead_turns
        return min(self.lead_turns, max(self.min_lead_turns, taken + 1))

    def _kept_head(self, messages: Sequence[Message]) -> int:
        """The system messages, and the task (the first user message) when `keep_task` is set."""
        head = leading_system_count(messages)
        if self.keep_task and head < len(messages) and messages[head].get("role") == "user":
            head += 1
        return head

    def kept_from(self, messages: Sequence[Message], ctx: TransformContext) -> int:
        head = self._kept_head(messages)
        head_tokens = sum(ctx.count(message) for message in messages[:head])
        budget = max(
            0, ctx.budget(self.budget, "budget") - head_tokens - ctx.expected_growth_tokens
        )
        return recent_groups_start(messages, head, budget, ctx, max_turns=self.max_turns)

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        head = self._kept_head(messages)
        start = self.kept_from(messages, ctx)
        return TransformResult(
            [*messages[:head], *messages[start:]], {"dropped_messages": start - head}
        )

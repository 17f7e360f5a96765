"""Token-limit triggers shared by the strategies that rewrite the history in place."""

from __future__ import annotations

from lookahead_sdk.base.checks import require_flag, require_number
from lookahead_sdk.core.policy import Budget, ContextPolicy, resolve_budget
from lookahead_sdk.core.state import LookaheadState, LookaheadStatus, MainState

# Paper defaults, as fractions of a 32K window (15K hard limit, 11K soft trigger).
HARD_LIMIT = 15 / 32
SOFT_LIMIT = 11 / 32

IDLE_STATES = (LookaheadStatus.IDLE, LookaheadStatus.FAILED, LookaheadStatus.STALE)


class LimitTriggered(ContextPolicy):
    """Commit at `hard_limit`; start the lookahead at `lookahead_at` or `lead_turns` turns ahead
    of the hard limit at the history's measured growth per turn, whichever comes first.

    With `commit_ahead`, the commit is also decided when a model turn ends with tool calls and
    the history is within one turn of the limit (the largest turn of the last few, at most
    1/8 of the limit): the outputs to come could take it over. The commit turn is then decided
    before its outputs exist, so it brings an ordinary output, not the large one that pushed
    the history over; its tail is warmed while the tools run. A synchronous run decides the
    same way, so both commit on the same turns."""

    hard_limit: Budget
    lookahead_at: Budget | None
    lead_turns: float
    commit_ahead: bool

    def _check_limits(self) -> None:
        resolve_budget(self.hard_limit, 32768, "hard_limit")
        if self.lookahead_at is not None:
            resolve_budget(self.lookahead_at, 32768, "lookahead_at")
            if (
                type(self.lookahead_at) is type(self.hard_limit)
                and self.lookahead_at >= self.hard_limit
            ):
                raise ValueError(
                    f"lookahead_at ({self.lookahead_at}) must be below hard_limit ({self.hard_limit}): "
                    "the soft trigger has to fire before the commit"
                )
        require_number("lead_turns", self.lead_turns, low_open=True)
        require_flag("commit_ahead", self.commit_ahead)

    def validate(self, window_tokens: int) -> None:
        hard = self.hard_tokens_for(window_tokens)
        if hard > window_tokens:
            raise ValueError(
                f"hard_limit resolves to {hard} tokens, above the model's {window_tokens}-token window"
            )
        if self.lookahead_at is not None:
            soft = resolve_budget(self.lookahead_at, window_tokens, "lookahead_at")
            if soft >= hard:
                raise ValueError(
                    f"lookahead_at resolves to {soft} tokens, not below hard_limit's {hard} for a "
                    f"{window_tokens}-token window: lower lookahead_at or raise hard_limit"
                )

    def _check_below_hard(
        self, value: Budget, window_tokens: int, field_name: str, why: str
    ) -> None:
        tokens = resolve_budget(value, window_tokens, field_name)
        if tokens >= self.hard_tokens_for(window_tokens):
            raise ValueError(
                f"{field_name} resolves to {tokens} tokens, not below hard_limit: {why}"
            )

    def hard_tokens_for(self, window_tokens: int) -> int:
        return resolve_budget(self.hard_limit, window_tokens, "hard_limit")

    def hard_tokens(self, main: MainState) -> int:
        return self.hard_tokens_for(main.window_tokens)

    def soft_tokens(self, main: MainState) -> int:
        """Where the lookahead starts: `lookahead_at`, or earlier when the history's measured
        growth would leave fewer than `lead_turns` average turns, or less than one turn as
        large as the largest of the last 32, between it and the commit (a trigger the next
        turn already crosses gives the background work no time; a burst like an earlier one
        would cross the limit before any lookahead started)."""
        hard = self.hard_tokens(main)
        growth = main.tokens_per_turn
        reserve = self.next_turn_reserve(main)  # a commit decided ahead comes that much earlier
        lead = (
            None
            if growth is None
            else max(self.lead_turns_for(main) * growth, main.largest_turn_tokens or 0)
        )
        predicted = None if lead is None else max(0, hard - reserve - int(lead))
        if self.lookahead_at is None:
            return int(hard * SOFT_LIMIT / HARD_LIMIT) if predicted is None else predicted
        soft = resolve_budget(self.lookahead_at, main.window_tokens, "lookahead_at")
        if soft >= hard:
            raise ValueError(
                f"lookahead_at resolves to {soft} tokens, not below hard_limit's {hard}"
            )
        soft = max(0, soft - reserve)
        return soft if predicted is None else min(soft, predicted)

    def lead_turns_for(self, main: MainState) -> float:
        """Average turns ahead of the commit the lookahead starts (`soft_tokens`)."""
        return self.lead_turns

    def should_lookahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        return lookahead.status in IDLE_STATES and main.tokens >= self.soft_tokens(main)

    def next_turn_reserve(self, main: MainState) -> int:
        """Tokens the next turn may add, as `commit_ahead` reckons it."""
        if not self.commit_ahead:
            return 0
        return min(main.largest_recent_turn_tokens or 0, self.hard_tokens(main) // 8)

    def commit_ahead_reserve(self, main: MainState) -> int:
        return self.next_turn_reserve(main)

    def should_commit(self, main: MainState, lookahead: LookaheadState) -> bool:
        return main.tokens >= self.hard_tokens(main)

    @property
    def decides_commit_ahead(self) -> bool:
        return self.commit_ahead

    def should_commit_ahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        return self.commit_ahead and self.tokens_until_commit(main) == 0

    def tokens_until_commit(self, main: MainState) -> int | None:
        return max(0, self.hard_tokens(main) - self.next_turn_reserve(main) - main.tokens)

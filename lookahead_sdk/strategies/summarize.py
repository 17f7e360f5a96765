"""Summarize: an LLM summary of the completed history replaces it; recent turns stay verbatim."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lookahead_sdk.base.checks import require_int, require_text
from lookahead_sdk.base.messages import Message, answered_prefix_end, leading_system_count
from lookahead_sdk.core.policy import Budget, TransformContext, TransformResult, check_budget
from lookahead_sdk.strategies._limits import HARD_LIMIT, SOFT_LIMIT, LimitTriggered
from lookahead_sdk.strategies.keep_recent import recent_groups_start

SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"
DEFAULT_INSTRUCTION = (
    "Summarize the conversation above for your own later use: the task, what has been done, "
    "key findings (files, functions, problems found) and what remains. Be concise and factual."
)


@dataclass
class Summarize(LimitTriggered):
    """Soft trigger starts the summary in the background; hard trigger commits
    [system, summary, recent suffix within `recent_budget`]. Paper defaults: 11K / 15K / 4K of a
    32K window, 128-token summary at temperature 0.

    The summary request is the live context itself followed by the instruction, so the server
    reuses the cached prefix instead of prefilling the history again. On llama.cpp it runs in
    the program's branch slot, which the runtime first fills with a copy of the live slot, so
    the agent's own slot keeps its cache (see `llamacpp_slots`).
    """

    lookahead_at: Budget | None = SOFT_LIMIT
    hard_limit: Budget = HARD_LIMIT
    recent_budget: Budget = 4 / 32
    summary_tokens: int = 128
    instruction: str = DEFAULT_INSTRUCTION
    lead_turns: float = 3.0
    commit_ahead: bool = True

    name = "summarize"

    def __post_init__(self) -> None:
        self._check_limits()
        check_budget(self.recent_budget, "recent_budget")
        require_int("summary_tokens", self.summary_tokens, low=1)
        require_text("instruction", self.instruction, meaning="the summarization prompt")

    @property
    def needs_summarizer(self) -> bool:
        return True

    def validate(self, window_tokens: int) -> None:
        super().validate(window_tokens)
        self._check_below_hard(
            self.recent_budget, window_tokens, "recent_budget", "nothing would be summarized"
        )

    def kept_from(self, messages: Sequence[Message], ctx: TransformContext) -> int:
        recent_budget = max(
            0, ctx.budget(self.recent_budget, "recent_budget") - ctx.expected_growth_tokens
        )
        return recent_groups_start(messages, leading_system_count(messages), recent_budget, ctx)

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        head = leading_system_count(messages)
        recent_start = self.kept_from(messages, ctx)
        history = list(messages[head:recent_start])
        if not history:
            return TransformResult(list(messages), {"summarized_messages": 0})
        # The request is the whole live context (recent turns included) plus the instruction:
        # it extends what the server has cached (or a copy of it), so only the instruction and
        # the newest outputs are prefilled.
        request_end = max(recent_start, answered_prefix_end(messages, head))
        request = [*messages[:request_end], {"role": "user", "content": self.instruction}]
        summary = await ctx.complete(request, max_tokens=self.summary_tokens, temperature=0.0)
        summary_message: Message = {"role": "user", "content": SUMMARY_PREFIX + summary.strip()}
        return TransformResult(
            [*messages[:head], summary_message, *messages[recent_start:]],
            {"summarized_messages": len(history), "summary": summary},
        )

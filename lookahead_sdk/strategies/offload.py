"""Offload: big tool outputs go to a file store, replaced by a placeholder that says how to read them back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lookahead_sdk.base.messages import Message, content_text, with_content
from lookahead_sdk.base.tools import Tool
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import (
    Budget,
    TransformContext,
    TransformResult,
    check_budget,
    resolve_budget,
)
from lookahead_sdk.core.state import LookaheadState, LookaheadStatus, MainState
from lookahead_sdk.strategies._limits import HARD_LIMIT, LimitTriggered

PLACEHOLDER_PREFIX = "[offloaded tool output"
PREVIEW_CHARS = 160
READ_BACK_TOOL = "read_offloaded"
NEWEST_OFFLOADED = "newest_offloaded"  # strategy data: a lookahead's offloaded newest output


def placeholder(key: str, tokens: int, text: str) -> str:
    preview = " ".join(text[:PREVIEW_CHARS].split())
    return (
        f"{PLACEHOLDER_PREFIX}: {tokens} tokens, {len(text)} chars; read it back with "
        f'{READ_BACK_TOOL}(key="{key}")] {preview}...'
    )


@dataclass
class Offload(LimitTriggered):
    """Tool outputs of at least `threshold` tokens, except the newest, move to `store`. In the
    background the newest goes too (a newer one arrives before the commit), redone per output.

    Defaults are the paper's (1024-token outputs, 15K commit) scaled from a 32K window.
    """

    threshold: Budget = 1 / 32
    hard_limit: Budget = HARD_LIMIT
    lookahead_at: Budget | None = None
    lead_turns: float = 3.0
    store: OffloadStore | None = None
    # Off by default: Offload's commit waits anyway until a large output is no longer the newest,
    # so its commit turn brings an ordinary output; committing a turn earlier would only leave
    # the redo that output triggers one turn less to warm (four agents: 4-8 s hits, unwarmed).
    commit_ahead: bool = False

    name = "offload"

    def __post_init__(self) -> None:
        self._check_limits()
        check_budget(self.threshold, "threshold")
        if self.store is not None and not isinstance(self.store, OffloadStore):
            raise TypeError(f"store must be an OffloadStore, got {type(self.store).__name__}")

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        store = self.store or ctx.offload_store
        if store is None:
            raise ValueError(
                "Offload needs a store: Offload(store=OffloadStore(path)) or LookaheadRuntime(offload_store=...)"
            )
        threshold = ctx.budget(self.threshold, "threshold")
        # A lookahead is committed at a later boundary, by which a newer output has arrived: its
        # newest output will not be the newest then, so it is offloaded too.
        newest_tool = -1
        if not ctx.is_lookahead:
            newest_tool = max(
                (i for i, m in enumerate(messages) if m.get("role") == "tool"), default=-1
            )
        result: list[Message] = []
        offloaded: list[str] = []
        data: dict[str, Any] = {"offloaded": offloaded}
        last_tool = max((i for i, m in enumerate(messages) if m.get("role") == "tool"), default=-1)
        for index, message in enumerate(messages):
            content = offloadable_text(message)
            if (
                content is not None
                and index != newest_tool
                and (tokens := ctx.count(message)) >= threshold
            ):
                ref = store.put(content)
                offloaded.append(ref.key)
                text = placeholder(ref.key, tokens, content)
                if index == last_tool:  # a lookahead's newest: `finish_hit` may put it back
                    data[NEWEST_OFFLOADED] = {
                        "index": index,
                        "placeholder": text,
                        "content": message["content"],
                    }
                message = with_content(message, text)
            result.append(message)
        return TransformResult(result, data)

    def finish_hit(
        self, assembled: list[Message], result: TransformResult, suffix: Sequence[Message]
    ) -> list[Message]:
        """A lookahead offloads its newest output expecting a newer one before the commit (and
        its warm-ups prefill it so); when none came (the model answered, the user asked), that
        output is still the newest and goes in full, as a synchronous commit keeps it. Found by
        its placeholder (its key is unique), so a later pipeline stage that moved or dropped it
        is no matter; by index in a result saved before placeholders were recorded."""
        newest = result.data.get(NEWEST_OFFLOADED)
        if newest is None or any(m.get("role") == "tool" for m in suffix):
            return assembled
        text = newest.get("placeholder")
        if text is None:
            index = newest["index"]
        else:
            found = [i for i, m in enumerate(assembled) if m.get("content") == text]
            if not found:
                return assembled  # a later stage dropped or summarized it
            index = found[-1]
        return [
            *assembled[:index],
            with_content(assembled[index], newest["content"]),
            *assembled[index + 1 :],
        ]

    def should_lookahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        # Offloading costs file writes only: a ready result is redone at each boundary that
        # brings a new tool output, so at the commit only the newest output is left in full,
        # as the synchronous transform leaves it, and the warmed prefix is that whole context.
        starts = super().should_lookahead(main, lookahead) or (
            lookahead.status is LookaheadStatus.READY
            and main.tokens >= self.soft_tokens(main)
            and any(m.get("role") == "tool" for m in main.messages[lookahead.last_segment_end :])
        )
        # The scan over the history last: a boundary below the trigger stays O(1).
        return starts and self._offloadable(main, keep_newest=False)

    def should_commit(self, main: MainState, lookahead: LookaheadState) -> bool:
        """At the hard limit, if there is anything to offload: with every large output already
        a placeholder, a commit would rewrite nothing (the history then grows on, as it would
        without a policy)."""
        return super().should_commit(main, lookahead) and self._offloadable(main, keep_newest=True)

    def should_commit_ahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        # By the next model call the newest output will not be the newest any more.
        return super().should_commit_ahead(main, lookahead) and self._offloadable(
            main, keep_newest=False
        )

    def rewrites_suffix(self, assembled: MainState) -> bool:
        # A redo not ready by the boundary that brought the next output leaves that output whole
        # in the suffix; the synchronous commit offloads it (four agents: one commit 183 tokens
        # larger, which crossed the limit a turn early and made one commit more).
        return self._offloadable(assembled, keep_newest=True)

    def keeps_live_prefix(self, main: MainState, lookahead: LookaheadState) -> bool:
        # Past the trigger with every large output already offloaded, the next lookahead starts
        # at the next large output and keeps everything before it.
        return super().should_lookahead(main, lookahead) and not self._offloadable(
            main, keep_newest=False
        )

    def _offloadable(self, main: MainState, *, keep_newest: bool) -> bool:
        threshold = resolve_budget(self.threshold, main.window_tokens, "threshold")
        tools = [i for i, m in enumerate(main.messages) if m.get("role") == "tool"]
        candidates = tools[:-1] if keep_newest else tools
        return any(
            offloadable_text(main.messages[i]) is not None and main.message_tokens(i) >= threshold
            for i in candidates
        )


def offloadable_text(message: Message) -> str | None:
    """The text a tool output would be offloaded as: its content, a string or text parts only
    (what several frameworks send), unless it is a placeholder already. None for other
    messages, and for outputs with other parts (an image stays where it is)."""
    if message.get("role") != "tool":
        return None
    content = message.get("content")
    if isinstance(content, list):
        if not content or not all(
            isinstance(part, dict) and part.get("type") == "text" for part in content
        ):
            return None
        content = content_text(message)
    if not isinstance(content, str) or content.startswith(PLACEHOLDER_PREFIX):
        return None
    return content


def read_offloaded_tool(store: OffloadStore, *, max_chars: int = 4000) -> Tool:
    """The read-back tool an agent gets alongside Offload: nothing offloaded is out of reach."""

    def read_offloaded(key: str, offset: int = 0) -> str:
        text = store.read(key, offset=offset, max_chars=max_chars)
        total = len(store.get(key))
        end = offset + len(text)
        more = (
            f"\n[... {total - end} more chars: call again with offset={end}]" if end < total else ""
        )
        return text + more

    return Tool(
        name=READ_BACK_TOOL,
        description="Read back a tool output that was offloaded from the context, by its key.",
        parameters={
            "type": "object",
            "properties": {
                "key": {"type": "string", "description": "the 64-hex key from the placeholder"},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
            },
            "required": ["key"],
        },
        function=read_offloaded,
    )

"""Token counters for tests of what a failing count leaves behind."""

from __future__ import annotations

from lookahead_sdk.base.tokens import ApproxTokenCounter


class FailsOnce:
    """A token counter that fails once on a text containing `marker` (a tokenizer timing out)."""

    name = "fails-once"

    def __init__(self, marker: str) -> None:
        self.inner, self.marker, self.failed = ApproxTokenCounter(), marker, False

    def count_text(self, text: str) -> int:
        if self.marker in text and not self.failed:
            self.failed = True
            raise RuntimeError("tokenizer timed out")
        return self.inner.count_text(text)

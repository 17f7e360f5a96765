"""How often the embedded engine aborted a batch for an arriving latency-critical request
(`engine.patches`, "abort a best-effort batch"), read from its log: the line is logged at the
default verbosity, one per aborted batch, with the tokens the abort undid (computed again
later)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from lookahead_sdk.engine.patches import ABORT_LOG_LINE

_ABORT = re.compile(re.escape(ABORT_LOG_LINE) + r", (\d+) tokens undone")


@dataclass(frozen=True, slots=True)
class BatchAborts:
    aborts: int = 0
    undone_tokens: int = 0  # the aborted batches' tokens, computed again in later batches

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def batch_aborts(log_text: str) -> BatchAborts:
    """The aborted batches in a llama-server log (none for a stock server's log)."""
    undone = [int(match.group(1)) for match in _ABORT.finditer(log_text)]
    return BatchAborts(aborts=len(undone), undone_tokens=sum(undone))

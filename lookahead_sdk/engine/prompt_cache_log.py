"""What llama-server's RAM prompt cache (`--cache-ram`) did, read from its log.

When a request takes a slot whose cached prompt it shares less than half of, llama-server saves
that prompt (a copy of the slot's whole KV state) into the cache and loads the cached prompt that
best covers the new one, all in its main loop: every slot waits meanwhile. Only its trace
verbosity (`-lv 4`, `TRACE_VERBOSITY_ARGS`) logs the saves, the loads and the time each update
took; `/metrics` counts none of it. A load is what the cache is for: the loaded prompt's tokens
need no prefill. A save that no load ever uses only stalls the engine; the embedded engine skips
the save of a prompt the request marks dead (`discards`, see `engine.patches`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

TRACE_VERBOSITY_ARGS = ("-lv", "4")

_SAVE = re.compile(r"saving prompt with length +(\d+), total state size = ([0-9.]+) MiB")
_DISCARD = re.compile(r"discarding prompt with length +(\d+)")
_CANDIDATE = re.compile(
    r"- prompt with length +(\d+), lcp = +(\d+), f_keep = ([0-9.]+), f_sim = ([0-9.]+)"
)
_LOAD = re.compile(r"found better prompt with f_keep = ([0-9.]+), f_sim = ([0-9.]+)")
_UPDATE = re.compile(r"prompt cache update took ([0-9.]+) ms")


@dataclass(frozen=True, slots=True)
class PromptCacheActivity:
    saves: int = 0
    saved_tokens: int = 0
    saved_mib: float = 0.0
    discards: int = 0  # saves skipped: the request marked the slot's prompt dead
    discarded_tokens: int = 0
    loads: int = 0
    loaded_tokens: int = 0  # of the loaded prompts, the tokens the new prompt starts with
    update_s: float = 0.0  # main-loop time of the cache's updates (save + load), summed
    longest_update_s: float = 0.0

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def prompt_cache_activity(log_text: str) -> PromptCacheActivity:
    """The saves, loads and update times in a llama-server log written at trace verbosity (an
    empty activity for a log without them, e.g. one at the default verbosity)."""
    saves = saved_tokens = discards = discarded_tokens = loads = loaded_tokens = 0
    saved_mib = 0.0
    updates_ms: list[float] = []
    candidates: dict[tuple[str, str], int] = {}  # (f_keep, f_sim) -> lcp, this lookup's
    for line in log_text.splitlines():
        if (save := _SAVE.search(line)) is not None:
            saves += 1
            saved_tokens += int(save.group(1))
            saved_mib += float(save.group(2))
        elif (discard := _DISCARD.search(line)) is not None:
            discards += 1
            discarded_tokens += int(discard.group(1))
        elif "looking for better prompt" in line:
            candidates = {}
        elif (candidate := _CANDIDATE.search(line)) is not None:
            candidates[(candidate.group(3), candidate.group(4))] = int(candidate.group(2))
        elif (load := _LOAD.search(line)) is not None:
            loads += 1
            loaded_tokens += candidates.get((load.group(1), load.group(2)), 0)
        elif (update := _UPDATE.search(line)) is not None:
            updates_ms.append(float(update.group(1)))
    return PromptCacheActivity(
        saves=saves,
        saved_tokens=saved_tokens,
        saved_mib=round(saved_mib, 3),
        discards=discards,
        discarded_tokens=discarded_tokens,
        loads=loads,
        loaded_tokens=loaded_tokens,
        update_s=round(sum(updates_ms) / 1000, 4),
        longest_update_s=round(max(updates_ms, default=0.0) / 1000, 4),
    )

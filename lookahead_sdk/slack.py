"""Client-side slack admission for engines without server-side priorities (llama.cpp).

The tagging transport counts latency-critical generation requests in flight per server origin.
A `SlackGate` lets best-effort work (warm-up chunks, lookahead summaries) start only when that
count is zero, so foreground requests never share the engine with lookahead work they did not
ask for; work already sent finishes its chunk. Promoted (latency-critical) work bypasses the gate.
Only requests made through lookahead-sdk's transports are seen.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

from lookahead_sdk.tags import current_tags

GENERATION_PATH_SUFFIXES = ("/chat/completions", "/completions", "/completion", "/generate")


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def is_generation_path(path: str) -> bool:
    return path.rstrip("/").endswith(GENERATION_PATH_SUFFIXES)


class ForegroundRegistry:
    """Thread-safe count of latency-critical requests in flight per origin, and the lookahead
    groups promoted to latency-critical (their waiting work passes the gate at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight: Counter[str] = Counter()
        self._promoted: set[str] = set()

    def promote(self, group_id: str) -> None:
        with self._lock:
            self._promoted.add(group_id)

    def forget(self, group_id: str) -> None:
        with self._lock:
            self._promoted.discard(group_id)

    def is_promoted(self, group_id: str | None) -> bool:
        with self._lock:
            return group_id in self._promoted

    def begin(self, origin: str) -> None:
        with self._lock:
            self._inflight[origin] += 1

    def end(self, origin: str) -> None:
        with self._lock:
            self._inflight[origin] -= 1
            if self._inflight[origin] <= 0:
                del self._inflight[origin]

    def count(self, origin: str) -> int:
        with self._lock:
            return self._inflight.get(origin, 0)


FOREGROUND = ForegroundRegistry()


def counts_as_foreground() -> bool:
    """Untagged requests are treated as latency-critical: the conservative default."""
    tags = current_tags()
    return tags is None or tags.priority_class == "lc"


class SlackGate:
    def __init__(
        self, base_url: str, *, poll_s: float = 0.02, registry: ForegroundRegistry = FOREGROUND
    ) -> None:
        if poll_s <= 0:
            raise ValueError(f"poll_s must be positive seconds, got {poll_s}")
        self.origin = origin_of(base_url)
        self.poll_s = poll_s
        self.registry = registry
        self.waited_s = 0.0

    def has_slack(self) -> bool:
        return self.registry.count(self.origin) == 0

    async def wait(self) -> float:
        """Return once no foreground request is in flight; at once for latency-critical callers,
        and as soon as the caller's lookahead group is promoted."""
        if counts_as_foreground():
            return 0.0
        tags = current_tags()
        group_id = tags.lookahead_group_id if tags is not None else None
        started = time.perf_counter()
        # Polling, not an Event: foreground counts change on other threads and event loops.
        while not self.has_slack() and not self.registry.is_promoted(group_id):  # noqa: ASYNC110
            await asyncio.sleep(self.poll_s)
        waited = time.perf_counter() - started
        self.waited_s += waited
        return waited


class ChunkSizer:
    """Sizes best-effort prefill chunks by time, not tokens: a chunk the engine is running when a
    foreground request arrives delays that request until it ends (llama.cpp cannot preempt a
    batch), so each chunk should take about `target_s`. The engine's prefill rate is learned from
    the chunks' own timings (moving average), so the same setting suits a CPU and a GPU. Chunks
    never go below `min_tokens`: each forward pass also pays a cost that grows with the cached
    context (on llama.cpp's CPU backend ~60 ms per 1K cached tokens, measured), so tiny chunks
    would spend most of their time on it."""

    def __init__(
        self,
        *,
        target_s: float = 0.4,
        min_tokens: int = 128,
        max_tokens: int = 2048,
        initial_tokens_per_s: float = 500.0,
        smoothing: float = 0.5,
    ) -> None:
        if target_s <= 0:
            raise ValueError(f"target_s must be positive seconds, got {target_s}")
        if not 1 <= min_tokens <= max_tokens:
            raise ValueError(
                f"need 1 <= min_tokens <= max_tokens, got min_tokens={min_tokens} max_tokens={max_tokens}"
            )
        if initial_tokens_per_s <= 0:
            raise ValueError(f"initial_tokens_per_s must be positive, got {initial_tokens_per_s}")
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.target_s = target_s
        self.min_tokens = min_tokens
        self.max_tokens = max_tokens
        self.smoothing = smoothing
        self.tokens_per_s = initial_tokens_per_s

    def next_tokens(self) -> int:
        return max(self.min_tokens, min(self.max_tokens, int(self.tokens_per_s * self.target_s)))

    def observe(self, tokens: int, seconds: float) -> None:
        """A chunk prefilled `tokens` new tokens in `seconds` of engine time."""
        if tokens <= 0 or seconds <= 0:
            return
        rate = tokens / seconds
        self.tokens_per_s += self.smoothing * (rate - self.tokens_per_s)

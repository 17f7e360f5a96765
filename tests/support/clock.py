"""A virtual clock for code that takes `Callable[[], float]` time (or patches `time.monotonic`):
the test moves `now` itself."""

from __future__ import annotations


class VirtualClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

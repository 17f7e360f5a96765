"""Per-call records of the framework adapters, bounded for long-running processes.

An adapter records every model call (and times its own hooks per turn). A server running agents
for days cannot keep all of them: `CallLog` keeps the most recent ones (a ring, 1,000 by
default) and hands every record to an optional observer as it is added, so whoever wants all of
them streams them out (metrics, a file) instead of the adapter holding them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar, overload

from lookahead_sdk.errors import ConfigurationError

T = TypeVar("T")

DEFAULT_KEEP = 1000


class CallLog(Sequence[T]):
    """The `keep` most recent records, oldest first (`len`, indexing, slicing and iteration
    read them like a list); `on_record` is called with every record, kept or not.

    `names`: the adapter's argument names for `keep` and `on_record`, for error messages."""

    def __init__(
        self,
        keep: int = DEFAULT_KEEP,
        on_record: Callable[[T], None] | None = None,
        *,
        names: tuple[str, str] = ("keep_calls", "on_call"),
    ) -> None:
        keep_name, observer_name = names
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ConfigurationError(
                f"{keep_name} must be an int >= 0 (how many recent records to keep; pass "
                f"{observer_name}= to see every one), got {keep!r}"
            )
        if on_record is not None and not callable(on_record):
            raise ConfigurationError(
                f"{observer_name} must be a callable taking one record, or None; got "
                f"{type(on_record).__name__}"
            )
        self.on_record = on_record
        self._ring: deque[T] = deque(maxlen=keep)
        self._lock = threading.Lock()  # hooks of several threads record into one log

    @property
    def keep(self) -> int:
        return self._ring.maxlen or 0

    def append(self, record: T) -> None:
        with self._lock:
            self._ring.append(record)
        if self.on_record is not None:
            self.on_record(record)

    def clear(self) -> None:
        with self._lock:
            self._ring.clear()

    def _snapshot(self) -> list[T]:
        with self._lock:
            return list(self._ring)

    def __len__(self) -> int:
        return len(self._ring)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return self._snapshot()[index]
        with self._lock:
            return self._ring[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self._snapshot())  # a copy: other threads may append while the caller reads

    def __repr__(self) -> str:
        return f"CallLog(keep={self.keep}, records={len(self)})"


class HookClock:
    """Time an adapter spends in its own hooks, summed per model turn (the adapter's overhead).

    A turn runs from one model-call hook to the next, so it holds every hook around one call:
    history sync, boundary, commit check, tag merging. The last `keep` ended turns are kept;
    `on_turn` gets each turn's milliseconds once it ended (the next turn started, or `end_turn`).
    """

    def __init__(
        self, keep: int = DEFAULT_KEEP, on_turn: Callable[[float], None] | None = None
    ) -> None:
        self._ended: CallLog[float] = CallLog(keep, on_turn, names=("keep_calls", "on_turn"))
        self._current: float | None = None
        self._lock = threading.Lock()

    @property
    def turns_ms(self) -> list[float]:
        """The recent turns, oldest first; the last one may still be running."""
        with self._lock:
            current = self._current
        return [*self._ended, *([] if current is None else [current])]

    def start_turn(self) -> None:
        with self._lock:
            ended, self._current = self._current, 0.0
        if ended is not None:
            self._ended.append(ended)

    def end_turn(self) -> None:
        """The running turn is complete (the adapter closes)."""
        with self._lock:
            ended, self._current = self._current, None
        if ended is not None:
            self._ended.append(ended)

    @contextmanager
    def measure(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed_ms = (time.perf_counter() - started) * 1000
            with self._lock:
                self._current = (self._current or 0.0) + elapsed_ms

"""A record of every request a `ServerSession`'s clients send, to find where a turn's time went.

With `session.timeline = RequestTimeline()`, the session's tagging transports record each
request: what it is (`RequestKind`), its program, when it was sent, when its first output came
back (a streamed reply's first token, `client/first_output.py`) and when it ended. `wait_behind` then splits a foreground
request's wait for its first token by what else the server was running meanwhile, and
`background_overlap` says how much of each background request ran while a foreground request
waited, or ran beside a reply being decoded (on an engine with no spare compute, a CPU, that
reply streams slower by about as much). Times are `time.perf_counter()` seconds, the clock the
agent loop stamps its turns with.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

RequestKind = Literal["foreground", "warm_up", "background_llm", "slot_copy", "other"]

# What a foreground request's wait is put down to when several things ran during it: the first
# of these in flight at that instant. Background work comes first because it is what lookahead
# adds; "alone" is the request's own prefill (and the HTTP round trip) with nothing beside it.
WAIT_CAUSES: tuple[str, ...] = (
    "warm_up",
    "background_llm",
    "slot_copy",
    "other_foreground",
    "alone",
)
BACKGROUND_KINDS: tuple[RequestKind, ...] = ("warm_up", "background_llm", "slot_copy")
# A model turn's TTFT: first the time before its request went out (a commit's wait, a
# synchronous transform), then the request's wait split by `WAIT_CAUSES`.
TURN_WAIT_CAUSES: tuple[str, ...] = ("before_request", *WAIT_CAUSES)

WARM_UP_PATHS = ("/completion", "/generate")  # llama.cpp n_predict=0, SGLang max_new_tokens=0
SLOT_PATH_PART = "/slots"


def request_kind(path: str, *, foreground: bool, generation: bool) -> RequestKind:
    """What a request to `path` is: foreground generation, a best-effort warm-up (prefill-only
    endpoints), a best-effort LLM call (a lookahead summary through the chat endpoint), a
    llama.cpp slot save/restore, or anything else (tokenize, templates, probes)."""
    trimmed = path.rstrip("/")
    if SLOT_PATH_PART in trimmed:
        return "slot_copy"
    if not generation:
        return "other"
    if foreground:
        return "foreground"
    return "warm_up" if trimmed.endswith(WARM_UP_PATHS) else "background_llm"


@dataclass
class TimelineEntry:
    kind: RequestKind
    program_id: str | None
    path: str
    sent_at: float
    first_output_at: float | None = None
    ended_at: float | None = None
    # A best-effort prompt sent in batches of at most this many tokens (the embedded engine's
    # cap); None: the engine's usual batches.
    batch_tokens: int | None = None

    def first_token(self) -> None:
        if self.first_output_at is None:
            self.first_output_at = time.perf_counter()

    def end(self) -> None:
        if self.ended_at is None:
            self.ended_at = time.perf_counter()
            if self.first_output_at is None:
                self.first_output_at = self.ended_at

    def running(self, now: float) -> tuple[float, float]:
        """Its interval on the server's clock (an unfinished request runs until `now`)."""
        return self.sent_at, self.ended_at if self.ended_at is not None else now

    def prefilling(self, now: float) -> tuple[float, float]:
        """From sent to its first output: the wait a foreground request feels."""
        end = self.first_output_at if self.first_output_at is not None else self.running(now)[1]
        return self.sent_at, end


class RequestTimeline:
    """Thread-safe list of the requests one session sent (transports on several threads or
    event loops append to it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[TimelineEntry] = []

    def begin(
        self,
        kind: RequestKind,
        program_id: str | None,
        path: str,
        *,
        batch_tokens: int | None = None,
    ) -> TimelineEntry:
        entry = TimelineEntry(
            kind, program_id, path, time.perf_counter(), batch_tokens=batch_tokens
        )
        with self._lock:
            self._entries.append(entry)
        return entry

    @property
    def entries(self) -> list[TimelineEntry]:
        with self._lock:
            return list(self._entries)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def wait_behind(
    window: tuple[float, float],
    program_id: str | None,
    entries: Sequence[TimelineEntry],
    *,
    now: float | None = None,
) -> dict[str, float]:
    """Split `window` (a foreground request's send to first token, of `program_id`) by what the
    server ran meanwhile: seconds per `WAIT_CAUSES`, summing to the window's length. Another
    program's foreground request counts while it waits for its first token or decodes; the
    program's own requests are not counted against it."""
    now = time.perf_counter() if now is None else now
    start, end = window
    cause_of: dict[str, list[tuple[float, float]]] = {cause: [] for cause in WAIT_CAUSES}
    for entry in entries:
        interval = entry.running(now)
        if _overlap(interval, window) <= 0:
            continue
        if entry.kind in BACKGROUND_KINDS:
            cause_of[entry.kind].append(interval)
        elif entry.kind == "foreground" and entry.program_id != program_id:
            cause_of["other_foreground"].append(interval)
    # Sweep the window's elementary pieces; each goes to the first cause in flight over it.
    edges = sorted(
        {start, end}
        | {
            t
            for intervals in cause_of.values()
            for pair in intervals
            for t in pair
            if start < t < end
        }
    )
    seconds = dict.fromkeys(WAIT_CAUSES, 0.0)
    for left, right in itertools.pairwise(edges):
        middle = (left + right) / 2
        cause = next(
            (c for c in WAIT_CAUSES[:-1] if any(a <= middle < b for a, b in cause_of[c])),
            "alone",
        )
        seconds[cause] += right - left
    return seconds


def turn_wait(
    started_at: float,
    sent_at: float,
    first_token_at: float,
    program_id: str | None,
    entries: Sequence[TimelineEntry],
    *,
    now: float | None = None,
) -> dict[str, float]:
    """Split a model turn's TTFT (`started_at`, e.g. an adapter's model-call hook, to its first
    token) by `TURN_WAIT_CAUSES`; its request went out at `sent_at`."""
    split = {"before_request": max(0.0, sent_at - started_at)}
    split.update(wait_behind((sent_at, first_token_at), program_id, entries, now=now))
    return split


def turn_waits_by_kind(
    splits: Iterable[tuple[str, Mapping[str, float]]],
) -> dict[str, dict[str, float]]:
    """Turns' TTFT splits (`turn_wait`), each with its turn kind ("normal", "transform"),
    summed per kind and cause, as the tables report them; an empty split (the turn's request
    never went out) counts nowhere."""
    sums: dict[str, dict[str, float]] = {}
    for kind, split in splits:
        if not split:
            continue
        totals = sums.setdefault(kind, dict.fromkeys(TURN_WAIT_CAUSES, 0.0))
        for cause, seconds in split.items():
            totals[cause] += seconds
    return sums


def request_answered_at(
    first_token_at: float, entries: Iterable[TimelineEntry]
) -> TimelineEntry | None:
    """The foreground request whose reply began at `first_token_at`: the last one sent before
    it, for an agent that has one model request in flight at a time (a framework's agent, whose
    loop stamps only its hook and the first token)."""
    sent = [e for e in entries if e.kind == "foreground" and e.sent_at <= first_token_at]
    return max(sent, key=lambda entry: entry.sent_at, default=None)


def first_output_after(sent_after: float, entries: Iterable[TimelineEntry]) -> float | None:
    """When the reply to the first foreground request sent at or after `sent_after` began to
    stream: a model call's first token as the engine sent it, for a framework client that
    hands a tool call over only once complete (AutoGen's). None before it began."""
    sent = [e for e in entries if e.kind == "foreground" and e.sent_at >= sent_after]
    first = min(sent, key=lambda entry: entry.sent_at, default=None)
    return None if first is None else first.first_output_at


@dataclass
class BackgroundLoad:
    """One kind of background request over a run."""

    requests: int = 0
    seconds: float = 0.0  # summed send-to-end times
    # Of those, the seconds some foreground request was waiting for its first token,
    during_foreground_wait_s: float = 0.0
    # and the seconds, besides those, some foreground reply was being decoded: the rest ran
    # while no foreground request was in flight.
    during_foreground_decode_s: float = 0.0
    # The requests sent in capped batches (`TimelineEntry.batch_tokens`), and those seconds.
    small_batch_requests: int = 0
    small_batch_seconds: float = 0.0
    small_batch_during_foreground_decode_s: float = 0.0


def background_overlap(
    entries: Iterable[TimelineEntry], *, now: float | None = None
) -> dict[str, BackgroundLoad]:
    """Per background kind: how many requests, how long they ran, how much of that time a
    foreground request was waiting (the time they could have delayed one) and how much of the
    rest a foreground reply was being decoded (the time they could have slowed one)."""
    now = time.perf_counter() if now is None else now
    listed = list(entries)
    foreground = [entry for entry in listed if entry.kind == "foreground"]
    waits = _union([entry.prefilling(now) for entry in foreground])
    busy = _union([entry.running(now) for entry in foreground])
    loads = {kind: BackgroundLoad() for kind in BACKGROUND_KINDS}
    for entry in listed:
        if entry.kind not in loads:
            continue
        load, interval = loads[entry.kind], entry.running(now)
        waited = sum(_overlap(interval, wait) for wait in waits)
        load.requests += 1
        load.seconds += interval[1] - interval[0]
        load.during_foreground_wait_s += waited
        # A foreground request is in flight over `busy`: waiting for its first token or
        # decoding; what is not a wait there is a decode.
        in_flight = sum(_overlap(interval, span) for span in busy)
        decode = max(0.0, in_flight - waited)
        load.during_foreground_decode_s += decode
        if entry.batch_tokens is not None:
            load.small_batch_requests += 1
            load.small_batch_seconds += interval[1] - interval[0]
            load.small_batch_during_foreground_decode_s += decode
    return loads


def reply_decode_s(entries: Iterable[TimelineEntry], *, now: float | None = None) -> float:
    """The time foreground replies spent decoding (first output to end), summed: on an engine
    with no spare compute, background work beside them makes it longer."""
    now = time.perf_counter() if now is None else now
    return sum(
        entry.running(now)[1] - entry.first_output_at
        for entry in entries
        if entry.kind == "foreground" and entry.first_output_at is not None
    )


def engine_idle_gaps(
    entries: Iterable[TimelineEntry], *, started_at: float, ended_at: float
) -> list[tuple[float, float]]:
    """The intervals between `started_at` and `ended_at` with no request to the engine in flight
    (foreground, background or slot copy; tokenize and template calls aside), in order."""
    busy = _union(
        (max(start, started_at), min(end, ended_at))
        for start, end in (entry.running(ended_at) for entry in entries if entry.kind != "other")
        if end > started_at and start < ended_at
    )
    edges = [started_at, *(edge for span in busy for edge in span), ended_at]
    return [(start, end) for start, end in zip(edges[::2], edges[1::2], strict=True) if end > start]


def engine_idle_s(entries: Iterable[TimelineEntry], *, started_at: float, ended_at: float) -> float:
    """Seconds with no request to the engine in flight (`engine_idle_gaps`): the idle time a
    run left for background work. A synchronous run that leaves little of it cannot hide a
    lookahead's extra work, which then lengthens the run by about as much."""
    gaps = engine_idle_gaps(entries, started_at=started_at, ended_at=ended_at)
    return sum(end - start for start, end in gaps)


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def summed_turn_waits(
    runs: Iterable[Mapping[str, Mapping[str, float]]],
) -> dict[str, dict[str, float]]:
    """Several runs' turn waits (per turn kind, per cause, summed over the turns) as one run's:
    summed again, so that divided by the pooled turns they stay per-turn means."""
    pooled: dict[str, dict[str, float]] = {}
    for waits in runs:
        for kind, causes in waits.items():
            sums = pooled.setdefault(kind, {})
            for cause, seconds in causes.items():
                sums[cause] = sums.get(cause, 0.0) + seconds
    return pooled


def mean_background(
    runs: Sequence[Mapping[str, Mapping[str, float]]],
) -> dict[str, dict[str, float]]:
    """Several runs' `background_overlap` records (as dicts) as one run's: the mean per run."""
    pooled: dict[str, dict[str, float]] = {}
    for loads in runs:
        for kind, load in loads.items():
            per_run = pooled.setdefault(kind, {})
            for key, value in load.items():
                per_run[key] = per_run.get(key, 0.0) + value / len(runs)
    return pooled

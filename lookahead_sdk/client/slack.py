"""Client-side slack admission for engines without server-side priorities (llama.cpp).

The tagging transports of a `ServerSession` count that server's latency-critical generation
requests, in flight and still waiting for their first token. A `SlackGate` lets best-effort work (warm-up chunks,
lookahead summaries) start only when none waits for its first token, and by preference only when
none is in flight at all, so no foreground prefill queues behind lookahead work it did not ask
for and no reply decodes slower for it while idle time would do; work already sent finishes its
chunk. Promoted (latency-critical) work bypasses the
gate. Only requests made through the session's transports are seen.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Literal
from urllib.parse import urlsplit

from lookahead_sdk.base.averages import moving_average
from lookahead_sdk.base.tags import BackgroundWork, current_tags, current_work

GENERATION_PATH_SUFFIXES = ("/chat/completions", "/completions", "/completion", "/generate")


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def is_generation_path(path: str) -> bool:
    return path.rstrip("/").endswith(GENERATION_PATH_SUFFIXES)


class ForegroundRequest:
    """One latency-critical request in flight: waiting for its first token (prefill), then
    decoding, then ended. Each transition counts once, whatever order the callbacks come in."""

    def __init__(self, registry: ForegroundRegistry, program_id: str | None = None) -> None:
        self._registry = registry
        self.program_id = program_id
        self.decoding = self.ended = False

    def first_token(self) -> None:
        if not self.decoding:  # called for every streamed chunk: the lock only for the first
            self._registry._advance(self, ended=False)

    def end(self) -> None:
        self._registry._advance(self, ended=True)


# How long an announced model call (`ForegroundRegistry.expect`) holds best-effort work back if
# it is never sent (the agent stopped after its tools instead).
EXPECTED_WITHIN_S = 1.0
# How long a program's best-effort request waits for the model call that program announced to be
# sent first (`ForegroundRegistry.until_sent`): long enough for an agent's next request, sent
# right after the boundary that announced it, short where that request is not seen (a model
# client outside the session's transports).
SEND_FIRST_WITHIN_S = 0.05
SEND_FIRST_POLL_S = 0.001
# Per program, the gaps between its requests (its tool calls, mostly) that forecast its next one.
GAPS_KEPT = 16
GAPS_TO_FORECAST = 4  # fewer observed: no forecast for that program
PROGRAMS_FORECAST = 1024  # idle programs tracked; beyond it the longest idle is forgotten
BUSY_KEPT_S = 300.0  # how far back busy stretches are kept (`ForegroundRegistry.idle_share`)


class ForegroundRegistry:
    """Thread-safe counts of one server's latency-critical requests: in flight, and still
    waiting for their first token. One per `ServerSession`, fed by its tagging transports, and
    by runtimes announcing a model call they are about to make (`expect`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight = 0
        self._prefilling = 0
        self._expected: dict[str | None, float] = {}  # program -> deadline (monotonic)
        self._inflight_by_program: dict[str, int] = {}
        # When one has been in flight without a break: the current stretch, the recent ones.
        self._created = time.monotonic()
        self._busy_since: float | None = None
        self._busy_stretches: deque[tuple[float, float]] = deque()
        self._idle_since: dict[str, float] = {}  # program with none in flight -> since when
        self._gaps: dict[str, deque[float]] = {}  # program -> its recent idle gaps (seconds)

    def expect(self, program_id: str | None, within_s: float = EXPECTED_WITHIN_S) -> None:
        """`program_id` is about to send a latency-critical request (its tools returned; its
        model call is next). Until that request is sent, or `within_s` passes, it counts as one
        waiting for its first token: best-effort work started at the same moment (a warm-up
        of the tool output just appended) would otherwise go first and the request would wait
        for its chunk."""
        if not within_s > 0:  # NaN too: an announcement that never expires
            raise ValueError(f"within_s must be positive seconds, got {within_s}")
        with self._lock:
            self._expected[program_id] = time.monotonic() + within_s

    def forget(self, program_id: str) -> None:
        """`program_id` ended (a sub-agent, a finished run): it makes no next request to
        forecast. Its requests in flight, if any, still end as usual."""
        with self._lock:
            self._idle_since.pop(program_id, None)
            self._gaps.pop(program_id, None)
            self._expected.pop(program_id, None)

    def announced(self, program_id: str | None) -> bool:
        """Whether `program_id` announced a model call (`expect`) not sent yet."""
        with self._lock:
            self._announced()
            return program_id in self._expected

    async def until_sent(
        self, program_id: str | None, within_s: float = SEND_FIRST_WITHIN_S
    ) -> float:
        """Wait (at most `within_s`) while `program_id` has an announced model call not sent
        yet; the seconds waited. A program's best-effort request goes out after that call, so
        a server's admission sees the agent's turn first: the warm-up of the output the turn
        carries, started at the same boundary, would otherwise often arrive first and run a
        chunk the turn then waits for."""
        started = time.perf_counter()
        # Polling, not an Event: requests are sent on other threads and event loops too.
        while self.announced(program_id) and time.perf_counter() - started < within_s:  # noqa: ASYNC110
            await asyncio.sleep(SEND_FIRST_POLL_S)
        return time.perf_counter() - started

    def wait_sent(self, program_id: str | None, within_s: float = SEND_FIRST_WITHIN_S) -> float:
        """`until_sent` for a caller on a thread without an event loop."""
        started = time.perf_counter()
        while self.announced(program_id) and time.perf_counter() - started < within_s:
            time.sleep(SEND_FIRST_POLL_S)
        return time.perf_counter() - started

    def begin(self, program_id: str | None = None) -> ForegroundRequest:
        """A latency-critical request of `program_id` is sent; it is the one that program
        announced, or (untagged) the oldest announced one."""
        with self._lock:
            if self._expected.pop(program_id, None) is None and program_id is None:
                for announced in self._expected:
                    del self._expected[announced]
                    break
            if self._inflight == 0:
                self._busy_since = time.monotonic()
            self._inflight += 1
            self._prefilling += 1
            if program_id is not None:
                idle_since = self._idle_since.pop(program_id, None)
                if idle_since is not None:
                    gaps = self._gaps.setdefault(program_id, deque(maxlen=GAPS_KEPT))
                    gaps.append(time.monotonic() - idle_since)
                count = self._inflight_by_program.get(program_id, 0)
                self._inflight_by_program[program_id] = count + 1
        return ForegroundRequest(self, program_id)

    def forecast_requests(self) -> list[float]:
        """Cautious forecasts of the next latency-critical requests, soonest first: one per
        program with none in flight, a low quantile of that program's own recent gaps between
        requests (its tool calls mostly) less the time it has been idle; 0 when one is due.
        No forecast for a program without enough history, or idle for over twice its longest
        gap (it stopped, or this tool call is unlike the earlier ones). Best-effort chunks are
        sized to end before the soonest (`ChunkSizer`)."""
        now = time.monotonic()
        forecasts: list[float] = []
        with self._lock:
            for program_id, idle_since in self._idle_since.items():
                gaps = self._gaps.get(program_id)
                if gaps is None or len(gaps) < GAPS_TO_FORECAST:
                    continue
                idle_s = now - idle_since
                if idle_s > 2 * max(gaps):
                    continue
                low = sorted(gaps)[len(gaps) // 10]
                forecasts.append(max(0.0, low - idle_s))
        return sorted(forecasts)

    @property
    def inflight(self) -> int:
        """Latency-critical requests in flight or announced."""
        with self._lock:
            return self._inflight + self._announced()

    @property
    def prefilling(self) -> int:
        """Latency-critical requests in flight that have not received a first token, or
        announced."""
        with self._lock:
            return self._prefilling + self._announced()

    def prefilling_except(self, program_id: str | None) -> int:
        """`prefilling`, less `program_id`'s own announced model call: the latency-critical
        prompts that another program's best-effort work would wait behind."""
        with self._lock:
            self._announced()  # drops announcements past due
            others = sum(1 for announced in self._expected if announced != program_id)
            return self._prefilling + others

    def idle_share(self, window_s: float) -> float:
        """The share of the last `window_s` seconds (at most `BUSY_KEPT_S`, or the time since
        this registry was made if shorter) in which no latency-critical request was in flight:
        about half for one agent whose tool calls take as long as its model calls, little for
        an engine serving several agents."""
        now = time.monotonic()
        start = max(now - min(window_s, BUSY_KEPT_S), self._created)
        if now <= start:
            return 1.0
        with self._lock:
            stretches = [stretch for stretch in self._busy_stretches if stretch[1] > start]
            if self._busy_since is not None:
                stretches.append((self._busy_since, now))
        busy = sum(end - max(begin, start) for begin, end in stretches)
        return max(0.0, 1.0 - busy / (now - start))

    def _announced(self) -> int:
        """Announced requests not sent yet and still due (called under the lock)."""
        if self._expected:
            now = time.monotonic()
            for program_id in [p for p, due in self._expected.items() if due <= now]:
                del self._expected[program_id]
        return len(self._expected)

    def _advance(self, request: ForegroundRequest, *, ended: bool) -> None:
        """`request` got its first token (ended=False) or ended."""
        with self._lock:
            if request.ended:
                return
            if not request.decoding:
                request.decoding = True
                self._prefilling -= 1
            if ended:
                request.ended = True
                self._inflight -= 1
                if self._inflight == 0 and self._busy_since is not None:
                    now = time.monotonic()
                    self._busy_stretches.append((self._busy_since, now))
                    self._busy_since = None
                    while self._busy_stretches[0][1] < now - BUSY_KEPT_S:
                        self._busy_stretches.popleft()
                program_id = request.program_id
                if program_id is not None:
                    left = self._inflight_by_program.pop(program_id, 1) - 1
                    if left > 0:
                        self._inflight_by_program[program_id] = left
                    else:
                        self._idle_since[program_id] = time.monotonic()
                        if len(self._idle_since) > PROGRAMS_FORECAST:  # idle the longest: gone
                            forgotten = next(iter(self._idle_since))
                            del self._idle_since[forgotten]
                            self._gaps.pop(forgotten, None)


def counts_as_foreground() -> bool:
    """Untagged requests are treated as latency-critical: the conservative default."""
    tags = current_tags()
    return tags is None or tags.priority_class == "lc"


GateAdmission = Literal["idle-first", "decode", "idle"]
GATE_ADMISSIONS: tuple[GateAdmission, ...] = ("idle-first", "decode", "idle")
# Measured on the embedded engine (docs/benchmarks.md): background work in idle time costs the
# agent nothing; beside a decoding reply it stretches that reply by the chunk's time (a CPU has
# no spare compute), which made one agent's lookahead runs 6-9% longer than sync. "decode" is
# still the only slack where agents keep the engine busy (4 agents) and where a sub-agent's
# context is prefilled while its delegation streams; "idle-first" uses it only then.
DEFAULT_GATE_ADMISSION: GateAdmission = "idle-first"
# "idle-first": work whose commit is expected within this many seconds (or not forecast) may
# run beside a decoding reply; about one agent turn with its tool call on the embedded engine.
DUE_WITHIN_S = 4.0
# "idle-first": an engine idle less than this share of the last IDLE_WINDOW_S has too little
# idle time to wait for (several agents keep it busy), and "decode" applies.
MIN_IDLE_SHARE = 0.25
IDLE_WINDOW_S = 20.0


class SlackGate:
    """When best-effort work (warm-up chunks, lookahead summaries, slot copies) may use the
    engine. Never while a latency-critical request waits for its first token or is announced
    (`ForegroundRegistry.expect`); one arriving during a chunk waits for it (`ChunkSizer` keeps
    chunks short). Beyond that, by `admit`:

    - "idle": only when no latency-critical request is in flight;
    - "decode": also while those in flight are all decoding. A chunk then shares the engine
      with them and their inter-token gap grows by up to the chunk's time (the paper's hybrid
      batching, with `ChunkSizer.target_s` as the inter-token bound);
    - "idle-first" (default): idle time first; beside decoding replies only for work that is
      due (`BackgroundWork.due_at` within `due_within_s`, or not forecast) and that the idle
      time expected before its commit cannot finish (`BackgroundWork.outlasts_idle`, at the
      engine's recent idle share), or while the engine was idle less than `min_idle_share` of
      the last `idle_window_s` (several agents keep it busy: waiting for idle time would
      starve the work).

    Promoted work passes at once."""

    def __init__(
        self,
        foreground: ForegroundRegistry,
        *,
        admit: GateAdmission = DEFAULT_GATE_ADMISSION,
        poll_s: float = 0.02,
        due_within_s: float = DUE_WITHIN_S,
        min_idle_share: float = MIN_IDLE_SHARE,
        idle_window_s: float = IDLE_WINDOW_S,
    ) -> None:
        if not isinstance(foreground, ForegroundRegistry):
            raise TypeError(
                "SlackGate watches one server's foreground requests: pass its "
                f"ServerSession.foreground (or use session.gate()), got {type(foreground).__name__}"
            )
        for name, seconds in (
            ("poll_s", poll_s),
            ("due_within_s", due_within_s),
            ("idle_window_s", idle_window_s),
        ):
            if not seconds > 0:
                raise ValueError(f"{name} must be positive seconds, got {seconds}")
        if not math.isfinite(poll_s):
            raise ValueError(f"poll_s must be a finite number of seconds, got {poll_s}")
        if idle_window_s > BUSY_KEPT_S:
            raise ValueError(
                f"idle_window_s must be at most {BUSY_KEPT_S:g} seconds (the busy time kept), "
                f"got {idle_window_s}"
            )
        if not 0 <= min_idle_share <= 1:
            raise ValueError(f"min_idle_share must be a share in [0, 1], got {min_idle_share}")
        if admit not in GATE_ADMISSIONS:
            raise ValueError(f"admit must be one of {GATE_ADMISSIONS}, got {admit!r}")
        self.foreground = foreground
        self.admit = admit
        self.poll_s = poll_s
        self.due_within_s = due_within_s
        self.min_idle_share = min_idle_share
        self.idle_window_s = idle_window_s
        self.waited_s = 0.0

    def has_slack(self, work: BackgroundWork | None = None) -> bool:
        """Whether best-effort work for `work` may start now (see `admit`)."""
        foreground = self.foreground
        if foreground.inflight == 0:
            return True
        if self.admit == "idle" or foreground.prefilling > 0:
            return False
        if self.admit == "decode":
            return True
        idle_share = foreground.idle_share(self.idle_window_s)
        if idle_share < self.min_idle_share:
            return True
        return (
            work is not None
            and work.due_within(self.due_within_s)
            and work.outlasts_idle(idle_share)
        )

    def must_yield(self) -> bool:
        """For best-effort work already running (a lookahead summary decoding): whether it
        should stop at its next token and wait for slack again, because a foreground request
        waits for the engine. False for latency-critical callers and promoted work."""
        return not counts_as_foreground() and self._holds(current_work())

    def _holds(self, work: BackgroundWork | None) -> bool:
        """Best-effort work for `work` must not run now: no slack, and not promoted."""
        return not (work is not None and work.promoted) and not self.has_slack(work)

    async def wait(self, *, until: Callable[[], bool] | None = None) -> float:
        """Return once the engine has slack (see `admit`); at once for latency-critical callers,
        as soon as the lookahead the caller works for is promoted (`base.tags.current_work`),
        or once `until()` holds (the caller no longer wants to send: check it again after)."""
        if counts_as_foreground():
            return 0.0
        work = current_work()
        started = time.perf_counter()
        # Polling, not an Event: foreground counts change on other threads and event loops.
        while self._holds(work) and not (until is not None and until()):  # noqa: ASYNC110
            await asyncio.sleep(self.poll_s)
        waited = time.perf_counter() - started
        self.waited_s += waited
        return waited


def check_timing(target_s: float, smoothing: float) -> None:
    """The settings every time-based sizer takes."""
    if not (math.isfinite(target_s) and target_s > 0):
        raise ValueError(f"target_s must be positive finite seconds, got {target_s}")
    if not 0 < smoothing <= 1:
        raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")


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
        check_timing(target_s, smoothing)
        if not 1 <= min_tokens <= max_tokens:
            raise ValueError(
                f"need 1 <= min_tokens <= max_tokens, got min_tokens={min_tokens} max_tokens={max_tokens}"
            )
        if not (math.isfinite(initial_tokens_per_s) and initial_tokens_per_s > 0):
            raise ValueError(
                f"initial_tokens_per_s must be a positive finite rate, got {initial_tokens_per_s}"
            )
        self.target_s = target_s
        self.min_tokens = min_tokens
        self.max_tokens = max_tokens
        self.smoothing = smoothing
        self.tokens_per_s = initial_tokens_per_s

    def next_tokens(self, within_s: float | None = None) -> int:
        """Tokens for the next chunk: `target_s` of prefill, or less when a foreground request
        is forecast within `within_s` (the soonest of `ForegroundRegistry.forecast_requests`),
        so the chunk ends before it arrives; never fewer than `min_tokens`."""
        target_s = self.target_s if within_s is None else min(self.target_s, within_s)
        return max(self.min_tokens, min(self.max_tokens, int(self.tokens_per_s * target_s)))

    def observe(self, tokens: int, seconds: float) -> None:
        """A chunk prefilled `tokens` new tokens in `seconds` of engine time."""
        if tokens <= 0 or seconds <= 0:
            return
        rate = tokens / seconds
        self.tokens_per_s += self.smoothing * (rate - self.tokens_per_s)


class BatchSizer:
    """Sizes the engine batches of best-effort prompts by time. On the embedded engine (its
    llama.cpp edits, `engine.patches`) a best-effort request's `best_effort_batch_tokens` caps
    the batches its prompt goes in, and a latency-critical prompt arriving meanwhile waits for
    the one batch running, so each should take about `target_s`. A batch's time grows with the
    context it extends, so the size follows the measurements: each observed chunk's seconds
    per batch moves it toward the target, down to `min_tokens`. Other servers ignore the field.

    Measured on this package's CPU engine (2 threads), a batch of 16 tokens takes 42 ms at no
    context, 62 ms at 1K, 77 ms at 2K and 105 ms at 3.5K (128 tokens: 218 / 382 / 557 / 946 ms).
    Below 16 tokens a batch's fixed part dominates: 8 tokens still take 29-65 ms, and background
    prefill ran so much slower that Isolate's sub-agent contexts were not ready in time (one
    agent, transform-turn p50 0.52 s at a 4-token floor against 0.09 s at 16). Hence the floor
    of 16: a foreground prompt waits at most ~50 ms behind best-effort work at small contexts,
    ~0.1 s at 3.5K."""

    def __init__(
        self,
        *,
        target_s: float = 0.05,
        min_tokens: int = 16,
        max_tokens: int = 128,
        initial_tokens: int = 16,
        smoothing: float = 0.5,
    ) -> None:
        check_timing(target_s, smoothing)
        if not 1 <= min_tokens <= initial_tokens <= max_tokens:
            raise ValueError(
                "need 1 <= min_tokens <= initial_tokens <= max_tokens, got "
                f"{min_tokens}, {initial_tokens}, {max_tokens}"
            )
        self.target_s = target_s
        self.min_tokens = min_tokens
        self.max_tokens = max_tokens
        self.smoothing = smoothing
        self._tokens = float(initial_tokens)
        self.tokens_per_s: float | None = None  # measured in these batches; None: not yet

    @property
    def tokens(self) -> int:
        return max(self.min_tokens, min(self.max_tokens, round(self._tokens)))

    def observe(self, tokens: int, seconds: float, batch_tokens: int) -> None:
        """A best-effort prompt of `tokens` new tokens, sent with batches of `batch_tokens`,
        took `seconds` of engine time."""
        if tokens <= 0 or seconds <= 0 or batch_tokens <= 0:
            return
        rate = tokens / seconds
        self.tokens_per_s = moving_average(self.tokens_per_s, rate, self.smoothing)
        per_batch_s = seconds / -(-tokens // batch_tokens)
        proposal = batch_tokens * self.target_s / per_batch_s
        self._tokens += self.smoothing * (proposal - self._tokens)
        self._tokens = max(self.min_tokens, min(self.max_tokens, self._tokens))

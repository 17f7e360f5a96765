"""LookaheadRuntime: runs a program's context transform ahead of time and commits it safely.

One runtime per program (agent). The agent appends messages, calls `boundary()` when a segment
(turn or tool output) completes, and calls `prepare()` right before every model call:

    runtime.append(assistant_message, tool_message)
    await runtime.boundary()                 # may start the transform in the background
    messages = await runtime.prepare()       # commits at the hard limit; the context to send

Guarantees:
- at most one background job (transform, then warm-up) per program; boundaries arriving while it
  runs coalesce into one pending boundary (the newest supersedes older ones);
- a result is committed only if the prefix it covers is still exactly the start of the live
  history (prefix signature); otherwise it is stale and the synchronous transform runs instead;
- a commit the policy decides ahead (`should_commit_ahead`, when a model turn ends with tool
  calls) happens at the next model call, in both modes, if the history still extends the prefix
  it was decided on;
- a failed or timed-out lookahead falls back to the synchronous transform; a failed warm-up only
  loses the cache benefit, never the result;
- `aclose()` cancels and awaits everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Coroutine, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any, Literal

from lookahead_sdk.base.messages import Message, calls_tools
from lookahead_sdk.base.tags import RequestTags, current_tags, use_tags
from lookahead_sdk.base.tokens import TokenCounter
from lookahead_sdk.client.slack import FOREGROUND
from lookahead_sdk.client.warmers import (
    RequestShape,
    Warmer,
    WarmupSpend,
    keywords_accepted,
    notify_warmer,
)
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import (
    CompletionClient,
    ContextPolicy,
    TransformContext,
    TransformResult,
    resolve_policy,
)
from lookahead_sdk.core.state import (
    LookaheadState,
    LookaheadStatus,
    MainState,
    PartialOutput,
    Snapshot,
)

log = logging.getLogger(__name__)

RuntimeMode = Literal["lookahead", "sync"]
STATE_FORMAT_VERSION = 1


class CommitKind(StrEnum):
    NONE = "none"  # no commit needed: send the live history
    HIT = "hit"  # the lookahead result (+ suffix) was committed
    FALLBACK = "fallback"  # lookahead missing, failed or stale: synchronous transform
    SYNC = "sync"  # runtime in sync mode: synchronous transform by design


@dataclass(frozen=True)
class CommitOutcome:
    kind: CommitKind
    messages: list[Message]
    covered_end: int | None = None  # for HIT: how much of the old history the result covered
    reason: str = ""
    waited_s: float = 0.0  # time spent waiting for a running lookahead (after promotion)
    transform_s: float = 0.0  # synchronous transform time on the critical path
    decided_ahead: bool = False  # decided when the model's turn ended (`should_commit_ahead`)

    @property
    def committed(self) -> bool:
        return self.kind is not CommitKind.NONE


@dataclass
class RuntimeStats:
    boundaries: int = 0
    lookaheads_started: int = 0
    superseded_boundaries: int = 0
    commits: int = 0
    hits: int = 0
    stale: int = 0
    fallbacks: int = 0
    failures: int = 0
    abandoned: int = 0
    promotions: int = 0
    warmups: int = 0
    warmup_failures: int = 0
    live_copies: int = 0  # live context copied into the lookahead branch (`keeps_live_prefix`)
    overflow_transforms: int = 0
    waited_s: float = 0.0
    background_prompt_tokens: int = 0  # uncached prompt tokens of lookahead LLM calls + warm-ups
    background_completion_tokens: int = 0
    wasted_prompt_tokens: int = 0  # background tokens of lookaheads never committed
    sync_transform_s: float = 0.0
    sync_prompt_tokens: int = 0  # uncached prompt tokens of synchronous-transform LLM calls


class GrowthRate:
    """Exponential moving average of history growth in tokens per second."""

    def __init__(self, smoothing: float = 0.3) -> None:
        self.smoothing = smoothing
        self.tokens_per_s: float | None = None
        self._last: tuple[float, int] | None = None

    def observe(self, now: float, tokens: int) -> None:
        if self._last is not None and now > self._last[0] and tokens > self._last[1]:
            rate = (tokens - self._last[1]) / (now - self._last[0])
            previous = self.tokens_per_s
            self.tokens_per_s = (
                rate if previous is None else previous + self.smoothing * (rate - previous)
            )
        self._last = (now, tokens)

    def seconds_until(self, tokens: int) -> float | None:
        if self.tokens_per_s is None or self.tokens_per_s <= 0:
            return None
        return max(0.0, tokens / self.tokens_per_s)


class LookaheadRuntime:
    def __init__(
        self,
        policy: ContextPolicy | None = None,
        *,
        mode: RuntimeMode = "lookahead",
        messages: Sequence[Message] = (),
        window_tokens: int = 8192,
        token_counter: TokenCounter | None = None,
        llm: CompletionClient | None = None,
        warmer: Warmer | None = None,
        shape: RequestShape | None = None,
        tags: RequestTags | None = None,
        offload_store: OffloadStore | None = None,
        warm_suffix: bool = True,
        transform_timeout_s: float | None = 300.0,
        commit_wait_timeout_s: float | None = 300.0,
        warmup_wait_timeout_s: float | None = 2.0,
    ) -> None:
        if (
            isinstance(window_tokens, bool)
            or not isinstance(window_tokens, int)
            or window_tokens <= 0
        ):
            raise ValueError(
                f"window_tokens must be the model's context size as a positive int, got {window_tokens!r}"
            )
        resolved = resolve_policy(policy, self)
        if resolved is None:
            raise ValueError(
                "LookaheadRuntime needs a policy: pass policy=... or use @context_policy(...)"
            )
        if mode not in ("lookahead", "sync"):
            raise ValueError(f"mode must be 'lookahead' or 'sync', got {mode!r}")
        timeouts = {
            "transform_timeout_s": transform_timeout_s,
            "commit_wait_timeout_s": commit_wait_timeout_s,
        }
        for name, value in timeouts.items():
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive seconds or None, got {value}")
        if warmup_wait_timeout_s is not None and warmup_wait_timeout_s < 0:
            raise ValueError(
                f"warmup_wait_timeout_s must be >= 0 seconds or None, got {warmup_wait_timeout_s}"
            )
        resolved.validate(window_tokens)
        self.policy = resolved
        self.mode: RuntimeMode = mode
        self.main = MainState(messages, window_tokens=window_tokens, token_counter=token_counter)
        self.lookahead = LookaheadState()
        self.llm = llm
        self.warmer = warmer
        self._warmer_reports_spend = warmer is not None and bool(
            keywords_accepted(warmer.warm, {"spend": None})
        )
        self.shape = shape or RequestShape()
        self.tags = tags or current_tags() or RequestTags(program_id=f"prog-{id(self):x}")
        self.offload_store = offload_store
        self.warm_suffix = warm_suffix
        self.transform_timeout_s = transform_timeout_s
        self.commit_wait_timeout_s = commit_wait_timeout_s
        self.warmup_wait_timeout_s = warmup_wait_timeout_s
        self.stats = RuntimeStats()
        self._job: asyncio.Task[None] | None = None
        self._pending_boundary = False
        self._spent_by_group: dict[str, int] = {}
        self._growth = GrowthRate()
        self._spawned_at: bytes | None = (
            None  # history signature when a spawn-mode policy last committed
        )
        if mode == "lookahead":
            self._notify_warmer("attach", self.tags.program_id)
        self._closed = False
        self._committing = False  # no new background work while a commit decides
        # Where `should_commit_ahead` held (history length, its signature): the next model call
        # commits while the history still extends that prefix.
        self._commit_due_at: tuple[int, bytes] | None = None

    # -- feeding the live history ------------------------------------------------------------
    def append(self, *messages: Message) -> None:
        self._check_open()
        self.main.append(*messages)

    async def boundary(self) -> None:
        """A segment (turn, tool output, chunk of a streamed instruction) just completed."""
        self._check_open()
        self.stats.boundaries += 1
        if (
            self.policy.commit_mode == "replace"
            and self._tools_pending()
            and self.policy.should_commit_ahead(self.main, self.lookahead)
        ):
            # Decided in both modes, so both commit on the same turn.
            end = len(self.main)
            self._commit_due_at = (end, self.main.prefix_signature(end) or b"")
        if self.mode == "lookahead":
            self._on_boundary()

    @property
    def commit_due(self) -> bool:
        """A commit was decided ahead and the history still extends the prefix it was decided on."""
        if self._commit_due_at is None:
            return False
        end, signature = self._commit_due_at
        return self.main.prefix_signature(end) == signature

    def _tools_pending(self) -> bool:
        """The model's turn just ended with tool calls whose outputs are still to come."""
        last = self.main.last_message
        return last is not None and calls_tools(last)

    async def stream_boundary(self, text: str, *, tool_name: str | None = None) -> None:
        """The assistant output streamed so far (used by Isolate to prefill while it is written)."""
        self.main.set_partial_output(PartialOutput(text, tool_name))
        await self.boundary()

    # -- committing --------------------------------------------------------------------------
    async def prepare(self) -> list[Message]:
        """The context for the next model call: commits first when the policy says the limit hit."""
        if self.policy.commit_mode == "replace":
            return (await self.commit()).messages
        return list(self.main.messages)

    async def commit(self) -> CommitOutcome:
        self._check_open()
        self._committing = True
        try:
            return await self._commit()
        finally:
            self._committing = False

    async def _commit(self) -> CommitOutcome:
        main, lookahead = self.main, self.lookahead
        already_spawned = (
            self.policy.commit_mode == "spawn"
            and self._spawned_at == main.prefix_signature(len(main))
        )
        if already_spawned or not (self.commit_due or self.policy.should_commit(main, lookahead)):
            return CommitOutcome(CommitKind.NONE, list(main.messages))
        if self.mode == "sync":
            messages, elapsed = await self._transform_now(main.messages)
            return await self._finish_commit(
                CommitOutcome(CommitKind.SYNC, messages, reason="sync mode", transform_s=elapsed)
            )
        self._drop_if_stale()
        waited = await self._settle_running_job()
        if (
            lookahead.status is LookaheadStatus.READY
            and lookahead.covers(main)
            and lookahead.messages is not None
        ):
            end = lookahead.last_segment_end
            result = TransformResult(list(lookahead.messages), dict(lookahead.strategy_data))
            messages = self.policy.assemble(result, main.messages[end:])
            self.stats.hits += 1
            self._spent_by_group.pop(lookahead.group_id or "", None)
            outcome = CommitOutcome(CommitKind.HIT, messages, covered_end=end, waited_s=waited)
            self._notify_warmer(
                "committed",
                self.tags.program_id,
                replaced=self.policy.commit_mode == "replace",
                live_prefix_share=main.shared_prefix_share(messages),
            )
            if self.policy.commit_mode == "replace" and self._still_over_limit(messages):
                # The suffix that arrived since the snapshot kept the context over the limit.
                self.stats.overflow_transforms += 1
                messages, elapsed = await self._transform_now(messages)
                outcome = replace(
                    outcome, messages=messages, reason="overflow", transform_s=elapsed
                )
            return await self._finish_commit(outcome)
        reason = (
            "not started" if lookahead.status is LookaheadStatus.IDLE else lookahead.status.value
        )
        self._waste(lookahead.group_id)
        self.stats.fallbacks += 1
        messages, elapsed = await self._transform_now(main.messages)
        return await self._finish_commit(
            CommitOutcome(
                CommitKind.FALLBACK, messages, reason=reason, waited_s=waited, transform_s=elapsed
            )
        )

    def _still_over_limit(self, messages: list[Message]) -> bool:
        probe = MainState(
            messages, window_tokens=self.main.window_tokens, token_counter=self.main.token_counter
        )
        return self.policy.should_commit(probe, LookaheadState())

    async def _transform_now(self, messages: Sequence[Message]) -> tuple[list[Message], float]:
        """The synchronous transform, on the critical path, tagged latency-critical."""
        started = time.perf_counter()
        ctx = self._transform_context(is_lookahead=False, partial_output=None)
        with use_tags(self.tags):
            result = await self.policy.transform(list(messages), ctx)
        elapsed = time.perf_counter() - started
        self.stats.sync_transform_s += elapsed
        self.stats.sync_prompt_tokens += ctx.usage.uncached_prompt_tokens
        return result.messages, elapsed

    async def _finish_commit(self, outcome: CommitOutcome) -> CommitOutcome:
        # Work still in flight belongs to the lookahead just committed or dropped: obsolete now.
        await self._cancel_job()
        outcome = replace(outcome, decided_ahead=self.commit_due)
        log.debug(
            "%s commit %s (%s) waited %.2f s",
            self.tags.program_id,
            outcome.kind.value,
            outcome.reason,
            outcome.waited_s,
        )
        self._pending_boundary = False
        self._commit_due_at = None
        self.stats.commits += 1
        if self.lookahead.group_id:
            FOREGROUND.forget(self.lookahead.group_id)
        self.lookahead.reset()
        if self.policy.commit_mode == "replace":
            self.main.replace(outcome.messages)
        else:
            self._spawned_at = self.main.prefix_signature(len(self.main))
        return outcome

    async def _settle_running_job(self) -> float:
        """At commit time: wait for a running lookahead (promoted) or abandon it. An in-flight
        warm-up of a ready result sends no further chunk: the commit request prefills what is
        left in one go, where a chunked warm-up competing with other programs could take much
        longer. A warmer that can stop after its chunk in flight (`finish_warm_up`) is waited
        for up to `warmup_wait_timeout_s`, so the commit runs where that chunk is cached; any
        other is cancelled at once (what it prefilled stays cached)."""
        job, lookahead = self._job, self.lookahead
        if job is None or job.done():
            return 0.0
        if lookahead.status not in (LookaheadStatus.READY, LookaheadStatus.RUNNING):
            await self._cancel_job()  # no lookahead's work (a copy of the live context)
            return 0.0
        finish = getattr(self.warmer, "finish_warm_up", None)
        timeout = self.warmup_wait_timeout_s if finish is not None else 0.0
        if lookahead.status is LookaheadStatus.READY and finish is not None:
            finish(self.tags.program_id)
        if lookahead.status is LookaheadStatus.RUNNING:
            if not self.policy.should_promote(self.main, lookahead):
                self.stats.abandoned += 1
                await self._cancel_job()
                self._waste(lookahead.group_id)
                lookahead.status = LookaheadStatus.IDLE
                return 0.0
            lookahead.promoted = True
            self.stats.promotions += 1
            if lookahead.group_id:
                FOREGROUND.promote(lookahead.group_id)  # its work waiting at a SlackGate goes now
            timeout = self.commit_wait_timeout_s
            if self.warmer is not None and lookahead.group_id:
                try:
                    await self.warmer.promote(lookahead.group_id)
                except Exception as error:  # promotion is an optimization
                    log.warning("promotion of %s failed: %r", lookahead.group_id, error)
        started = time.perf_counter()
        done, _ = await asyncio.wait({job}, timeout=timeout)
        if not done:
            await self._cancel_job()
            if lookahead.status is LookaheadStatus.RUNNING:
                self._fail(TimeoutError("lookahead still running at the commit wait timeout"))
        waited = time.perf_counter() - started
        self.stats.waited_s += waited
        return waited

    # -- background work ---------------------------------------------------------------------
    def _on_boundary(self) -> None:
        self._growth.observe(time.monotonic(), self.main.tokens)
        self._drop_if_stale()
        if self._job is not None and not self._job.done():
            self.stats.superseded_boundaries += self._pending_boundary
            self._pending_boundary = True
            return
        self._pending_boundary = False
        main, lookahead = self.main, self.lookahead
        commits_next = self.commit_due and not self._tools_pending()
        if self.policy.commit_mode == "replace" and (
            commits_next or self.policy.should_commit(main, lookahead)
        ):
            # The next model call commits: background work started now would only make it wait
            # for what it does itself (prefill the newest suffix, or transform synchronously).
            # While the tools of a commit decided ahead run, warming the model's turn still pays.
            return
        if self.policy.should_lookahead(main, lookahead):
            self._start_lookahead(main.snapshot())
        elif lookahead.status is LookaheadStatus.READY and self._suffix_to_warm():
            self._run_job(self._warm(lookahead.group_id or ""))
        elif (
            self._tools_pending()
            and hasattr(self.warmer, "fork_live")
            and self.policy.keeps_live_prefix(main, lookahead)
        ):
            self._run_job(self._fork_live())

    def _start_lookahead(self, snapshot: Snapshot) -> None:
        group_id = f"{self.tags.program_id}:{self.policy.name}:s{self.main.turn}:{self.stats.lookaheads_started}"
        previous = self.lookahead.group_id
        if previous is not None:
            FOREGROUND.forget(previous)
        if self.lookahead.status is LookaheadStatus.READY and previous is not None:
            # A ready result superseded by a newer one (e.g. Isolate's next chunk): its work is
            # wasted only if the newer one is.
            self._spent_by_group[group_id] = self._spent_by_group.pop(previous, 0)
        self.lookahead.start(snapshot, group_id)
        self.stats.lookaheads_started += 1
        self._run_job(self._lookahead_job(snapshot, group_id))

    def _run_job(self, work: Coroutine[Any, Any, None]) -> None:
        self._job = asyncio.create_task(work)
        self._job.add_done_callback(self._after_job)

    async def _lookahead_job(self, snapshot: Snapshot, group_id: str) -> None:
        lookahead = self.lookahead
        ctx = self._transform_context(is_lookahead=True, partial_output=snapshot.partial_output)
        ctx.expected_growth_tokens = self._expected_growth_until_commit()
        with use_tags(self.tags.lookahead(group_id, commit_deadline_ms=self._commit_deadline_ms())):
            try:
                result = await asyncio.wait_for(
                    self.policy.transform(list(snapshot.messages), ctx), self.transform_timeout_s
                )
            except asyncio.CancelledError:
                self._account(
                    group_id, ctx.usage.uncached_prompt_tokens, ctx.usage.completion_tokens
                )
                raise
            except Exception as error:  # a failing lookahead must never break the agent
                log.warning("lookahead transform %s failed: %r", group_id, error)
                self._account(
                    group_id, ctx.usage.uncached_prompt_tokens, ctx.usage.completion_tokens
                )
                if lookahead.group_id == group_id:
                    self._fail(error)
                return
            self._account(group_id, ctx.usage.uncached_prompt_tokens, ctx.usage.completion_tokens)
            if lookahead.group_id != group_id or lookahead.status is not LookaheadStatus.RUNNING:
                return
            lookahead.messages = tuple(result.messages)
            lookahead.strategy_data = result.data
            lookahead.status = LookaheadStatus.READY
            lookahead.timings.transform_done_at = time.monotonic()
            if not lookahead.promoted:  # promoted: the commit is waiting and prefills it itself
                await self._warm(group_id)

    async def _warm(self, group_id: str) -> None:
        """Prefill the context the commit would send now: result + suffix that arrived since."""
        lookahead = self.lookahead
        if self.warmer is None or lookahead.messages is None or lookahead.group_id != group_id:
            return
        end = len(self.main) if self.warm_suffix else lookahead.last_segment_end
        messages = self.policy.assemble(
            TransformResult(list(lookahead.messages), lookahead.strategy_data),
            self.main.messages[lookahead.last_segment_end : end],
        )
        open_last = self.policy.commit_mode == "spawn" and lookahead.covered_partial is not None
        tags = self.tags.lookahead(group_id, commit_deadline_ms=self._commit_deadline_ms())
        # How much of it the live context holds (a warmer may seed the warm-up from it).
        shared = self.main.shared_prefix_messages(messages)
        self._notify_warmer(
            "live_prefix",
            self.tags.program_id,
            self.main.shared_prefix_share(messages, shared_messages=shared),
            shared_messages=shared,
        )
        spend = WarmupSpend()
        reports = {"spend": spend} if self._warmer_reports_spend else {}
        with use_tags(tags):
            try:
                outcome = await self.warmer.warm(
                    messages, shape=self.shape, open_last=open_last, **reports
                )
            except asyncio.CancelledError:
                self._account(group_id, spend.prefilled_tokens, 0)  # what it got the engine to do
                raise
            except Exception as error:
                self._account(group_id, spend.prefilled_tokens, 0)
                self.stats.warmup_failures += 1
                log.warning(
                    "warm-up of %s failed (result kept, cache benefit lost): %r", group_id, error
                )
                return
        self.stats.warmups += 1
        self._account(group_id, outcome.prefilled_tokens, 0)
        if lookahead.group_id == group_id:
            lookahead.warmed_end = end
            lookahead.timings.warmed_at = time.monotonic()

    async def _fork_live(self) -> None:
        """The engine holds exactly the live history now (the model's turn just ended): the
        warmer copies it into the branch the next lookahead will be warmed in (see
        `ContextPolicy.keeps_live_prefix`)."""
        try:
            copied = await self.warmer.fork_live(  # type: ignore[union-attr]
                self.tags.program_id, list(self.main.messages), shape=self.shape
            )
        except Exception as error:  # an optimization: the warm-up then prefills that prefix
            log.warning("copying the live context of %s failed: %r", self.tags.program_id, error)
            return
        self.stats.live_copies += bool(copied)

    def _after_job(self, job: asyncio.Task[None]) -> None:
        if job is self._job:
            self._job = None
        if not job.cancelled() and job.exception() is not None:
            log.error("lookahead job crashed: %r", job.exception())
        if self._pending_boundary and not self._closed and not self._committing:
            self._on_boundary()

    def _suffix_to_warm(self) -> bool:
        lookahead = self.lookahead
        if self.warmer is None or not self.warm_suffix:
            return False
        return lookahead.warmed_end is not None and lookahead.warmed_end < len(self.main)

    def _drop_if_stale(self) -> None:
        lookahead = self.lookahead
        if lookahead.status in (
            LookaheadStatus.READY,
            LookaheadStatus.RUNNING,
        ) and not lookahead.covers(self.main):
            self.stats.stale += 1
            lookahead.status = LookaheadStatus.STALE
            if self._job is not None and not self._job.done():
                self._job.cancel()

    def _fail(self, error: BaseException) -> None:
        self.stats.failures += 1
        self.lookahead.status = LookaheadStatus.FAILED
        self.lookahead.error = error

    def _account(self, group_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        self.stats.background_prompt_tokens += prompt_tokens
        self.stats.background_completion_tokens += completion_tokens
        self._spent_by_group[group_id] = self._spent_by_group.get(group_id, 0) + prompt_tokens

    def _waste(self, group_id: str | None) -> None:
        if group_id is not None:
            self.stats.wasted_prompt_tokens += self._spent_by_group.pop(group_id, 0)

    def _expected_growth_until_commit(self) -> int:
        """Tokens the history will likely gain before the commit: whole turns at the measured
        growth per turn until the policy's trigger. Transforms shrink what they keep by this,
        so the committed context (result + suffix) is as large as a synchronous one."""
        remaining = self.policy.tokens_until_commit(self.main)
        per_turn = self.main.tokens_per_turn
        if remaining is None:
            return 0
        if not per_turn:
            return remaining
        return math.ceil(remaining / per_turn) * int(per_turn)

    def _commit_deadline_ms(self) -> int | None:
        """When the commit is expected (ms from now), from the policy's distance to its trigger
        and the history's recent growth rate; lets the server order best-effort work by urgency."""
        remaining = self.policy.tokens_until_commit(self.main)
        seconds = self._growth.seconds_until(remaining) if remaining is not None else None
        return None if seconds is None else int(seconds * 1000)

    def _transform_context(
        self, *, is_lookahead: bool, partial_output: PartialOutput | None
    ) -> TransformContext:
        return TransformContext(
            token_counter=self.main.token_counter,
            window_tokens=self.main.window_tokens,
            is_lookahead=is_lookahead,
            llm=self.llm,
            offload_store=self.offload_store,
            partial_output=partial_output,
        )

    # -- persistence -------------------------------------------------------------------------
    def save_state(self) -> dict[str, Any]:
        """A JSON-safe snapshot: history, turn count, stats and a ready lookahead result. A
        running lookahead cannot be saved mid-flight; it is recorded so that `load_state`
        restarts it at the next boundary."""
        lookahead = self.lookahead
        saved: dict[str, Any] = {
            "version": STATE_FORMAT_VERSION,
            "policy": self.policy.name,
            "messages": list(self.main.messages),
            "turn": self.main.turn,
            "commit_due_at": (
                [self._commit_due_at[0], self._commit_due_at[1].hex()]
                if self._commit_due_at
                else None
            ),
            "stats": asdict(self.stats),
            "lookahead": {"status": lookahead.status.value},
        }
        if lookahead.status is LookaheadStatus.READY and lookahead.messages is not None:
            saved["lookahead"] = {
                "status": "ready",
                "messages": list(lookahead.messages),
                "last_segment_end": lookahead.last_segment_end,
                "covered_signature": lookahead.covered_signature.hex(),
                "group_id": lookahead.group_id,
                "strategy_data": lookahead.strategy_data,
            }
        return saved

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore `save_state` output. A restored result is committed only if the restored
        history still matches the prefix it covers (the usual signature check)."""
        self._check_open()
        if not isinstance(state, dict) or state.get("version") != STATE_FORMAT_VERSION:
            raise ValueError(
                f"state must be a dict saved by LookaheadRuntime.save_state (version {STATE_FORMAT_VERSION})"
            )
        if state.get("policy") != self.policy.name:
            raise ValueError(
                f"state was saved with policy {state.get('policy')!r}, this runtime runs {self.policy.name!r}"
            )
        if self._job is not None:
            self._job.cancel()
        self.main.replace(state["messages"])
        self.main.turn = int(state["turn"])
        due = state.get("commit_due_at")
        self._commit_due_at = (int(due[0]), bytes.fromhex(due[1])) if due else None
        self.stats = RuntimeStats(**state["stats"])
        self.lookahead = LookaheadState()
        saved = state["lookahead"]
        if saved["status"] == "ready":
            self.lookahead.status = LookaheadStatus.READY
            self.lookahead.messages = tuple(saved["messages"])
            self.lookahead.last_segment_end = int(saved["last_segment_end"])
            self.lookahead.covered_signature = bytes.fromhex(saved["covered_signature"])
            self.lookahead.group_id = saved["group_id"]
            self.lookahead.strategy_data = dict(saved["strategy_data"])
        # A lookahead that was running restarts by itself: its policy fires again at the next boundary.

    # -- lifecycle ---------------------------------------------------------------------------
    async def _cancel_job(self) -> None:
        job = self._job
        if job is None:
            return
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job
        self._job = None

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pending_boundary = False
        await self._cancel_job()
        self._waste(self.lookahead.group_id)
        if self.lookahead.group_id:
            FOREGROUND.forget(self.lookahead.group_id)
        if self.mode == "lookahead":
            self._notify_warmer("detach", self.tags.program_id)

    def _notify_warmer(self, hook: str, *args: Any, **kwargs: Any) -> None:
        notify_warmer(self.warmer, hook, *args, **kwargs)

    async def __aenter__(self) -> LookaheadRuntime:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this LookaheadRuntime is closed; create a new one per program run")

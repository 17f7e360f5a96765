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
import copy
import logging
import statistics
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import Any, ClassVar

from lookahead_sdk.base.averages import moving_average
from lookahead_sdk.base.checks import require_flag, require_int, require_number
from lookahead_sdk.base.completion import CompletionClient
from lookahead_sdk.base.messages import (
    Message,
    answered_prefix_end,
    atomic_groups,
    calls_tools,
    orphaned_results,
    validate_messages,
)
from lookahead_sdk.base.protocol import RequestTags, check_id
from lookahead_sdk.base.tags import current_tags, doing, use_tags
from lookahead_sdk.base.tokens import count_message
from lookahead_sdk.core.commit_modes import COMMIT_TARGETS
from lookahead_sdk.core.config import DEFAULT_WINDOW_TOKENS, RuntimeConfig, RuntimeMode
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import (
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
from lookahead_sdk.core.warmer import RequestShape, Warmer, WarmupSpend
from lookahead_sdk.errors import ConfigurationError, InvalidInputError, StateError

log = logging.getLogger(__name__)

STATE_FORMAT_VERSION = 1
NO_WARMER = Warmer()  # every hook a no-op: the runtime without a warmer calls these
RESIZED_SMALLER = "resized: less growth than expected"
RESIZED_SUFFIX = "resized: the suffix holds what the transform rewrites"
ORPHANED_RESULT = "the result would orphan a tool result (its call dropped)"


# A result redone to the synchronous size must be ready before the commit with this margin over
# the time the last lookahead took (background work waits for slack and yields to foreground).
REDO_MARGIN = 2.0
# A lookahead whose start is deferred (`_defers_start`) keeps at least this many average turns
# between its start and the commit (LimitTriggered's default lead).
MIN_DEFERRED_LEAD_TURNS = 3.0


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
    transform_prompt_tokens: int = 0  # uncached prompt tokens of its LLM calls (Summarize)
    decided_ahead: bool = False  # decided when the model's turn ended (`should_commit_ahead`)
    # For HIT: tokens of the committed context that no completed warm-up covered (what the
    # commit request still prefills), and whether no warm-up had completed at all (a cold hit:
    # the right result, no prefill saved).
    unwarmed_tokens: int | None = None
    cold: bool = False

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
    cold_hits: int = 0  # hits no completed warm-up had prefilled (counted in hits too)
    stale: int = 0
    fallbacks: int = 0
    failures: int = 0
    abandoned: int = 0
    promotions: int = 0
    warmups: int = 0
    warmup_failures: int = 0
    live_copies: int = 0  # live context copied into the lookahead branch (`keeps_live_prefix`)
    overflow_transforms: int = 0
    # A ready result sized for growth the history did not follow (`ContextPolicy.kept_from`):
    # redone in the background, or resized at the commit (the assembled context transformed
    # once more, or the synchronous transform instead).
    regrown_lookaheads: int = 0
    resized_commits: int = 0
    # Commits that took the ready result a redo was replacing (it still fit) instead of waiting
    # for the redo's transform.
    standby_commits: int = 0
    # Boundaries at which a due lookahead was not started yet: started then, it would have kept
    # none of the history and committed larger than a synchronous commit (`_defers_start`).
    deferred_starts: int = 0
    # Boundaries at which a due lookahead was not started: the model calls the run has left
    # (`model_calls_left`) could not bring the history to its commit at the recent growth.
    out_of_reach_starts: int = 0
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
            self.tokens_per_s = moving_average(self.tokens_per_s, rate, self.smoothing)
        self._last = (now, tokens)

    def seconds_until(self, tokens: int) -> float | None:
        if self.tokens_per_s is None or self.tokens_per_s <= 0:
            return None
        return max(0.0, tokens / self.tokens_per_s)


class IdlePace:
    """Exponential moving average of the agent's own idle time per turn: from the end of a model
    reply (the boundary that adds its assistant turn) to the next model call (`commit`), i.e. its
    tool calls. About zero where the loop marks no boundary between a reply and its tools."""

    def __init__(self, smoothing: float = 0.3) -> None:
        self.smoothing = smoothing
        self.idle_s_per_turn: float | None = None
        self._turn: int | None = None
        self._reply_ended_at: float | None = None

    def boundary(self, now: float, turn: int) -> None:
        if self._turn is not None and turn > self._turn:
            self._reply_ended_at = now
        self._turn = turn

    def model_call(self, now: float) -> None:
        if self._reply_ended_at is None:
            return
        idle, self._reply_ended_at = max(0.0, now - self._reply_ended_at), None
        self.idle_s_per_turn = moving_average(self.idle_s_per_turn, idle, self.smoothing)


class LookaheadRuntime:
    """`LookaheadRuntime(policy, config, messages=..., **overrides)`: overrides are
    `RuntimeConfig` fields (e.g. `window_tokens=32768`); the policy may also come from an
    enclosing `@context_policy(...)` or the class default."""

    default_context_policy: ClassVar[ContextPolicy | None] = None  # set by @context_policy
    # When boundaries and lookahead jobs happen (growth rate, how long a lookahead takes);
    # replaceable per runtime, e.g. by a test's virtual clock.
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(
        self,
        policy: ContextPolicy | None = None,
        config: RuntimeConfig | None = None,
        *,
        messages: Sequence[Message] = (),
        **overrides: Any,
    ) -> None:
        config = RuntimeConfig.build(config, **overrides)
        resolved = resolve_policy(policy, self)
        if resolved is None:
            raise ConfigurationError(
                "LookaheadRuntime needs a policy: pass policy=... or use @context_policy(...)"
            )
        if config.window_tokens is None:
            log.warning(
                "window_tokens not given: assuming a %d-token window; pass window_tokens= "
                "(the model's context size)",
                DEFAULT_WINDOW_TOKENS,
            )
            config = config.with_overrides(window_tokens=DEFAULT_WINDOW_TOKENS)
        resolved.validate(config.window_tokens)
        self.config = config
        self.policy = resolved
        self._target = COMMIT_TARGETS[resolved.commit_mode]
        self.main = MainState(
            messages, window_tokens=config.window_tokens, token_counter=config.token_counter
        )
        self.lookahead = LookaheadState()
        self.shape = config.shape or RequestShape()  # frameworks update it per call (tools)
        tags = config.tags or current_tags()
        self.tags = (
            tags
            if tags is not None and tags.program_id is not None
            else RequestTags(program_id=f"prog-{id(self):x}")
        )
        self.stats = RuntimeStats()
        self._job: asyncio.Task[None] | None = None
        self._pending_boundary = False
        # The loop marks a boundary where a model turn ends (as the README's loop does), so
        # work held back at the boundary before a model call runs at the one after it.
        self._marks_reply_boundaries = False
        self._held_for_model_call = False
        self._spent_by_group: dict[str, int] = {}
        self._growth = GrowthRate()
        self._pace = IdlePace()
        # Per timed lookahead, the turns it took from start to warm (`MainState.lookahead_turns`).
        self.lookahead_turns_timed: list[float] = []
        self._lookahead_job_s: float | None = None  # the newest finished lookahead, start to warm
        self._lookahead_job_started: float | None = None  # the running lookahead job's start
        # The ready result a running redo replaces, and the background tokens it had cost.
        self._standby: tuple[LookaheadState, int] | None = None
        self._spawned_at: bytes | None = None  # history signature at a spawn-mode commit
        self._hooks: Warmer = config.warmer or NO_WARMER
        if self.mode == "lookahead":
            self._hooks.attach(self.program_id)
        self._closed = False
        self._committing = False  # no new background work while a commit decides
        # Where `should_commit_ahead` held (history length, its signature): the next model call
        # commits while the history still extends that prefix.
        self._commit_due_at: tuple[int, bytes] | None = None
        self._model_calls_left: int | None = None
        self._model_calls_made = 0  # commits, one before each model call (with a limit set)
        self._calls_left_from_limit()

    # -- settings ------------------------------------------------------------------------------
    @property
    def mode(self) -> RuntimeMode:
        return self.config.mode

    @property
    def warmer(self) -> Warmer | None:
        return self.config.warmer

    @property
    def summarizer(self) -> CompletionClient | None:
        return self.config.summarizer

    @property
    def offload_store(self) -> OffloadStore | None:
        return self.config.offload_store

    @property
    def program_id(self) -> str:
        return self.tags.program_id or ""

    @property
    def spawns_subagents(self) -> bool:
        """The policy's commits start a sub-agent (Isolate) instead of rewriting the history."""
        return not self._target.rewrites_history

    @property
    def model_calls_left(self) -> int | None:
        """The model calls this run can still make after the current one (the agent's step
        limit less the steps taken), set by the agent loop, or kept by the runtime itself when
        `RuntimeConfig.model_call_limit` is set (the limit less the commits so far; a value set
        here holds until the next commit); None (the default): no limit known.
        For a policy that commits before a model call (all but Isolate, whose spawn follows the
        delegating call), a lookahead whose commit the history could not reach in them (at its
        recent growth per turn, `_commit_out_of_reach`) is not started, and no background work
        at all once it is 0: a lookahead the run ends before committing is work thrown away. A
        commit that comes anyway (a burst in the last turns) transforms synchronously, as
        without lookahead."""
        return self._model_calls_left

    @model_calls_left.setter
    def model_calls_left(self, value: int | None) -> None:
        self._model_calls_left = require_int(
            "model_calls_left",
            value,
            optional=True,
            meaning="the model calls the agent's step limit still allows after this one",
            fix="None means no limit",
            error=InvalidInputError,
        )

    # -- feeding the live history ------------------------------------------------------------
    def append(self, *messages: Message) -> None:
        self._check_open()
        self.main.append(*messages)

    async def boundary(self) -> None:
        """A segment (turn, tool output, chunk of a streamed instruction) just completed."""
        self._check_open()
        self.stats.boundaries += 1
        if (
            self._target.decides_ahead()
            and self._tools_pending()
            and self.policy.should_commit_ahead(self.main, self.lookahead)
        ):
            # Decided in both modes, so both commit on the same turn.
            end = len(self.main)
            self._commit_due_at = (end, self.main.prefix_signature(end) or b"")
        if self.mode == "lookahead":
            self._observe_boundary()
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
        self._check_open()
        if not isinstance(text, str):
            raise InvalidInputError(
                f"stream_boundary(text=...) takes the output streamed so far as a str, got "
                f"{type(text).__name__}"
            )
        if tool_name is not None and not isinstance(tool_name, str):
            raise InvalidInputError(
                f"stream_boundary(tool_name=...) takes the called tool's name or None, got "
                f"{type(tool_name).__name__}"
            )
        self.main.set_partial_output(PartialOutput(text, tool_name))
        await self.boundary()

    @property
    def busy(self) -> bool:
        """Background work (a transform, warm-up or live copy) is running."""
        return self._job is not None and not self._job.done()

    async def settle(self, timeout_s: float | None = None) -> None:
        """Wait until no background work runs or waits (the job in flight and the boundaries
        queued behind it). TimeoutError after `timeout_s` (the work goes on)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self._job is not None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"background work of {self.program_id} still runs")
            # `_after_job` (a done callback registered first) clears `_job` or starts the next.
            await asyncio.wait({self._job}, timeout=remaining)

    async def hand_over(self, child_program_id: str, messages: Sequence[Message]) -> None:
        """A sub-agent `child_program_id` starts from `messages`, the context just spawned (its
        warm-up's server placement goes with it). Call before its first request."""
        try:
            await self._hooks.hand_over(
                self.program_id, child_program_id, list(messages), shape=self.shape
            )
        except Exception as error:  # an optimization: the sub-agent then prefills its context
            log.warning("handing %s its context failed: %r", child_program_id, error)

    def subagent_ended(self, child_program_id: str) -> None:
        self._hooks.detach(child_program_id)

    # -- committing --------------------------------------------------------------------------
    async def prepare(self) -> list[Message]:
        """The context for the next model call: commits first when the policy says the limit hit.
        Each message is a copy of the history's (its content parts and tool calls are shared:
        copy those before editing them in place), so a caller may set a field on what it sends
        (a cache breakpoint, say) without changing the history behind the signatures that keep
        stale results from committing. A shallow copy keeps the call O(new messages) in cost."""
        if self._target.applies_before_model_call():
            messages = (await self.commit()).messages
        else:
            messages = self.main.messages
        return [dict(message) for message in messages]

    async def commit(self) -> CommitOutcome:
        self._check_open()
        self._pace.model_call(self.clock())
        self._committing = True
        try:
            outcome = await self._commit()
        finally:
            self._committing = False
        self._count_model_call()
        return outcome

    def _count_model_call(self) -> None:
        """A commit precedes each model call: with a step limit configured, one call fewer is
        left after this one."""
        limit = self.config.model_call_limit
        if limit is None:
            return
        self._model_calls_made += 1
        self._calls_left_from_limit()
        if self._model_calls_made == limit + 1:
            log.warning(
                "program %s: model call %d, over model_call_limit=%d: no lookahead starts from "
                "here on; set model_call_limit to the agent's own step limit (None for an agent "
                "that goes on)",
                self.program_id,
                self._model_calls_made,
                limit,
            )

    def _calls_left_from_limit(self) -> None:
        """With `RuntimeConfig.model_call_limit` set: the limit less the calls made, never below 0."""
        limit = self.config.model_call_limit
        if limit is not None:
            self._model_calls_left = max(limit - self._model_calls_made, 0)

    async def _commit(self) -> CommitOutcome:
        main, lookahead = self.main, self.lookahead
        if self._target.already_committed(main, self._spawned_at) or not (
            self.commit_due or self.policy.should_commit(main, lookahead)
        ):
            return CommitOutcome(CommitKind.NONE, list(main.messages))
        if self.mode == "sync":
            messages, elapsed, tokens = await self._transform_now(main.messages)
            return await self._finish_commit(
                CommitOutcome(
                    CommitKind.SYNC,
                    messages,
                    reason="sync mode",
                    transform_s=elapsed,
                    transform_prompt_tokens=tokens,
                )
            )
        self._drop_if_stale()
        await self._take_standby_if_it_fits()
        waited = await self._resolve_running_job()
        orphaning = self._orphans_results(lookahead)
        if (
            lookahead.status is LookaheadStatus.READY
            and lookahead.covers(main)
            and lookahead.messages is not None
            and not orphaning
        ):
            end = lookahead.last_segment_end
            messages = self._committed_as_is(lookahead)
            warmed_end = lookahead.warmed_end
            outcome = CommitOutcome(
                CommitKind.HIT,
                messages,
                covered_end=end,
                waited_s=waited,
                unwarmed_tokens=(
                    main.tokens_between(warmed_end)
                    if warmed_end is not None
                    else sum(count_message(main.token_counter, m) for m in messages)
                ),
                cold=warmed_end is None,
            )
            # Up to a turn (or one whole older turn) more, or a turn less, than a synchronous
            # commit keeps is committed as it is.
            misfit = self._growth_misfit(at_commit=True)
            slack = self._one_turn_tokens()
            overflow, rewrite = self._hit_transforms(messages)
            too_large = self._keeps_too_much(lookahead, misfit)
            if overflow or rewrite or too_large:
                # The suffix that arrived since the snapshot kept the context over the limit,
                # holds what a synchronous commit rewrites, or is larger than a synchronous
                # commit leaves: the assembled context is transformed once more (the result's
                # prefix is kept up to what it drops).
                messages, elapsed, tokens = await self._transform_now(messages)
                self.stats.overflow_transforms += overflow
                self.stats.resized_commits += not overflow
                if overflow:
                    reason = "overflow"
                elif too_large:
                    reason = "resized: more growth than expected"
                else:
                    reason = RESIZED_SUFFIX
                outcome = replace(
                    outcome,
                    messages=messages,
                    reason=reason,
                    transform_s=elapsed,
                    transform_prompt_tokens=tokens,
                )
            if misfit >= -slack or overflow or rewrite:
                return await self._finish_commit(outcome)
            # Committed sooner than the result was sized for: it dropped turns a synchronous
            # commit keeps. They go back in, between the result's head (and summary) and the
            # suffix it kept, so the context is a synchronous commit's size; what follows them
            # is prefilled again, which costs less than transforming from scratch.
            widened = self._with_dropped_turns(end)
            if widened is not None:
                messages, unwarmed = widened
                self.stats.resized_commits += 1
                return await self._finish_commit(
                    replace(
                        outcome, messages=messages, reason=RESIZED_SMALLER, unwarmed_tokens=unwarmed
                    )
                )
            reason = RESIZED_SMALLER  # its kept suffix was rewritten: the synchronous transform
        elif orphaning:
            reason = ORPHANED_RESULT
        else:
            reason = (
                "not started"
                if lookahead.status is LookaheadStatus.IDLE
                else lookahead.status.value
            )
        messages, elapsed, tokens = await self._transform_now(main.messages)
        self.stats.resized_commits += reason == RESIZED_SMALLER
        return await self._finish_commit(
            CommitOutcome(
                CommitKind.FALLBACK,
                messages,
                reason=reason,
                waited_s=waited,
                transform_s=elapsed,
                transform_prompt_tokens=tokens,
            )
        )

    def _committed_as_is(self, lookahead: LookaheadState) -> list[Message]:
        """A ready result with the suffix that arrived since its snapshot: what a hit commits
        unless it is resized. (Callers check that it has a result.)"""
        result = TransformResult(list(lookahead.messages or ()), dict(lookahead.strategy_data))
        suffix = self.main.messages[lookahead.last_segment_end :]
        return self.policy.finish_hit(self.policy.assemble(result, suffix), result, suffix)

    def _orphans_results(self, lookahead: LookaheadState) -> bool:
        """Whether committing a ready result as it is would leave a tool result without its call
        where the history has none (a policy that dropped a turn whose results came later)."""
        if (
            lookahead.status is not LookaheadStatus.READY
            or lookahead.messages is None
            or not lookahead.covers(self.main)
        ):
            return False
        assembled = self._committed_as_is(lookahead)
        return bool(orphaned_results(assembled)) and not orphaned_results(self.main.messages)

    def _hit_transforms(self, messages: list[Message]) -> tuple[bool, bool]:
        """Whether a hit's assembled context is transformed once more at the commit: it is
        still over the limit (overflow), or holds what a synchronous commit rewrites."""
        if not self._target.transforms_overflow():
            return False, False
        assembled = self._probe(messages)
        return (
            self.policy.should_commit(assembled, LookaheadState()),
            self.policy.rewrites_suffix(assembled),
        )

    async def _take_standby_if_it_fits(self) -> None:
        """At commit time, while a redo of a ready result (`_regrow_pays`) has not finished its
        transform: commit the result it replaces if that one still covers the history, keeps
        within a turn of what a synchronous commit keeps (or one whole turn more, as a hit may),
        and needs no transform at the commit;
        waiting for the redo (a summary's decode) would cost the turn more than prefilling the
        older result, whose warm-up may have been overwritten by the redo's."""
        standby, lookahead = self._standby, self.lookahead
        if standby is None or lookahead.status not in (
            LookaheadStatus.RUNNING,
            LookaheadStatus.FAILED,
        ):
            return
        result, spent = standby
        if result.messages is None or not result.covers(self.main):
            return
        misfit = self._growth_misfit(at_commit=True, lookahead=result)
        if misfit < -self._one_turn_tokens() or self._keeps_too_much(result, misfit):
            return
        if self._orphans_results(result) or any(
            self._hit_transforms(self._committed_as_is(result))
        ):
            return
        redo = lookahead.group_id
        await self._cancel_job()
        if redo is not None:
            # The redo's own tokens are wasted; what the result it replaces cost is not.
            self._spent_by_group[redo] = self._spent_by_group.get(redo, 0) - spent
            self._waste(redo)
            self._hooks.lookahead_ended(redo)
        if result.group_id is not None:
            self._spent_by_group[result.group_id] = spent
        lookahead.take_over(result)
        self._standby = None
        self.stats.standby_commits += 1

    def _probe(self, messages: list[Message]) -> MainState:
        """`messages` as a history of this runtime's window, for asking the policy about it."""
        return MainState(
            messages, window_tokens=self.main.window_tokens, token_counter=self.main.token_counter
        )

    async def _transform_now(self, messages: Sequence[Message]) -> tuple[list[Message], float, int]:
        """The synchronous transform, on the critical path, tagged latency-critical. Bounded by
        `sync_transform_timeout_s`: a hung transform fails the commit and leaves the history as
        it was."""
        started = time.perf_counter()
        ctx = self._transform_context(is_lookahead=False, partial_output=None)
        timeout = self.config.sync_transform_timeout_s
        try:
            with use_tags(self.tags):
                result = await asyncio.wait_for(self.policy.transform(list(messages), ctx), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"the synchronous {self.policy.name} transform of {self.program_id} took over "
                f"sync_transform_timeout_s={timeout} s; the history is unchanged"
            ) from None
        elapsed = time.perf_counter() - started
        return result.messages, elapsed, ctx.usage.uncached_prompt_tokens

    async def _finish_commit(self, outcome: CommitOutcome) -> CommitOutcome:
        # The commit takes effect first: a context that cannot be applied (an invalid message
        # from the transform) raises here, leaving history, lookahead and stats as they were.
        outcome = replace(outcome, decided_ahead=self.commit_due)
        hit = outcome.kind is CommitKind.HIT
        live_share = self.main.shared_prefix_share(outcome.messages) if hit else None
        spawned_at = self._target.apply(self.main, outcome.messages)
        lookahead = self.lookahead
        self.stats.sync_transform_s += outcome.transform_s
        self.stats.sync_prompt_tokens += outcome.transform_prompt_tokens
        if hit:
            self.stats.hits += 1
            self.stats.cold_hits += outcome.cold
            self._spent_by_group.pop(lookahead.group_id or "", None)
            self._hooks.committed(
                self.program_id,
                replaced=self._target.rewrites_history,
                live_prefix_share=live_share,
            )
        elif outcome.kind is CommitKind.FALLBACK:
            self.stats.fallbacks += 1
            self._waste(lookahead.group_id)
        if outcome.kind in (CommitKind.FALLBACK, CommitKind.SYNC):
            self._hooks.committed_synchronously(
                self.program_id, replaced=self._target.rewrites_history
            )
        if spawned_at is not None:
            self._spawned_at = spawned_at
        # Work still in flight belongs to the lookahead just committed or dropped: obsolete now.
        await self._cancel_job()
        log.debug(
            "%s commit %s (%s) waited %.2f s",
            self.program_id,
            outcome.kind.value,
            outcome.reason,
            outcome.waited_s,
        )
        self._pending_boundary = False
        self._commit_due_at = None
        self._standby = None
        self.stats.commits += 1
        if lookahead.group_id:
            self._hooks.lookahead_ended(lookahead.group_id)
        lookahead.reset()
        return outcome

    async def _resolve_running_job(self) -> float:
        """At commit time: wait for a running lookahead (promoted) or abandon it. An in-flight
        warm-up of a ready result sends no further chunk: the commit request prefills what is
        left in one go, where a chunked warm-up competing with other programs could take much
        longer. A warmer that can stop after its chunk in flight (`finish_warm_up`) is waited
        for up to `warmup_wait_timeout_s`, so the commit runs where that chunk is cached; any
        other is cancelled at once (what it prefilled stays cached)."""
        job, lookahead = self._job, self.lookahead
        if job is None or job.done():
            return 0.0
        if not lookahead.in_flight_or_ready:
            await self._cancel_job()  # no lookahead's work (a copy of the live context)
            return 0.0
        if lookahead.warmed_end is None and self._lookahead_job_started is not None:
            # The commit came before the result was warm: it takes at least this long.
            self._time_lookahead_in_turns(self.clock() - self._lookahead_job_started)
        timeout: float | None = 0.0
        if lookahead.status is LookaheadStatus.READY:
            if self._hooks.finish_warm_up(self.program_id):
                timeout = self.config.warmup_wait_timeout_s
        else:
            if not self.policy.should_promote(self.main, lookahead):
                self.stats.abandoned += 1
                await self._cancel_job()
                self._waste(lookahead.group_id)
                lookahead.abandon()
                return 0.0
            lookahead.promote()  # its work waiting for slack goes now
            self.stats.promotions += 1
            timeout = self.config.commit_wait_timeout_s
        started = time.perf_counter()
        # Server-side promotion is an optimization: it runs beside the wait, never holds it.
        promotion = (
            asyncio.create_task(self._promote_on_server(lookahead.group_id))
            if lookahead.promoted and lookahead.group_id
            else None
        )
        try:
            done, _ = await asyncio.wait({job}, timeout=timeout)
        finally:
            if promotion is not None and not promotion.done():
                promotion.cancel()
        if not done:
            await self._cancel_job()
            if lookahead.status is LookaheadStatus.RUNNING:
                self._fail(TimeoutError("lookahead still running at the commit wait timeout"))
        waited = time.perf_counter() - started
        self.stats.waited_s += waited
        return waited

    async def _promote_on_server(self, group_id: str) -> None:
        try:
            await self._hooks.promote(group_id)
        except Exception as error:
            log.warning("promotion of %s failed: %r", group_id, error)

    # -- background work ---------------------------------------------------------------------
    def _observe_boundary(self) -> None:
        """What a boundary tells, taken once, when it happens. A boundary deferred behind a
        running job (`_after_job`) is not observed again: by then the model call it announced
        may have gone out, and a second announcement would hold every program's best-effort
        work behind a call already sent until it expires (1 s; traced on the CPU engine: an
        Offload warm-up due at the next call held 1 s, beside that call's decode and into the
        tool wait, and the commit waited 0.6 s for it)."""
        now = self.clock()
        last = self.main.last_message
        if last is not None and last.get("role") == "assistant":
            self._marks_reply_boundaries = True
        self._growth.observe(now, self.main.tokens)
        self._pace.boundary(now, self.main.turn)
        if self.main.awaits_model_call():
            # Whatever starts at this boundary must not go to the engine ahead of that call.
            self._hooks.model_call_next(self.program_id)

    def _on_boundary(self) -> None:
        self._refresh_due()
        self._drop_if_stale()
        if self._job is not None and not self._job.done():
            self.stats.superseded_boundaries += self._pending_boundary
            self._pending_boundary = True
            return
        self._pending_boundary = False
        main, lookahead = self.main, self.lookahead
        commits_next = self.commit_due and not self._tools_pending()
        # Work held back at the boundary before this turn's model call (below) runs in the
        # turn's tool wait even if the call after them commits: it would have run before.
        resumes_held = self._held_for_model_call and self._tools_pending()
        if (
            self._target.applies_before_model_call()
            and (commits_next or self.policy.should_commit(main, lookahead))
            and not resumes_held
        ):
            # The next model call commits: background work started now would only make it wait
            # for what it does itself (prefill the newest suffix, or transform synchronously).
            # While the tools of a commit decided ahead run, warming the model's turn still pays.
            return
        if self._model_calls_left == 0 and self._target.applies_before_model_call():
            return  # no model call follows to commit anything started now
        # Where the server admits best-effort work itself, a ready result's redo (Offload's, of
        # each new output) or warm-up waits for the boundary after the model call just made
        # due: sent beside that call, which prefills the same new messages in the live context,
        # its tokenization and chunk only delay the call's first token; after the reply it
        # covers both in the tool wait. A lookahead still to start starts now (its lead counts),
        # and so does a regrow (its commit may be decided at that reply, and a redo is not
        # started for a commit decided). A warmer that waits for slack itself is not held: its
        # chunks already go after the call, and held, the larger warm-up at the reply ran into
        # the commit (four agents on the CPU engine: KeepRecent's commit turns 0.12 -> 0.32 of
        # sync, 1.7 s of each spent beside warm-up chunks).
        holds = (
            lookahead.status is LookaheadStatus.READY
            and self._marks_reply_boundaries
            and main.awaits_model_call()
            and not self._hooks.waits_for_slack
        )
        self._held_for_model_call = False
        if self.policy.should_lookahead(main, lookahead):
            if holds:
                self._held_for_model_call = True
            elif self._commit_out_of_reach():
                self.stats.out_of_reach_starts += 1
            elif self._defers_start():
                self.stats.deferred_starts += 1
            else:
                self._start_lookahead(main.snapshot())
        elif (
            lookahead.status is LookaheadStatus.READY
            and not self.commit_due
            and self._regrow_pays()
        ):
            # Redone now, in the background, rather than resized on the commit's critical path;
            # kept until the redo's result is ready, in case the commit comes first.
            self.stats.regrown_lookaheads += 1
            standby = (copy.copy(lookahead), self._spent_by_group.get(lookahead.group_id or "", 0))
            self._start_lookahead(main.snapshot(), branch_in_use=True)
            self._standby = standby
        elif lookahead.status is LookaheadStatus.READY and self._suffix_to_warm():
            if holds:
                self._held_for_model_call = True
            else:
                self._run_job(self._warm(lookahead.group_id or ""))
        elif (
            self._tools_pending()
            and self._hooks.copies_live_context
            and (
                self.policy.keeps_live_prefix(main, lookahead)
                or self._hooks.wants_live_copy(self.program_id)
            )
        ):
            with use_tags(self.tags.best_effort()):  # the copy waits for slack like a warm-up
                self._run_job(self._fork_live())

    def _start_lookahead(self, snapshot: Snapshot, *, branch_in_use: bool = False) -> None:
        """`branch_in_use`: the branch holds the warm-up of a result kept on standby (a redo):
        the new lookahead's summary must not overwrite it with a copy of the live context."""
        self._standby = None
        group_id = f"{self.program_id}:{self.policy.name}:s{self.main.turn}:{self.stats.lookaheads_started}"
        previous = self.lookahead.group_id
        if previous is not None:
            self._hooks.lookahead_ended(previous)
        if self.lookahead.status is LookaheadStatus.READY and previous is not None:
            # A ready result superseded by a newer one (e.g. Isolate's next chunk): its work is
            # wasted only if the newer one is.
            self._spent_by_group[group_id] = self._spent_by_group.pop(previous, 0)
        else:
            # A failed or stale one is never committed: its work is wasted (and its record
            # dropped, or one would be kept per lookahead for the whole run).
            self._waste(previous)
        ctx = self._transform_context(is_lookahead=True, partial_output=snapshot.partial_output)
        ctx.expected_growth_tokens = self._expected_growth_until_commit()
        kept_from = self.policy.kept_from(snapshot.messages, ctx)
        self.lookahead.start(snapshot, group_id, kept_from=kept_from)
        self._refresh_due()
        self.stats.lookaheads_started += 1
        self._run_job(self._lookahead_job(snapshot, group_id, ctx, copy_live=not branch_in_use))

    def _run_job(self, work: Coroutine[Any, Any, None]) -> None:
        self._job = asyncio.create_task(work)
        self._job.add_done_callback(self._after_job)

    async def _lookahead_job(
        self, snapshot: Snapshot, group_id: str, ctx: TransformContext, *, copy_live: bool = True
    ) -> None:
        lookahead = self.lookahead
        started = self._lookahead_job_started = self.clock()
        tags = self.tags.lookahead(group_id, commit_deadline_ms=self._commit_deadline_ms())
        with use_tags(tags), doing(lookahead.work):
            if self.policy.needs_summarizer and self._hooks.copies_live_context and copy_live:
                # Its LLM request starts with the live context (a summary's does): a copy of
                # it in the branch lets the request run there, leaving the agent's slot alone.
                # Not for a redo: the branch holds the standby result's warm-up, which a
                # commit arriving before the redo is ready takes (traced in the demo: copied
                # over, that commit found 61 of 1,044 tokens cached). The redo's request then
                # runs in the live slot, which holds its prompt's start just the same.
                await self._fork_live(through_last_reply(snapshot.messages))
            try:
                result = await asyncio.wait_for(
                    self.policy.transform(list(snapshot.messages), ctx),
                    self.config.transform_timeout_s,
                )
                validate_messages(result.messages)  # an invalid result falls back at commit
            except asyncio.CancelledError as error:
                self._account(
                    group_id, ctx.usage.uncached_prompt_tokens, ctx.usage.completion_tokens
                )
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the runtime cancelled this job (a commit, a stale result, close)
                # Cancelled from elsewhere: an LLM call on a loop that shut down (AutoGen's
                # summary on the agent's loop when its asyncio.run ended). A failure, so the
                # next boundary can start again; left RUNNING, no lookahead would ever start.
                log.warning("lookahead transform %s was cancelled from outside", group_id)
                if lookahead.group_id == group_id and lookahead.status is LookaheadStatus.RUNNING:
                    self._fail(error)
                return
            except Exception as error:  # a failing lookahead must never break the agent
                log.warning("lookahead transform %s failed: %r", group_id, error)
                self._account(
                    group_id, ctx.usage.uncached_prompt_tokens, ctx.usage.completion_tokens
                )
                if lookahead.group_id == group_id and lookahead.status is LookaheadStatus.RUNNING:
                    self._fail(error)
                return
            self._account(group_id, ctx.usage.uncached_prompt_tokens, ctx.usage.completion_tokens)
            if lookahead.group_id != group_id or lookahead.status is not LookaheadStatus.RUNNING:
                return
            lookahead.ready(result.messages, result.data)
            self._standby = None
            if not lookahead.promoted:  # promoted: the commit is waiting and prefills it itself
                await self._warm(group_id)
                self._lookahead_job_s = self.clock() - started
                self._time_lookahead_in_turns(self._lookahead_job_s)

    async def _warm(self, group_id: str) -> None:
        """Prefill the context the commit would send now: result + suffix that arrived since."""
        lookahead = self.lookahead
        warmer = self.warmer
        if warmer is None or lookahead.messages is None or lookahead.group_id != group_id:
            return
        end = len(self.main) if self.config.warm_suffix else lookahead.last_segment_end
        messages = self.policy.assemble(
            TransformResult(list(lookahead.messages), lookahead.strategy_data),
            self.main.messages[lookahead.last_segment_end : end],
        )
        tags = self.tags.lookahead(group_id, commit_deadline_ms=self._commit_deadline_ms())
        # How much of it the live context holds (a warmer may seed the warm-up from it).
        shared = self.main.shared_prefix_messages(messages)
        warmer.live_prefix(
            self.program_id,
            self.main.shared_prefix_share(messages, shared_messages=shared),
            shared,
        )
        spend = WarmupSpend()
        with use_tags(tags), doing(lookahead.work):
            try:
                outcome = await warmer.warm(
                    messages,
                    shape=self.shape,
                    open_last=self._target.warms_open(lookahead),
                    spend=spend,
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
        if lookahead.group_id == group_id and outcome.complete:
            lookahead.warmed(end)

    async def _fork_live(self, messages: Sequence[Message] | None = None) -> None:
        """The engine holds exactly the live history (default: all of it, the model's turn just
        ended) for this program: the warmer copies it into the branch the next lookahead will
        be warmed in (see `ContextPolicy.keeps_live_prefix`)."""
        try:
            copied = await self._hooks.fork_live(
                self.program_id,
                list(self.main.messages if messages is None else messages),
                shape=self.shape,
            )
        except Exception as error:  # an optimization: the warm-up then prefills that prefix
            log.warning("copying the live context of %s failed: %r", self.program_id, error)
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
        if self.warmer is None or not self.config.warm_suffix:
            return False
        return lookahead.warmed_end is not None and lookahead.warmed_end < len(self.main)

    def _drop_if_stale(self) -> None:
        lookahead = self.lookahead
        if lookahead.in_flight_or_ready and (
            not lookahead.covers(self.main) or self._target.outlived(lookahead, self.main)
        ):
            self.stats.stale += 1
            lookahead.mark_stale()
            if self._job is not None and not self._job.done():
                self._job.cancel()

    def _fail(self, error: BaseException) -> None:
        self.stats.failures += 1
        self.lookahead.fail(error)

    def _account(self, group_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        self.stats.background_prompt_tokens += prompt_tokens
        self.stats.background_completion_tokens += completion_tokens
        self._spent_by_group[group_id] = self._spent_by_group.get(group_id, 0) + prompt_tokens

    def _waste(self, group_id: str | None) -> None:
        if group_id is not None:
            self.stats.wasted_prompt_tokens += self._spent_by_group.pop(group_id, 0)

    def _growth_misfit(self, *, at_commit: bool, lookahead: LookaheadState | None = None) -> int:
        """Tokens the ready result + suffix keeps verbatim beyond (> 0) or short of (< 0) what a
        commit would keep: a synchronous one now (`at_commit`), else a lookahead started now,
        sized for the growth still expected (what the result will keep against what a
        synchronous commit will). 0 for a policy without `kept_from`. `lookahead`: another
        ready result than the current one."""
        lookahead = self.lookahead if lookahead is None else lookahead
        if lookahead.status is not LookaheadStatus.READY or lookahead.kept_from is None:
            return 0
        should_keep_from = self._kept_from_now(synchronous=at_commit)
        if should_keep_from is None:
            return 0
        kept_from = lookahead.kept_from
        if kept_from <= should_keep_from:
            return self.main.tokens_between(kept_from, should_keep_from)
        return -self.main.tokens_between(should_keep_from, kept_from)

    def _keeps_too_much(self, lookahead: LookaheadState, misfit: int) -> bool:
        """Whether a ready result that keeps `misfit` tokens more than a synchronous commit now
        would (`_growth_misfit`) is over the slack: more than a turn (`_one_turn_tokens`),
        unless all it keeps beyond is exactly one whole older turn (a tool-call group) and the
        misfit is at most twice the turn slack: one segment of slack. Resizing such a result
        drops that turn from the front of the kept suffix, which shifts everything after the
        head: the commit prefills the whole context again, as a synchronous one does (a
        KeepRecent commit one token over the turn slack, traced). A larger turn (an old burst)
        is dropped: kept, it would bring the next commit turns sooner, before its lookahead
        starts."""
        slack = self._one_turn_tokens()
        if misfit <= slack:
            return False
        kept_from = lookahead.kept_from
        should_keep_from = self._kept_from_now(synchronous=True)
        if kept_from is None or should_keep_from is None or kept_from >= should_keep_from:
            return True
        one_turn = len(atomic_groups(self.main.messages[:should_keep_from], kept_from)) == 1
        return not (one_turn and misfit <= 2 * slack)

    def _kept_from_now(self, *, synchronous: bool) -> int | None:
        """Where the suffix a commit would keep verbatim begins, from the live history: a
        synchronous transform now, or a lookahead started now (sized for the growth expected)."""
        ctx = self._transform_context(is_lookahead=not synchronous, partial_output=None)
        ctx.expected_growth_tokens = 0 if synchronous else self._expected_growth_until_commit()
        return self.policy.kept_from(self.main.messages, ctx)

    def _with_dropped_turns(self, end: int) -> tuple[list[Message], int] | None:
        """The ready result with the turns a synchronous commit now keeps but it dropped put
        back before its kept suffix, plus the suffix since `end`; and the tokens from the
        insertion on (what the commit request prefills). None if the result does not end with
        its kept suffix verbatim (`ContextPolicy.kept_from`'s contract)."""
        lookahead, main = self.lookahead, self.main
        if lookahead.messages is None or lookahead.kept_from is None:
            return None
        should_keep_from = self._kept_from_now(synchronous=True)
        if should_keep_from is None or should_keep_from >= lookahead.kept_from:
            return None
        result = list(lookahead.messages)
        kept = list(main.messages[lookahead.kept_from : end])
        position = len(result) - len(kept)
        if position < 0 or result[position:] != kept:
            return None
        widened = [
            *result[:position],
            *main.messages[should_keep_from : lookahead.kept_from],
            *kept,
        ]
        messages = self.policy.assemble(
            TransformResult(widened, dict(lookahead.strategy_data)), main.messages[end:]
        )
        unwarmed = sum(count_message(main.token_counter, m) for m in messages[position:])
        return messages, unwarmed

    def _regrow_pays(self) -> bool:
        """Whether a ready result is redone now: it keeps over a turn more or less than a
        lookahead started now would; or it kept none of the history it saw (it started so far
        ahead that all the commit keeps verbatim is what arrived since), the commit it would
        make keeps over half a turn more than a synchronous one, a result made now would not,
        and the commit is at least twice as far off (at the history's growth rate) as the last
        lookahead took, start to warm. Committed as it is, such a result keeps every turn since
        its start, so each later turn is longer and the next commit comes sooner; but a commit
        that waits for a redo, or prefills a redo not yet warm, costs more than that (a CPU
        engine's summary redone a turn or two ahead: the demo's commits waited 0.8 s for it)."""
        one_turn = self._one_turn_tokens()
        misfit = self._growth_misfit(at_commit=False)
        if abs(misfit) > one_turn:
            return True
        lookahead, main = self.lookahead, self.main
        if misfit <= 0 or lookahead.kept_from is None:
            return False
        if not _keeps_none(main.messages[: lookahead.last_segment_end], lookahead.kept_from):
            return False  # it kept part of the history: within a turn is as close as it gets
        synchronous_from = self._kept_from_now(synchronous=True)
        if synchronous_from is None:
            return False
        synchronous_keeps = main.tokens_between(synchronous_from)
        growth = self._expected_growth_until_commit()
        as_it_is = main.tokens_between(lookahead.kept_from) + growth
        if not as_it_is - synchronous_keeps > one_turn / 2 >= growth - synchronous_keeps:
            return False
        until_commit_ms = self._commit_deadline_ms()
        return (
            self._lookahead_job_s is not None
            and until_commit_ms is not None
            and until_commit_ms / 1000 >= REDO_MARGIN * self._lookahead_job_s
        )

    def _defers_start(self) -> bool:
        """Whether a lookahead due now starts at a later boundary: started now, it would keep
        none of the history (the growth expected before its commit is more than a commit keeps
        verbatim), so its commit would keep over half a turn more than a synchronous one and it
        would be redone on the way (a summary twice, the second maybe not in time). Deferred
        while the turn after this one still leaves `MIN_DEFERRED_LEAD_TURNS` average turns before
        the commit and, once a lookahead has been timed, `REDO_MARGIN` times its duration.
        Never when a turn as large as the largest of the last `TAIL_TURNS` (a burst that may
        come again) would reach the commit: deferred, nothing would be ready for it."""
        remaining = self.policy.tokens_until_commit(self.main)
        largest = self.main.largest_turn_tokens
        if remaining is not None and largest is not None and largest >= remaining:
            return False
        kept_from = self._kept_from_now(synchronous=False)
        turns = self.main.recent_turn_tokens
        if kept_from is None or not _keeps_none(self.main.messages, kept_from) or not turns:
            return False
        synchronous_from = self._kept_from_now(synchronous=True)
        if synchronous_from is None:
            return False
        growth = self._expected_growth_until_commit()
        if growth - self.main.tokens_between(synchronous_from) <= self._one_turn_tokens() / 2:
            return False
        mean = statistics.fmean(turns)
        left_after_next_turn = growth - mean
        if left_after_next_turn < MIN_DEFERRED_LEAD_TURNS * mean:
            return False
        if self._lookahead_job_s is None:
            return True
        seconds = self._growth.seconds_until(round(left_after_next_turn))
        return seconds is not None and seconds >= REDO_MARGIN * self._lookahead_job_s

    def _commit_out_of_reach(self) -> bool:
        """The history would not reach the policy's commit within `model_calls_left` more model
        calls. It grows by the outputs of the turn just ended (if still to come), then by a
        whole turn before each call after the next: each the median of the recent turns (robust
        to the short turn a commit leaves in that record), one as large as the largest of them.
        The commit needs the limit reached before the last call, or (a policy that
        `decides_commit_ahead`) the limit less `commit_ahead_reserve` at the reply before it."""
        calls_left = self._model_calls_left
        if calls_left is None or not self._target.applies_before_model_call() or self.commit_due:
            return False  # a spawn commits at a delegation, within the model call it follows
        remaining = self.policy.tokens_until_commit(self.main)
        turns = self.main.recent_turn_tokens
        if remaining is None or not turns:
            return False
        typical = statistics.median(turns)
        largest = self.main.largest_recent_turn_tokens or 0  # of the same recent turns
        reply = self.main.last_reply_tokens
        pending = self._tools_pending()

        def growth(whole_turns: int, then_reply: bool) -> float:
            tokens = (max(0.0, typical - reply) if pending else 0.0) + whole_turns * typical
            if pending or whole_turns:
                tokens += largest - typical
            return tokens + (reply if then_reply else 0)

        reserve = self.policy.commit_ahead_reserve(self.main)
        if remaining + reserve <= growth(calls_left - 1, then_reply=False):
            return False
        ahead = self.policy.decides_commit_ahead and calls_left >= 2
        return not (ahead and remaining <= growth(calls_left - 2, then_reply=True))

    def _one_turn_tokens(self) -> int:
        """The slack a lookahead commit has against a synchronous one: one turn, as large as the
        largest of the last few or the newest (whose outputs no background work can foresee,
        and which may shift what a synchronous commit keeps by up to its size)."""
        return max(self.main.largest_recent_turn_tokens or 0, self.main.tokens_since_last_turn)

    def _expected_growth_until_commit(self) -> int:
        """Tokens the history will likely gain before the commit, from the last few turns'
        sizes: the distance to the policy's trigger, plus how far the turn that crosses it
        overshoots, plus (for a commit decided as a model turn ends) that turn's outputs.
        Transforms sized for growth keep that much less, so the committed context (result +
        suffix) is as large as a synchronous one."""
        remaining = self.policy.tokens_until_commit(self.main)
        turns = self.main.recent_turn_tokens
        if remaining is None:
            return 0
        if not turns:
            return remaining
        mean = statistics.fmean(turns)
        ahead = self.policy.decides_commit_ahead
        if ahead and self.commit_due:
            return max(0, round(mean) - self.main.last_reply_tokens)  # this turn's outputs
        # The turn that crosses a line is more likely a large one: it passes it by
        # E[X^2] / 2E[X] on average (renewal theory), not by half a mean turn.
        overshoot = statistics.fmean(x * x for x in turns) / (2 * mean)
        if not ahead:
            return round(remaining + overshoot)
        # Decided as a model turn ends: after the model's next message when no tools are
        # pending (an outputs boundary); that turn's outputs (a turn less its reply, already
        # in the history when the commit is decided) arrive before the commit.
        outputs = max(0, mean - self.main.last_reply_tokens)
        if not self._tools_pending():
            remaining = max(0, remaining - self.main.last_reply_tokens)
        return round(remaining + overshoot + outputs)

    def _commit_deadline_ms(self) -> int | None:
        """When the commit is expected (ms from now), from the policy's distance to its trigger
        and the history's recent growth rate; lets the server order best-effort work by urgency."""
        seconds = self._seconds_until_commit()
        return None if seconds is None else int(seconds * 1000)

    def _time_lookahead_in_turns(self, seconds: float) -> None:
        """`MainState.lookahead_turns`: a lookahead's start-to-warm time in the agent's idle
        time per turn (its tool waits, `IdlePace`). Left as it was where the loop shows none."""
        idle = self._pace.idle_s_per_turn
        if idle:
            self.main.lookahead_turns = seconds / idle
            self.lookahead_turns_timed.append(self.main.lookahead_turns)

    def _seconds_until_commit(self) -> float | None:
        remaining = self.policy.tokens_until_commit(self.main)
        return self._growth.seconds_until(remaining) if remaining is not None else None

    def _refresh_due(self) -> None:
        """Tell the lookahead's background work when its commit is expected (the slack gate
        lets due work run beside decoding replies, the rest waits for idle time)."""
        work = self.lookahead.work
        if work is not None:
            seconds = self._seconds_until_commit()
            work.due_at = None if seconds is None else time.monotonic() + seconds

    def _transform_context(
        self, *, is_lookahead: bool, partial_output: PartialOutput | None
    ) -> TransformContext:
        return TransformContext(
            token_counter=self.main.token_counter,
            window_tokens=self.main.window_tokens,
            is_lookahead=is_lookahead,
            summarizer=self.summarizer,
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
            "program_id": self.program_id,
            "messages": [dict(message) for message in self.main.messages],  # as `prepare`
            "turn": self.main.turn,
            "commit_due_at": (
                [self._commit_due_at[0], self._commit_due_at[1].hex()]
                if self._commit_due_at
                else None
            ),
            "stats": asdict(self.stats),
            "model_calls_made": self._model_calls_made,
            "spawned_at": None if self._spawned_at is None else self._spawned_at.hex(),
            # What the runtime learned of the agent's pace, so a restored one starts its
            # lookaheads when the original would have (clock readings are not kept).
            "growth": {
                **self.main.growth_state(),
                "tokens_per_s": self._growth.tokens_per_s,
                "idle_s_per_turn": self._pace.idle_s_per_turn,
                "lookahead_job_s": self._lookahead_job_s,
                "marks_reply_boundaries": self._marks_reply_boundaries,
                "held_for_model_call": self._held_for_model_call,
            },
            "lookahead": {"status": lookahead.status.value},
        }
        if lookahead.status is LookaheadStatus.READY and lookahead.messages is not None:
            saved["lookahead"] = {
                "status": "ready",
                "messages": [dict(message) for message in lookahead.messages],
                "last_segment_end": lookahead.last_segment_end,
                "covered_signature": lookahead.covered_signature.hex(),
                "group_id": lookahead.group_id,
                "strategy_data": copy.deepcopy(lookahead.strategy_data),
                "kept_from": lookahead.kept_from,
                "warmed_end": lookahead.warmed_end,
                # The instruction streaming when it was made (Isolate): it covers only the
                # delegation that stream becomes (`CommitTarget.outlived`).
                "covered_partial": (
                    None if lookahead.covered_partial is None else asdict(lookahead.covered_partial)
                ),
            }
        return saved

    def load_state(self, state: Mapping[str, Any], *, adopt_program_id: bool = False) -> None:
        """Restore `save_state` output. Atomic: the whole state is read and checked first, and
        only then swapped in, so a state that does not fit (InvalidInputError naming the field) leaves
        the runtime exactly as it was. A restored result is committed only if the restored
        history still matches the prefix it covers (the usual signature check).

        `adopt_program_id` (for a runtime whose id was generated, not given): a runtime that has
        not yet seen a boundary continues the saved program under its id, so the server
        placement of its context and of a ready result's warm-up (llama.cpp slots) and a
        router's record of the program carry over."""
        self._check_open()
        restored = _read_state(state, self.policy.name, self.main)
        program_id = self.program_id
        if adopt_program_id and self.stats.boundaries == 0 and self.stats.commits == 0:
            program_id = _saved_program_id(state, program_id)
        if self._job is not None:
            self._job.cancel()
        (
            self.main,
            self.lookahead,
            self.stats,
            self._commit_due_at,
            calls_made,
            self._spawned_at,
            growth,
        ) = restored
        if growth is not None:
            self._growth = GrowthRate()
            self._growth.tokens_per_s = growth["tokens_per_s"]
            self._pace = IdlePace()
            self._pace.idle_s_per_turn = growth["idle_s_per_turn"]
            self._lookahead_job_s = growth["lookahead_job_s"]
        # Both absent (False) from states saved before the fields existed.
        self._marks_reply_boundaries = bool(growth and growth.get("marks_reply_boundaries"))
        self._held_for_model_call = bool(growth and growth.get("held_for_model_call"))
        self._model_calls_made = calls_made
        self._calls_left_from_limit()
        self._pending_boundary = False
        if program_id != self.program_id:
            if self.mode == "lookahead":
                self._hooks.detach(self.program_id)
                self._hooks.attach(program_id)
            self.tags = replace(self.tags, program_id=program_id)
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
            self._hooks.lookahead_ended(self.lookahead.group_id)
        if self.mode == "lookahead":
            self._hooks.detach(self.program_id)

    async def __aenter__(self) -> LookaheadRuntime:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise StateError("this LookaheadRuntime is closed; create a new one per program run")


def _warmed_end(saved: Mapping[str, Any], history_length: int) -> int | None:
    """A saved result's warmed end: between its covered prefix and the history's end."""
    end = saved.get("warmed_end")
    if end is None:  # never warmed, or saved before the field existed
        return None
    end = require_int("warmed_end", end)
    if not require_int("last_segment_end", saved["last_segment_end"]) <= end <= history_length:
        raise ValueError(
            f"warmed_end {end} lies outside the result's suffix (last_segment_end.."
            f"{history_length} messages)"
        )
    return end


def _covered_partial(saved: Any) -> PartialOutput | None:
    """A saved result's streaming instruction (None: none, or saved before the field existed)."""
    if saved is None:
        return None
    text, tool_name = saved["text"], saved["tool_name"]
    if not isinstance(text, str) or not (tool_name is None or isinstance(tool_name, str)):
        raise ValueError(
            f"covered_partial must hold a str text and a str or null tool_name, got {saved!r}"
        )
    return PartialOutput(text, tool_name)


def _saved_program_id(state: Mapping[str, Any], current: str) -> str:
    """The program id a state was saved under (`current` for a state saved before the field)."""
    saved = state.get("program_id")
    if saved is None:
        return current
    try:
        return check_id(saved, "state.program_id")
    except ValueError as error:
        raise InvalidInputError(f"{error}; the runtime is unchanged") from None


def _read_state(
    state: Mapping[str, Any], policy_name: str, current: MainState
) -> tuple[
    MainState,
    LookaheadState,
    RuntimeStats,
    tuple[int, bytes] | None,
    int,
    bytes | None,
    Mapping[str, Any] | None,
]:
    """Everything `load_state` swaps in, built from `state` without touching the runtime."""
    if not isinstance(state, Mapping) or state.get("version") != STATE_FORMAT_VERSION:
        raise InvalidInputError(
            f"state must be a dict saved by LookaheadRuntime.save_state (version "
            f"{STATE_FORMAT_VERSION})"
        )
    if state.get("policy") != policy_name:
        raise InvalidInputError(
            f"state was saved with policy {state.get('policy')!r}, this runtime runs "
            f"{policy_name!r}"
        )
    field_name = "state"
    try:
        field_name = "state.messages"
        main = MainState(
            state["messages"],
            window_tokens=current.window_tokens,
            token_counter=current.token_counter,
        )
        field_name = "state.turn"
        main.turn = require_int("turn", state["turn"])
        field_name = "state.commit_due_at"
        due = state.get("commit_due_at")
        commit_due_at = None
        if due is not None:
            end, signature = due
            commit_due_at = (require_int("end", end), bytes.fromhex(signature))
        field_name = "state.model_calls_made"
        calls_made = require_int("model_calls_made", state.get("model_calls_made", 0))
        field_name = "state.spawned_at"
        spawned = state.get("spawned_at")  # absent from states saved before the field existed
        spawned_at = None if spawned is None else bytes.fromhex(spawned)
        field_name = "state.growth"
        growth = state.get("growth")  # absent from states saved before the field existed
        if growth is not None:
            main.restore_growth(growth)
            for name in ("tokens_per_s", "idle_s_per_turn", "lookahead_job_s"):
                require_number(name, growth[name], optional=True)
            for name in ("marks_reply_boundaries", "held_for_model_call"):
                require_flag(name, growth.get(name, False))
        field_name = "state.stats"
        stats = _read_stats(state["stats"])
        field_name = "state.lookahead"
        lookahead = LookaheadState()
        saved = state["lookahead"]
        if saved["status"] == "ready":
            lookahead.restore(
                messages=validate_messages(saved["messages"]),
                last_segment_end=require_int("last_segment_end", saved["last_segment_end"]),
                covered_signature=bytes.fromhex(saved["covered_signature"]),
                group_id=saved["group_id"],
                strategy_data=dict(saved["strategy_data"]),
                kept_from=(
                    None
                    if saved.get("kept_from") is None  # saved before the field existed
                    else require_int("kept_from", saved["kept_from"])
                ),
                warmed_end=_warmed_end(saved, len(main)),
                covered_partial=_covered_partial(saved.get("covered_partial")),
            )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise InvalidInputError(
            f"{field_name} does not fit a saved LookaheadRuntime state ({error!r}); the runtime "
            "is unchanged"
        ) from None
    return main, lookahead, stats, commit_due_at, calls_made, spawned_at, growth


def _read_stats(saved: Mapping[str, Any]) -> RuntimeStats:
    known = {field.name: field.type for field in fields(RuntimeStats)}
    unknown = set(saved) - set(known)
    if unknown:
        raise ValueError(f"unknown stats {sorted(unknown)}")
    values: dict[str, Any] = {}
    for name, value in saved.items():
        require_number(f"stats.{name}", value)
        values[name] = value  # as saved: an int stays an int
    return RuntimeStats(**values)


def through_last_reply(messages: Sequence[Message]) -> Sequence[Message]:
    """What the program's live slot holds: its last request's prompt and reply (the messages up
    to the last assistant message)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            return messages[: index + 1]
    return messages


def _keeps_none(messages: Sequence[Message], kept_from: int) -> bool:
    """A result keeping `messages[kept_from:]` keeps none of the history it saw: nothing, or only
    the newest turn, still waiting for its tool results (kept so they have their call)."""
    return kept_from >= answered_prefix_end(messages, min(kept_from, len(messages)))

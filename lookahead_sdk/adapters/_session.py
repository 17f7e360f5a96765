"""What every framework adapter shares: its settings (policy + `RuntimeConfig` + tagging), what
it learns from the framework's model and its server (`discover`: window, tokenizer, wire), and
the hosted runtimes it serves, with their events and metrics (`AdapterCore`), kept in step with
the framework's own message list through a `HistoryMirror`.

All mirror work runs on the runtime's thread, inside the same hop as the runtime call, so the
mirror and the runtime are only ever touched by that one thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from lookahead_sdk.adapters._events import (
    EventQueue,
    LookaheadEvent,
    ObservingWarmer,
    commit_event,
)
from lookahead_sdk.adapters._metrics import MetricsServer, StatsBook, render
from lookahead_sdk.adapters._mirror import HistoryMirror, SyncPlan
from lookahead_sdk.adapters._models import FrameworkCompletionClient, ModelFacts
from lookahead_sdk.base.completion import CompletionClient
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.protocol import RequestTags, WireFormat
from lookahead_sdk.base.tags import current_tags
from lookahead_sdk.base.tokens import (
    CachedTokenCounter,
    CalibratedTokenCounter,
    TokenCounter,
    auto_token_counter,
)
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.client.session import ServerSession
from lookahead_sdk.core.config import RuntimeConfig
from lookahead_sdk.core.hosted import AdapterLoop, HostedRuntime
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import ContextPolicy, Pipeline, resolve_policy
from lookahead_sdk.core.runtime import CommitOutcome, LookaheadRuntime
from lookahead_sdk.core.warmer import RequestShape
from lookahead_sdk.errors import ConfigurationError, InvalidInputError
from lookahead_sdk.strategies.offload import Offload

M = TypeVar("M")
log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
AUTO = "auto"

# Turns what a user passed as `summarizer=` into a CompletionClient (the adapter's framework
# model wrapped), or raises ConfigurationError naming what is accepted.
SummarizerCoercion = Callable[[object], CompletionClient]


@dataclass(frozen=True)
class AdapterSettings:
    """How an adapter builds the runtime of each program it serves: the policy, the
    `RuntimeConfig` from the adapter's `config=` and keyword overrides (window, counter and
    summarizer may be left to `discover`), whether tags go into request bodies (`send_tags`:
    None where the server is known to take them), and `warmer="auto"` (one built for the
    model's server)."""

    policy: ContextPolicy
    config: RuntimeConfig
    send_tags: bool | None = None
    auto_warmer: bool = False

    @classmethod
    def resolve(
        cls,
        policy: ContextPolicy | None,
        owner: object,
        config: RuntimeConfig | None,
        overrides: dict[str, Any],
        *,
        coerce_summarizer: SummarizerCoercion,
        has_model: bool,
        send_tags: bool | None = None,
    ) -> AdapterSettings:
        """Policy from the argument, an enclosing `@context_policy` function, or the owner's class;
        everything checked (ConfigurationError naming the field) before the adapter exists.
        `has_model`: the adapter sees the agent's model (the default summarizer)."""
        resolved = _adapter_policy(policy, owner)
        overrides = dict(overrides)
        auto_warmer = overrides.get("warmer") == AUTO
        if auto_warmer:
            del overrides["warmer"]
        if overrides.get("summarizer") is not None:
            overrides["summarizer"] = coerce_summarizer(overrides["summarizer"])
        if send_tags is not None and not isinstance(send_tags, bool):
            raise ConfigurationError(
                f"send_tags must be True, False or None (tags only where the server is known to "
                f"take them), got {send_tags!r}"
            )
        settings = cls(resolved, RuntimeConfig.build(config, **overrides), send_tags, auto_warmer)
        settings.check(type(owner).__name__, has_model=has_model)
        return settings

    def check(self, owner: str, *, has_model: bool) -> None:
        if self.policy.needs_summarizer and self.config.summarizer is None and not has_model:
            raise ConfigurationError(
                f"{owner}: {self.policy.name} calls an LLM but there is no summarizer: pass "
                "summarizer= (the framework's model object, or a CompletionClient such as "
                "Endpoint.chat_client()), or the agent's model (AutoGen: model_client=)"
            )
        if self.config.window_tokens is not None:
            self.policy.validate(self.config.window_tokens)

    def with_policy(
        self, policy: ContextPolicy, owner: object, *, has_model: bool
    ) -> AdapterSettings:
        settings = replace(self, policy=_adapter_policy(policy, owner))
        settings.check(type(owner).__name__, has_model=has_model)
        return settings

    @property
    def explicit_shape(self) -> bool:
        """The user gave the request shape; otherwise the adapter derives it from the model."""
        return self.config.shape is not None

    def program_tags(self, label: str | None = None) -> RequestTags:
        """The tags of one program: the given or current ones (suffixed with `label` when one
        adapter serves several programs, e.g. LangGraph threads), else a fresh program id."""
        tags = self._given_tags()
        if tags is None:
            return RequestTags(
                program_id=f"prog-{uuid.uuid4().hex[:12]}" + (f"/{label}" if label else "")
            )
        return replace(tags, program_id=f"{tags.program_id}/{label}") if label else tags

    @property
    def names_programs(self) -> bool:
        """The user gave the programs' tags (config or current): ids are theirs, never adopted
        from a saved state."""
        return self._given_tags() is not None

    def _given_tags(self) -> RequestTags | None:
        tags = self.config.tags or current_tags()
        return tags if tags is not None and tags.program_id is not None else None

    # -- what the model and its server say ---------------------------------------------------
    def discover(
        self, owner: str, facts: ModelFacts, default_summarizer: CompletionClient | None
    ) -> Discovered:
        """The complete runtime config: window, token counter, summarizer, warmer and the wire
        tags travel in, from what was given, else the model object, else its server (probed
        once, blocking). ConfigurationError when the window is known nowhere."""
        config = self.config
        session = self._probe(facts.base_url)
        wire = self._wire(session)
        window = config.window_tokens or facts.window_tokens
        if window is None and session is not None:
            window = session.facts.window_tokens
        if window is None:
            where = (
                f"and its server {facts.base_url} reports none"
                if facts.base_url
                else "and it names no server to ask"
            )
            raise ConfigurationError(
                f"{owner}: the context window of {facts.name or 'the model'} is unknown: the "
                f"model object does not say {where}. Pass window_tokens= (the model's context "
                "size in tokens)"
            )
        self.policy.validate(window)
        calibration: CalibratedTokenCounter | None = None
        counter = config.token_counter
        if counter is None:
            base = (session.token_counter() if session is not None else None) or facts.token_counter
            calibration = CalibratedTokenCounter(
                CachedTokenCounter(base) if base is not None else auto_token_counter()
            )
            counter = calibration
        elif isinstance(counter, CalibratedTokenCounter):
            calibration = counter
        summarizer = config.summarizer or default_summarizer
        if isinstance(summarizer, FrameworkCompletionClient):
            # A summarizer on another server (a hosted model, say) gets that server's wire.
            same = summarizer.base_url == facts.base_url
            summarizer.wire = wire if same else self._wire(self._probe(summarizer.base_url))
        warmer = config.warmer
        if self.auto_warmer:
            if session is None or session.facts.engine == "unknown":
                raise ConfigurationError(
                    f"{owner}: warmer='auto' builds a warmer for the model's server, but "
                    f"{facts.base_url or 'the model'} is not a server lookahead-sdk can warm "
                    "(llama.cpp, vLLM, SGLang): pass warmer= explicitly, or leave it out"
                )
            warmer = Endpoint.from_session(session, window_tokens=window).warmer()
        return Discovered(
            config.with_overrides(
                window_tokens=window, token_counter=counter, summarizer=summarizer, warmer=warmer
            ),
            wire,
            session,
            calibration,
            facts,
        )

    def _probe(self, base_url: str | None) -> ServerSession | None:
        """The model's server, probed, when anything is left to learn from it."""
        config = self.config
        needed = (
            config.window_tokens is None
            or config.token_counter is None
            or self.send_tags is not False
            or self.auto_warmer
        )
        if not base_url or not needed:
            return None
        return ServerSession.connect_blocking(base_url, timeout_s=PROBE_TIMEOUT_S)

    def _wire(self, session: ServerSession | None) -> WireFormat:
        """Tags in bodies: as the probed server takes them (none for an unknown or hosted one),
        always (top-level fields where the server's own form is unknown), or never."""
        if self.send_tags is False:
            return "none"
        probed = session.wire if session is not None else "none"
        if self.send_tags and probed == "none":
            return "openai"
        return probed


@dataclass(frozen=True)
class Discovered:
    """What an adapter's runtimes use, learned once: the complete config, the wire tags go in
    ("none": no tag field in any body), the model's server, and the calibrated token counter
    that observed usage is fed to (None when the user gave a counter without `observe`)."""

    config: RuntimeConfig
    wire: WireFormat
    session: ServerSession | None
    calibration: CalibratedTokenCounter | None
    facts: ModelFacts

    @property
    def window_tokens(self) -> int:
        assert self.config.window_tokens is not None
        return self.config.window_tokens

    @property
    def token_counter(self) -> TokenCounter:
        assert self.config.token_counter is not None
        return self.config.token_counter


def _adapter_policy(policy: ContextPolicy | None, owner: object) -> ContextPolicy:
    resolved = resolve_policy(policy, owner)
    if resolved is None:
        raise ConfigurationError(
            f"{type(owner).__name__} needs a context policy: pass policy=Summarize() (or any "
            "ContextPolicy), or decorate with @context_policy(...)"
        )
    if resolved.commit_mode != "replace":
        raise ConfigurationError(
            f"{resolved.name} spawns a sub-agent context instead of rewriting this agent's "
            "history; framework adapters run history-rewriting policies (Offload, KeepRecent, "
            "Summarize and pipelines of them)"
        )
    return resolved


class AdapterCore:
    """What an adapter object holds besides its framework hooks: its settings, what it learned
    from the model (once), the event loop its runtimes live on, their events and metrics."""

    def __init__(self, settings: AdapterSettings, name: str) -> None:
        self.settings = settings
        self.name = name
        self.events = EventQueue()
        self.book = StatsBook()
        self._discovered: Discovered | None = None
        # Learned without the agent's model (a runtime asked for before its first call): the
        # model's discovery replaces it, and the runtimes built from it are listed for rebuilding.
        self._provisional = False
        self._provisional_runtimes: list[HostedRuntime] = []
        self._loop: AdapterLoop | None = None
        self._lock = threading.Lock()
        self._servers: list[MetricsServer] = []

    @property
    def discovered(self) -> Discovered | None:
        return self._discovered

    @property
    def started(self) -> bool:
        return self._discovered is not None

    @property
    def knows_model(self) -> bool:
        """Discovered from the agent's model (not provisionally, without it)."""
        return self._discovered is not None and not self._provisional

    def discover(
        self,
        owner: str,
        facts: ModelFacts,
        default_summarizer: CompletionClient | None,
        *,
        provisional: bool = False,
    ) -> Discovered:
        """Learned once; `provisional`: without the agent's model, until discovery with it."""
        with self._lock:
            if self._discovered is None or (self._provisional and not provisional):
                found = self.settings.discover(owner, facts, default_summarizer)
                warmer = found.config.warmer
                if warmer is not None:  # warm-ups are reported as events
                    config = found.config.with_overrides(
                        warmer=ObservingWarmer(warmer, self.events)
                    )
                    found = replace(found, config=config)
                self._discovered, self._provisional = found, provisional
            return self._discovered

    def take_provisional_runtimes(self) -> list[HostedRuntime]:
        """The runtimes built before the model was known (once the model's discovery ran)."""
        with self._lock:
            if self._provisional:
                return []
            runtimes, self._provisional_runtimes = self._provisional_runtimes, []
            return runtimes

    async def adiscover(
        self, owner: str, facts: ModelFacts, default_summarizer: CompletionClient | None
    ) -> Discovered:
        """`discover` off the caller's event loop (the probe blocks)."""
        if self.knows_model:
            assert self._discovered is not None
            return self._discovered
        return await asyncio.to_thread(self.discover, owner, facts, default_summarizer)

    @property
    def loop(self) -> AdapterLoop:
        if self._loop is None or self._loop.closed:
            self._loop = AdapterLoop(f"lookahead-{self.name}")
        return self._loop

    def host(
        self,
        tags: RequestTags,
        messages: Sequence[Message] = (),
        *,
        shape: RequestShape | None = None,
    ) -> HostedRuntime:
        """A runtime for one program on the adapter's loop; `shape` where the adapter derived it."""
        discovered = self._discovered
        if discovered is None:
            raise RuntimeError("discover() comes before the first runtime")
        overrides: dict[str, Any] = {"tags": tags}
        if shape is not None and not self.settings.explicit_shape:
            overrides["shape"] = shape
        config = discovered.config.with_overrides(**overrides)
        policy = self.settings.policy
        hosted = self.loop.host(lambda: LookaheadRuntime(policy, config, messages=messages))
        self.book.track(hosted.runtime)
        if self._provisional:
            self._provisional_runtimes.append(hosted)
        return hosted

    def release(self, hosted: HostedRuntime) -> None:
        """A runtime the adapter lets go of: its stats stay counted, its queued events go."""
        self.book.retire(hosted.runtime)
        self.events.discard(hosted.runtime.program_id)

    def restore(self, runtime: LookaheadRuntime, state: Mapping[str, Any]) -> bool:
        """On the runtime's loop: load a saved state (`LookaheadRuntime.load_state`, atomic).
        A state that does not fit (another policy, a damaged one) is logged and the runtime
        goes on from the history it has: False."""
        try:
            self.load(runtime, state)
        except InvalidInputError as error:
            log.warning("saved lookahead state of %s not restored: %s", runtime.program_id, error)
            return False
        return True

    def load(self, runtime: LookaheadRuntime, state: Mapping[str, Any]) -> None:
        """On the runtime's loop: `LookaheadRuntime.load_state` (atomic; raises what it
        raises). A runtime whose id the adapter generated continues the saved program's id."""
        self.book.retire(runtime)
        try:
            runtime.load_state(state, adopt_program_id=not self.settings.names_programs)
        finally:
            self.book.track(runtime)

    def commit_event(
        self, outcome: CommitOutcome, runtime: LookaheadRuntime
    ) -> LookaheadEvent | None:
        return commit_event(outcome, runtime.program_id, runtime.main.tokens)

    def pending_events(self, program_id: str) -> list[LookaheadEvent]:
        return self.events.take(program_id)

    def observe_usage(self, context_tokens: int, prompt_tokens: int) -> None:
        """A model call whose context was estimated at `context_tokens` reported its prompt
        size: calibrate the token counter."""
        discovered = self._discovered
        if discovered is not None and discovered.calibration is not None:
            discovered.calibration.observe(context_tokens, prompt_tokens)

    def tag_fields(self, tags: RequestTags) -> dict[str, Any]:
        """The tag fields a request body gets (none for a server not known to take them)."""
        discovered = self._discovered
        return tags.body_fields(discovered.wire) if discovered is not None else {}

    @property
    def sends_tags(self) -> bool:
        """Whether the program's tags are set for the framework's own calls (so a tagging
        transport writes them, per its own wire): not with `send_tags=False`."""
        return self.settings.send_tags is not False

    # -- metrics ---------------------------------------------------------------------------------
    def metrics_text(self) -> str:
        return render(self.book.total(), self.book.live, {"adapter": self.name})

    def serve_metrics(self, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
        server = MetricsServer(self.metrics_text, port, host)
        self._servers.append(server)
        return server

    # -- closing ---------------------------------------------------------------------------------
    def resources(self) -> tuple[object, ...]:
        """The clients the runtimes use, closed with the adapter's loop (a framework's own model
        is the user's: it is not closed)."""
        config = self._discovered.config if self._discovered is not None else self.settings.config
        return tuple(
            r
            for r in (config.warmer, config.summarizer)
            if r is not None and not isinstance(r, FrameworkCompletionClient)
        )

    def _detach(self, runtimes: Sequence[HostedRuntime]) -> AdapterLoop | None:
        for hosted in runtimes:
            self.release(hosted)
        for server in self._servers:
            server.close()
        self._servers.clear()
        loop, self._loop = self._loop, None
        return loop

    def close(self, runtimes: Sequence[HostedRuntime]) -> None:
        loop = self._detach(runtimes)
        if loop is not None:
            loop.close(list(runtimes), *self.resources())

    async def aclose(self, runtimes: Sequence[HostedRuntime]) -> None:
        loop = self._detach(runtimes)
        if loop is not None:
            await loop.aclose(list(runtimes), *self.resources())


def policy_offload_store(policy: ContextPolicy) -> OffloadStore | None:
    """The store an Offload stage of `policy` writes to, if it names one."""
    stages = policy.stages if isinstance(policy, Pipeline) else (policy,)
    for stage in stages:
        if isinstance(stage, Offload) and stage.store is not None:
            return stage.store
    return None


@dataclass(frozen=True)
class Step(Generic[M]):
    outcome: CommitOutcome | None  # None: no commit was asked for
    # With a commit asked for: the context to send, as framework items, when it is not the
    # framework's own list (this commit, or an earlier one the framework did not store).
    items: list[M] | None = None
    state: dict[str, Any] | None = None  # the runtime's saved state after the step, if asked

    @property
    def committed(self) -> bool:
        return self.outcome is not None and self.outcome.committed


class MirroredRuntime(Generic[M]):
    """A hosted runtime kept equal to a framework's message list."""

    def __init__(self, hosted: HostedRuntime, mirror: HistoryMirror[M]) -> None:
        self.hosted = hosted
        self.mirror = mirror

    @property
    def runtime(self) -> LookaheadRuntime:
        return self.hosted.runtime

    @property
    def tags(self) -> RequestTags:
        return self.hosted.runtime.tags

    def _step(
        self,
        items: Sequence[M],
        *,
        commit: bool,
        boundary: bool,
        shape: RequestShape | None,
        save: bool = False,
    ) -> Callable[[LookaheadRuntime], Awaitable[Step[M]]]:
        async def run(runtime: LookaheadRuntime) -> Step[M]:
            if shape is not None:
                runtime.shape = shape  # warm-ups must render what the framework sends (tools!)
            await _signal(runtime, self._synced(runtime, items), boundary=boundary)
            step: Step[M] = Step(None)
            if commit:
                outcome = await runtime.commit()
                if outcome.committed:
                    step = Step(outcome, self.mirror.adopt(outcome.messages))
                else:
                    step = Step(outcome, self.mirror.main_items() if self.mirror.diverged else None)
            return replace(step, state=runtime.save_state()) if save else step

        return run

    def _restore(
        self, core: AdapterCore, state: Mapping[str, Any], items: Sequence[M] | None
    ) -> Callable[[LookaheadRuntime], Awaitable[bool]]:
        async def run(runtime: LookaheadRuntime) -> bool:
            if core.restore(runtime, state):
                await _apply(runtime, self.mirror.restore(runtime.main.messages, items))
                return True
            if items is not None:
                await _signal(runtime, self._synced(runtime, items))
            return False

        return run

    def restore(
        self, core: AdapterCore, state: Mapping[str, Any], items: Sequence[M] | None = None
    ) -> bool:
        """Load a saved runtime state and mirror its history: rebuilt as framework items, or
        paired with the framework's own list `items` (what it holds beyond the saved history is
        appended). False when the state did not fit (logged; `items` then start the history)."""
        return self.hosted.call(self._restore(core, state, items))

    async def arestore(
        self, core: AdapterCore, state: Mapping[str, Any], items: Sequence[M] | None = None
    ) -> bool:
        return await self.hosted.acall(self._restore(core, state, items))

    def save_state(self) -> dict[str, Any]:
        """The runtime's saved state (`LookaheadRuntime.save_state`), after queued operations."""
        return self.hosted.call(_save)

    async def asave_state(self) -> dict[str, Any]:
        return await self.hosted.acall(_save)

    def _synced(self, runtime: LookaheadRuntime, items: Sequence[M]) -> SyncPlan:
        """The mirror synced to `items` and the runtime changed to match (no boundary yet); a
        change the runtime refuses (a token count failing, say) is undone in the mirror too,
        so the next sync offers those items again."""
        with self.mirror.undone_on_error():
            plan = self.mirror.plan(items)
            _change(runtime, plan)
        return plan

    def _extend(self, items: Sequence[M]) -> Callable[[LookaheadRuntime], Awaitable[None]]:
        async def run(runtime: LookaheadRuntime) -> None:
            with self.mirror.undone_on_error():
                runtime.append(*self.mirror.extend(items))
            await runtime.boundary()

        return run

    def step(
        self,
        items: Sequence[M],
        *,
        commit: bool = False,
        boundary: bool = True,
        shape: RequestShape | None = None,
        save: bool = False,
    ) -> Step[M]:
        """Sync the framework's list; signal a boundary if it grew; commit if asked; the saved
        state after it all if asked (one hop)."""
        return self.hosted.call(
            self._step(items, commit=commit, boundary=boundary, shape=shape, save=save)
        )

    async def astep(
        self,
        items: Sequence[M],
        *,
        commit: bool = False,
        boundary: bool = True,
        shape: RequestShape | None = None,
        save: bool = False,
    ) -> Step[M]:
        return await self.hosted.acall(
            self._step(items, commit=commit, boundary=boundary, shape=shape, save=save)
        )

    def submit_step(self, items: Sequence[M]) -> None:
        """`step` without waiting for it (a segment boundary: the framework goes on at once)."""
        self.hosted.submit(self._step(items, commit=False, boundary=True, shape=None))

    def submit_extend(self, items: Sequence[M]) -> None:
        """The framework is about to store `items` after what it holds (a tool output): a
        boundary, not waited for."""
        self.hosted.submit(self._extend(items))

    def main_items(self) -> list[M]:
        async def run(_: LookaheadRuntime) -> list[M]:
            return self.mirror.main_items()

        return self.hosted.call(run)

    async def amain_items(self) -> list[M]:
        async def run(_: LookaheadRuntime) -> list[M]:
            return self.mirror.main_items()

        return await self.hosted.acall(run)


def _change(runtime: LookaheadRuntime, plan: SyncPlan) -> None:
    if plan.replace is not None:
        runtime.main.replace(plan.replace)
    elif plan.append:
        runtime.append(*plan.append)


async def _apply(runtime: LookaheadRuntime, plan: SyncPlan, *, boundary: bool = True) -> None:
    _change(runtime, plan)
    await _signal(runtime, plan, boundary=boundary)


async def _signal(runtime: LookaheadRuntime, plan: SyncPlan, *, boundary: bool = True) -> None:
    """The boundary a change the runtime accepted makes."""
    if boundary and plan.changed:
        await runtime.boundary()


async def _save(runtime: LookaheadRuntime) -> dict[str, Any]:
    return runtime.save_state()

"""What every framework adapter shares: runtime settings, and a hosted runtime fed from the
framework's own message list through a `HistoryMirror`.

All mirror work runs on the runtime's thread, inside the same hop as the runtime call, so the
mirror and the runtime are only ever touched by that one thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from lookahead_sdk.adapters._mirror import HistoryMirror
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import RequestTags, current_tags
from lookahead_sdk.base.tokens import TokenCounter
from lookahead_sdk.client.warmers import RequestShape, Warmer
from lookahead_sdk.core.hosted import AdapterLoop, HostedRuntime
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import CompletionClient, ContextPolicy, Pipeline, resolve_policy
from lookahead_sdk.core.runtime import CommitOutcome, LookaheadRuntime, RuntimeMode
from lookahead_sdk.strategies.offload import Offload

M = TypeVar("M")


@dataclass(frozen=True)
class RuntimeSettings:
    """How an adapter builds the runtime of each program it serves (see LookaheadRuntime)."""

    policy: ContextPolicy
    mode: RuntimeMode = "lookahead"
    window_tokens: int = 8192
    token_counter: TokenCounter | None = None
    llm: CompletionClient | None = None  # for policies that call an LLM (Summarize)
    warmer: Warmer | None = None
    shape: RequestShape | None = None  # what the framework's requests carry besides messages
    offload_store: OffloadStore | None = None
    tags: RequestTags | None = None  # None: the caller's current program, else a fresh id

    @classmethod
    def resolve(cls, policy: ContextPolicy | None, owner: object, **fields: Any) -> RuntimeSettings:
        """Policy from the argument, an enclosing `@context_policy` function, or the owner's class."""
        resolved = resolve_policy(policy, owner)
        if resolved is None:
            raise ValueError(
                f"{type(owner).__name__} needs a context policy: pass policy=Summarize() (or any "
                "ContextPolicy), or decorate with @context_policy(...)"
            )
        if resolved.commit_mode != "replace":
            raise ValueError(
                f"{resolved.name} spawns a sub-agent context instead of rewriting this agent's "
                "history; framework adapters run history-rewriting policies (Offload, KeepRecent, "
                "Summarize and pipelines of them)"
            )
        return cls(resolved, **fields)

    def adapter_kwargs(self, *, keep_shape: bool = True) -> dict[str, Any]:
        """The adapter constructor's keywords that rebuild these settings (for a policy swap);
        `keep_shape=False` where the adapter derives the shape from the framework's model."""
        return {
            "mode": self.mode,
            "window_tokens": self.window_tokens,
            "token_counter": self.token_counter,
            "summarizer": self.llm,
            "warmer": self.warmer,
            "shape": self.shape if keep_shape else None,
            "offload_store": self.offload_store,
            "tags": self.tags,
        }

    def program_tags(self, label: str | None = None) -> RequestTags:
        """The tags of one program: the given or current ones (suffixed with `label` when one
        adapter serves several programs, e.g. LangGraph threads), else a fresh program id."""
        tags = self.tags or current_tags()
        if tags is None:
            return RequestTags(
                program_id=f"prog-{uuid.uuid4().hex[:12]}" + (f"/{label}" if label else "")
            )
        return replace(tags, program_id=f"{tags.program_id}/{label}") if label else tags

    def resources(self) -> tuple[object, ...]:
        """The clients the runtimes use, closed with the adapter's loop."""
        return tuple(r for r in (self.warmer, self.llm) if r is not None)

    def host(
        self, loop: AdapterLoop, tags: RequestTags, messages: Sequence[Message] = ()
    ) -> HostedRuntime:
        return loop.host(
            lambda: LookaheadRuntime(
                self.policy,
                mode=self.mode,
                messages=messages,
                window_tokens=self.window_tokens,
                token_counter=self.token_counter,
                llm=self.llm,
                warmer=self.warmer,
                shape=self.shape,
                tags=tags,
                offload_store=self.offload_store,
            )
        )


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
        self, items: Sequence[M], *, commit: bool, boundary: bool, shape: RequestShape | None
    ) -> Callable[[LookaheadRuntime], Awaitable[Step[M]]]:
        async def run(runtime: LookaheadRuntime) -> Step[M]:
            if shape is not None:
                runtime.shape = shape  # warm-ups must render what the framework sends (tools!)
            plan = self.mirror.plan(items)
            if plan.replace is not None:
                runtime.main.replace(plan.replace)
            elif plan.append:
                runtime.append(*plan.append)
            if boundary and plan.changed:
                await runtime.boundary()
            if not commit:
                return Step(None)
            outcome = await runtime.commit()
            if outcome.committed:
                return Step(outcome, self.mirror.adopt(outcome.messages))
            return Step(outcome, self.mirror.main_items() if self.mirror.diverged else None)

        return run

    def _extend(self, items: Sequence[M]) -> Callable[[LookaheadRuntime], Awaitable[None]]:
        async def run(runtime: LookaheadRuntime) -> None:
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
    ) -> Step[M]:
        """Sync the framework's list; signal a boundary if it grew; commit if asked."""
        return self.hosted.call(self._step(items, commit=commit, boundary=boundary, shape=shape))

    async def astep(
        self,
        items: Sequence[M],
        *,
        commit: bool = False,
        boundary: bool = True,
        shape: RequestShape | None = None,
    ) -> Step[M]:
        return await self.hosted.acall(
            self._step(items, commit=commit, boundary=boundary, shape=shape)
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

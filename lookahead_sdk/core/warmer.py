"""The warmer interface: what the runtime asks of whatever pre-materializes KV on a server.

`Warmer` declares every hook the runtime calls; each is a documented no-op except `warm`, so a
warmer implements only what its server can do, and the runtime calls methods, never probes for
them. `DelegatingWarmer` forwards every hook to a wrapped warmer: subclass it to change one
(e.g. render messages differently before a warm-up) without silently dropping the others.
Concrete warmers for OpenAI-compatible, llama.cpp and SGLang servers are in
`lookahead_sdk.client.warmers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lookahead_sdk.base.messages import Message


@dataclass(frozen=True)
class RequestShape:
    """Everything besides messages that changes how a chat request renders (tools do)."""

    model: str = "default"
    tools: tuple[dict[str, Any], ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def chat_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"model": self.model, **self.extra}
        if self.tools:
            fields["tools"] = list(self.tools)
        return fields


@dataclass(frozen=True)
class WarmupResult:
    prompt_tokens: int  # of the prompt the server now holds (all of it, unless stopped early)
    cached_tokens: int
    seconds: float
    # False when the warm-up stopped before the end of its prompt (a commit asked it to): the
    # server holds only `prompt_tokens` of it.
    complete: bool = True

    @property
    def prefilled_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.cached_tokens)


@dataclass
class WarmupSpend:
    """Prompt tokens a warm-up has made the engine prefill so far, kept up to date chunk by chunk,
    so a warm-up cancelled midway (a commit came first) is still counted: its chunks were
    computed, the last one even if cancelled."""

    prefilled_tokens: int = 0


class Warmer:
    """Pre-materializes a transformed prefix on the server; every hook but `warm` is optional.

    The runtime calls, per program it serves: `attach` once; `model_call_next` at each boundary
    after which the model is called; around each lookahead `live_prefix`
    then `warm` (several times as the suffix grows), `fork_live` while the model's tools run
    (when the policy's next lookahead keeps the live context, or `wants_live_copy`), `promote`
    / `finish_warm_up` when a commit starts waiting for it, `lookahead_ended` when its work is
    over, `committed` after a hit, `committed_synchronously` after a synchronous transform;
    `hand_over` when a sub-agent starts from a spawned context; `detach` when the runtime (or
    sub-agent) ends. `aclose` closes the warmer's clients.
    """

    # True when `fork_live` can copy the live context on the server (the runtime only then
    # schedules the copy).
    copies_live_context: ClassVar[bool] = False

    @property
    def waits_for_slack(self) -> bool:
        """True when the warmer itself holds each chunk until the engine has slack (a client-side
        `SlackGate`, for an engine without priorities): a warm-up started beside a model call
        then waits for that call by itself. False (a server that admits best-effort work, or
        none): the runtime holds a ready result's warm-up out of the moment a call goes out."""
        return False

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        """Prefill `messages`. With `open_last`, stop right after the last message's content, so
        a longer version of that message still hits the cache (progressive prefill). Count what
        the engine computed in `spend` as it goes (a cancelled warm-up is still accounted)."""
        raise NotImplementedError(f"{type(self).__name__} must implement warm()")

    async def promote(self, group_id: str) -> None:
        """A commit waits for the lookahead group `group_id`: raise its in-flight work to
        latency-critical where the server supports it."""

    def lookahead_ended(self, group_id: str) -> None:
        """The lookahead group's work is over (committed, superseded or dropped)."""

    def attach(self, program_id: str) -> None:
        """A runtime starts using this warmer for `program_id` (e.g. reserve server slots)."""

    def model_call_next(self, program_id: str) -> None:
        """`program_id`'s model call comes next (its tools returned): a gated warmer holds
        best-effort work back until that request is sent (`ForegroundRegistry.expect`)."""

    def live_prefix(self, program_id: str, share: float, shared_messages: int = 0) -> None:
        """Before a warm-up: `share` (0..1, in tokens) of it, its first `shared_messages`
        messages, is the program's live context unchanged (the warm-up may start from a copy)."""

    async def fork_live(
        self, program_id: str, messages: Sequence[Message], *, shape: RequestShape
    ) -> bool:
        """The program's model turn just ended and the server holds exactly `messages` for it:
        copy that KV to where its next lookahead is warmed. True when something was copied.
        Called only when `copies_live_context` is set."""
        return False

    def wants_live_copy(self, program_id: str) -> bool:
        """True when a copy of the live context (`fork_live`) while the model's tools run pays
        by itself, whatever the policy's next lookahead keeps (llama.cpp: it brings a live
        context that a commit moved back to its home slot). Asked only when
        `copies_live_context` is set and no lookahead work is under way."""
        return False

    def finish_warm_up(self, program_id: str) -> bool:
        """A commit of `program_id` waits for its warm-up in flight: send no further chunk.
        True when the warm-up will return after its chunk in flight (worth waiting for a
        moment); False to have it cancelled at once."""
        return False

    def committed(
        self, program_id: str, *, replaced: bool, live_prefix_share: float | None = None
    ) -> None:
        """A lookahead of `program_id` was committed. `replaced`: the committed context replaces
        the live one; `live_prefix_share`: the share of it the live context already held."""

    def committed_synchronously(self, program_id: str, *, replaced: bool) -> None:
        """A commit of `program_id` ran its transform on the critical path (no lookahead, or a
        missing, failed or stale one). `replaced`: its result replaces the live context."""

    async def hand_over(
        self,
        program_id: str,
        child_id: str,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
    ) -> None:
        """A sub-agent `child_id` starts from `messages`, a context spawned (and warmed) for
        `program_id`; its first request follows once this returns (make it find its context
        cached where that is cheap)."""

    def detach(self, program_id: str) -> None:
        """The runtime (or sub-agent) of `program_id` ended: release what it held."""

    async def aclose(self) -> None:
        """Close the warmer's clients."""


class DelegatingWarmer(Warmer):
    """Forwards every hook to `inner`. Subclasses override what they change."""

    def __init__(self, inner: Warmer) -> None:
        if not isinstance(inner, Warmer):
            raise TypeError(
                f"inner must be a lookahead_sdk Warmer (subclass lookahead_sdk.Warmer), got "
                f"{type(inner).__name__}"
            )
        self.inner = inner

    @property
    def copies_live_context(self) -> bool:  # type: ignore[override]
        return self.inner.copies_live_context

    @property
    def waits_for_slack(self) -> bool:
        return self.inner.waits_for_slack

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        return await self.inner.warm(messages, shape=shape, open_last=open_last, spend=spend)

    async def promote(self, group_id: str) -> None:
        await self.inner.promote(group_id)

    def lookahead_ended(self, group_id: str) -> None:
        self.inner.lookahead_ended(group_id)

    def attach(self, program_id: str) -> None:
        self.inner.attach(program_id)

    def model_call_next(self, program_id: str) -> None:
        self.inner.model_call_next(program_id)

    def live_prefix(self, program_id: str, share: float, shared_messages: int = 0) -> None:
        self.inner.live_prefix(program_id, share, shared_messages)

    async def fork_live(
        self, program_id: str, messages: Sequence[Message], *, shape: RequestShape
    ) -> bool:
        return await self.inner.fork_live(program_id, messages, shape=shape)

    def wants_live_copy(self, program_id: str) -> bool:
        return self.inner.wants_live_copy(program_id)

    def finish_warm_up(self, program_id: str) -> bool:
        return self.inner.finish_warm_up(program_id)

    def committed(
        self, program_id: str, *, replaced: bool, live_prefix_share: float | None = None
    ) -> None:
        self.inner.committed(program_id, replaced=replaced, live_prefix_share=live_prefix_share)

    def committed_synchronously(self, program_id: str, *, replaced: bool) -> None:
        self.inner.committed_synchronously(program_id, replaced=replaced)

    async def hand_over(
        self,
        program_id: str,
        child_id: str,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
    ) -> None:
        await self.inner.hand_over(program_id, child_id, messages, shape=shape)

    def detach(self, program_id: str) -> None:
        self.inner.detach(program_id)

    async def aclose(self) -> None:
        await self.inner.aclose()

"""Context policies: the four hooks the lookahead runtime drives, and their composition."""

from __future__ import annotations

import contextvars
import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

from lookahead_sdk.base.completion import CompletionClient
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import current_tags, use_tags
from lookahead_sdk.base.tokens import TokenCounter, count_message
from lookahead_sdk.errors import ConfigurationError

if TYPE_CHECKING:
    from lookahead_sdk.core.offload_store import OffloadStore
    from lookahead_sdk.core.state import LookaheadState, MainState, PartialOutput

# The papers' thresholds are stated for a 32K-token model; strategies express them as fractions
# of this window so they scale to an 8K or a 128K model alike.
PAPER_WINDOW_TOKENS = 32 * 1024

Budget = int | float


def resolve_budget(value: Budget, window_tokens: int, field_name: str) -> int:
    """An int is tokens; a float in (0, 1] is a fraction of the model's context window."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{field_name} must be an int (tokens) or a float fraction of the window, got {value!r}"
        )
    if isinstance(value, float):
        if not 0.0 < value <= 1.0:
            raise ValueError(
                f"{field_name} as a fraction of the window must be in (0, 1], got {value}"
            )
        return int(value * window_tokens)
    if value < 0:
        raise ValueError(f"{field_name} must be >= 0 tokens, got {value}")
    return value


def check_budget(value: Budget, field_name: str) -> None:
    resolve_budget(value, PAPER_WINDOW_TOKENS, field_name)


@dataclass
class TransformUsage:
    llm_calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    @property
    def uncached_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass
class TransformContext:
    token_counter: TokenCounter
    window_tokens: int
    is_lookahead: bool
    summarizer: CompletionClient | None = None
    offload_store: OffloadStore | None = None
    partial_output: PartialOutput | None = None
    # For a lookahead: tokens expected to arrive between its snapshot and the commit. A transform
    # that keeps "the most recent N tokens" keeps N minus this, so result + suffix stays ~N.
    expected_growth_tokens: int = 0
    usage: TransformUsage = field(default_factory=TransformUsage)

    def count(self, message: Message) -> int:
        return count_message(self.token_counter, message)

    def budget(self, value: Budget, field_name: str) -> int:
        return resolve_budget(value, self.window_tokens, field_name)

    async def complete(
        self, messages: Sequence[Message], *, max_tokens: int, temperature: float = 0.0
    ) -> str:
        if self.summarizer is None:
            raise ConfigurationError(
                "this policy calls an LLM but the runtime has no summarizer: pass "
                "summarizer=OpenAICompletionClient(AsyncOpenAI(...), model) (or "
                "Endpoint.chat_client()) in its RuntimeConfig"
            )
        tags = current_tags()
        # A lookahead's LLM request starts with the live context (e.g. a summary request):
        # placed where that context is cached, it computes only its new tail.
        with use_tags(tags.extending_live_context() if self.is_lookahead and tags else tags):
            completion = await self.summarizer.complete(
                messages, max_tokens=max_tokens, temperature=temperature
            )
        self.usage.llm_calls += 1
        self.usage.prompt_tokens += completion.prompt_tokens
        self.usage.cached_tokens += completion.cached_tokens
        self.usage.completion_tokens += completion.completion_tokens
        return completion.text


@dataclass(frozen=True)
class TransformResult:
    messages: list[Message]
    data: dict[str, Any] = field(default_factory=dict)


CommitMode = Literal["replace", "spawn"]


class ContextPolicy(ABC):
    """A context transform plus the hooks deciding when the runtime runs and commits it.

    `commit_mode` "replace" swaps the main history for the committed context; "spawn" leaves the
    main history alone and hands the committed context to a new agent (sub-agent isolation).
    """

    name: ClassVar[str] = "policy"
    commit_mode: ClassVar[CommitMode] = "replace"

    def validate(self, window_tokens: int) -> None:
        """Raise ValueError naming the field when the settings cannot work for this window."""
        return None

    @property
    def needs_summarizer(self) -> bool:
        """The transform calls an LLM (`TransformContext.complete`), so the runtime needs a
        summarizer (framework adapters check it when they are built)."""
        return False

    def kept_from(self, messages: Sequence[Message], ctx: TransformContext) -> int | None:
        """For a transform that keeps "the most recent N tokens" (less `ctx.
        expected_growth_tokens`) verbatim: the index where that kept suffix begins, computed
        without running the transform. The runtime compares it with where a synchronous commit
        would begin, redoes a ready result that kept more than a turn more or less (or kept none
        of the history it saw and would commit more), and resizes one that is still more than a
        turn off at the commit, so lookahead commits are the size synchronous ones are. None
        (the default): the result does not depend on growth."""
        return None

    def should_lookahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        return False

    def rewrites_suffix(self, assembled: MainState) -> bool:
        """Asked at a hit, of the result joined with the messages that arrived since its
        snapshot: True when the synchronous transform of that context would still rewrite some
        of those messages (Offload: a large output that is no longer the newest). The runtime
        then transforms the assembled context once more; the result's part is already
        transformed and stays as it is, so the commit is the one a synchronous run makes.
        False (the default): the suffix is committed as it arrived."""
        return False

    @abstractmethod
    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult: ...

    @abstractmethod
    def should_commit(self, main: MainState, lookahead: LookaheadState) -> bool: ...

    def should_commit_ahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        """Asked when the model's turn has ended and its tools are about to run: True commits at
        the next model call even if their outputs leave the history below the limit, because
        they could take it over. The decision precedes the outputs, so the commit turn carries
        an ordinary one, and the commit's own tail is warmed while the tools run."""
        return False

    def keeps_live_prefix(self, main: MainState, lookahead: LookaheadState) -> bool:
        """Asked when the model's turn has ended and its tools are about to run: True when the
        next lookahead this policy starts would keep the whole history so far as its prefix
        (it rewrites only what arrives next, as Offload does). The runtime then has a warmer
        that can copy KV (llama.cpp slot save / restore) copy the live context, which the
        engine holds exactly now, into the lookahead's branch while the tools run, so that
        lookahead prefills only its rewrite and never waits for the live slot to be free."""
        return False

    @property
    def decides_commit_ahead(self) -> bool:
        """`should_commit_ahead` can hold: a commit may be decided as a model turn ends, so that
        turn's tool outputs still arrive before it (growth the runtime expects)."""
        return False

    def should_promote(self, main: MainState, lookahead: LookaheadState) -> bool:
        """At commit time with the lookahead still running: True waits for it at LC priority,
        False abandons it for the synchronous transform."""
        return True

    def tokens_until_commit(self, main: MainState) -> int | None:
        """How far the history is from the commit trigger, if the policy knows (for deadlines)."""
        return None

    def commit_ahead_reserve(self, main: MainState) -> int:
        """How far below the limit `tokens_until_commit` measures, for a commit decided as a
        model turn ends (`should_commit_ahead`): a commit at the limit itself is that much
        further off. 0 (the default): no commit is decided ahead."""
        return 0

    def assemble(self, result: TransformResult, suffix: Sequence[Message]) -> list[Message]:
        """The committed context from a lookahead result and the messages that arrived since
        (what its warm-ups prefill)."""
        return [*result.messages, *suffix]

    def finish_hit(
        self, assembled: list[Message], result: TransformResult, suffix: Sequence[Message]
    ) -> list[Message]:
        """What a hit commits, from `assemble`'s context: a policy whose lookahead counted on
        messages that did not come by the commit may undo that here (Offload puts back a
        newest output it offloaded when no newer one arrived)."""
        return assembled

    def __or__(self, other: ContextPolicy) -> Pipeline:
        return Pipeline(self, other)


class Pipeline(ContextPolicy):
    """Policies applied in order (e.g. Offload() | Summarize()): any stage's trigger fires the
    whole pipeline; its transform feeds each stage's output to the next."""

    name = "pipeline"

    def __init__(self, *stages: ContextPolicy) -> None:
        flat: list[ContextPolicy] = []
        for stage in stages:
            if not isinstance(stage, ContextPolicy):
                raise TypeError(
                    f"Pipeline stages must be ContextPolicy instances, got {type(stage).__name__}"
                )
            flat.extend(stage.stages if isinstance(stage, Pipeline) else (stage,))
        if not flat:
            raise ValueError("Pipeline needs at least one stage")
        if any(stage.commit_mode != "replace" for stage in flat):
            raise ValueError(
                "a spawning policy (Isolate) cannot be composed in a Pipeline, not even alone (a "
                "pipeline replaces the history it commits): pass it on its own runtime as it is"
            )
        self.stages = tuple(flat)
        self.name = "+".join(stage.name for stage in flat)

    def validate(self, window_tokens: int) -> None:
        for stage in self.stages:
            stage.validate(window_tokens)

    @property
    def needs_summarizer(self) -> bool:
        return any(stage.needs_summarizer for stage in self.stages)

    def kept_from(self, messages: Sequence[Message], ctx: TransformContext) -> int | None:
        # Known only when the first stage is the one keeping a recent suffix: a later stage
        # sees messages an earlier one rewrote.
        return self.stages[0].kept_from(messages, ctx)

    def should_lookahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        return any(stage.should_lookahead(main, lookahead) for stage in self.stages)

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        current = list(messages)
        data: dict[str, Any] = {}
        for stage in self.stages:
            result = await stage.transform(current, ctx)
            current = result.messages
            data[stage.name] = result.data
        return TransformResult(current, data)

    def should_commit(self, main: MainState, lookahead: LookaheadState) -> bool:
        return any(stage.should_commit(main, lookahead) for stage in self.stages)

    def should_commit_ahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        return any(stage.should_commit_ahead(main, lookahead) for stage in self.stages)

    def keeps_live_prefix(self, main: MainState, lookahead: LookaheadState) -> bool:
        return all(stage.keeps_live_prefix(main, lookahead) for stage in self.stages)

    def finish_hit(
        self, assembled: list[Message], result: TransformResult, suffix: Sequence[Message]
    ) -> list[Message]:
        # Each stage with its own data (`transform` files it under the stage's name).
        for stage in self.stages:
            stage_result = TransformResult(result.messages, result.data.get(stage.name, {}))
            assembled = stage.finish_hit(assembled, stage_result, suffix)
        return assembled

    def rewrites_suffix(self, assembled: MainState) -> bool:
        # Transforming the assembled context again runs every stage: a later stage would
        # summarize or trim a second time, so only a one-stage pipeline asks its stage.
        return len(self.stages) == 1 and self.stages[0].rewrites_suffix(assembled)

    @property
    def decides_commit_ahead(self) -> bool:
        return any(stage.decides_commit_ahead for stage in self.stages)

    def should_promote(self, main: MainState, lookahead: LookaheadState) -> bool:
        return all(stage.should_promote(main, lookahead) for stage in self.stages)

    def tokens_until_commit(self, main: MainState) -> int | None:
        distances = [
            d for stage in self.stages if (d := stage.tokens_until_commit(main)) is not None
        ]
        return min(distances, default=None)

    def commit_ahead_reserve(self, main: MainState) -> int:
        return max(stage.commit_ahead_reserve(main) for stage in self.stages)

    def __repr__(self) -> str:
        return f"Pipeline({', '.join(map(repr, self.stages))})"


# -- swapping the policy of an agent in one line ---------------------------------------------

_active_policy: contextvars.ContextVar[ContextPolicy | None] = contextvars.ContextVar(
    "lookahead_sdk_active_policy", default=None
)


def active_policy() -> ContextPolicy | None:
    """The policy set by an enclosing `@context_policy(...)`-decorated function, if any."""
    return _active_policy.get()


@runtime_checkable
class PolicySwappable(Protocol):
    """Agents and framework adapters that accept `@context_policy`: the object using `policy`
    (a copy for the reference agent; framework adapters swap in place, so an adapter an agent
    already holds takes the new policy, and refuse once they serve)."""

    def with_context_policy(self, policy: ContextPolicy) -> Any: ...


T = TypeVar("T")

# Finds the lookahead adapters inside a framework's agent object (a LangGraph graph from
# `create_agent`, an AutoGen `AssistantAgent`, a LlamaIndex `FunctionAgent`): None when the object
# is not that framework's agent, else the adapters found (maybe none). Each adapter module
# registers its locator when imported: an agent holding one of its adapters was built with it.
AdapterLocator = Callable[[object], Sequence[PolicySwappable] | None]
_locators: list[AdapterLocator] = []


def register_adapter_locator(locator: AdapterLocator) -> None:
    if locator not in _locators:
        _locators.append(locator)


WHAT_TO_DECORATE = (
    "an agent function (sync, async, or a generator), a class that reads "
    "default_context_policy (ReferenceAgent, LookaheadRuntime, the Lookahead adapters), a "
    "Lookahead adapter (LookaheadMiddleware, LookaheadLLM, LookaheadChatCompletionContext), or a "
    "framework agent holding one (create_agent's graph, FunctionAgent, AssistantAgent)"
)


def context_policy(policy: ContextPolicy) -> Callable[[T], T]:
    """Swap the context policy of an agent in one line.

    @context_policy(Summarize())          # on an agent function: runtimes created inside use it
    async def run(task): ...              # (generators too: set while their body runs)

    agent = context_policy(Offload())(agent)   # on an adapter, or a framework agent holding one

    @context_policy(KeepRecent())         # on a class: its instances default to this policy
    class MyAgent(ReferenceAgent): ...

    Anything else raises TypeError saying what to decorate: a policy is never silently ignored.
    """
    if not isinstance(policy, ContextPolicy):
        raise TypeError(
            f"context_policy() takes a ContextPolicy such as Summarize() or Offload() | Summarize(), "
            f"got {type(policy).__name__}"
        )

    def apply(target: T) -> T:
        if isinstance(target, type):
            if not hasattr(target, "default_context_policy"):
                raise TypeError(
                    f"@context_policy on class {target.__name__}: nothing in it reads a default "
                    f"policy. Decorate {WHAT_TO_DECORATE}"
                )
            target.default_context_policy = policy  # type: ignore[attr-defined]
            return target
        if isinstance(target, PolicySwappable):
            return target.with_context_policy(policy)
        for locate in _locators:
            adapters = locate(target)
            if adapters is None:
                continue
            if not adapters:
                raise TypeError(
                    f"@context_policy on a {type(target).__name__}: it holds no lookahead adapter. "
                    "Build the agent with one (e.g. middleware=[LookaheadMiddleware(...)], "
                    "llm=LookaheadLLM(...), model_context=LookaheadChatCompletionContext(...)) "
                    "and decorate that, or the agent"
                )
            for adapter in adapters:
                adapter.with_context_policy(policy)
            return target
        if inspect.isasyncgenfunction(target):
            return _wrap_async_generator(target, policy)  # type: ignore[return-value]
        if inspect.isgeneratorfunction(target):
            return _wrap_generator(target, policy)  # type: ignore[return-value]
        if inspect.iscoroutinefunction(target):

            @functools.wraps(target)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                token = _active_policy.set(policy)
                try:
                    return await target(*args, **kwargs)
                finally:
                    _active_policy.reset(token)

            return async_wrapper  # type: ignore[return-value]
        if (
            inspect.isfunction(target)
            or inspect.ismethod(target)
            or isinstance(target, functools.partial)
        ):

            @functools.wraps(target)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                token = _active_policy.set(policy)
                try:
                    return target(*args, **kwargs)
                finally:
                    _active_policy.reset(token)

            return sync_wrapper  # type: ignore[return-value]
        raise TypeError(
            f"@context_policy cannot apply to a {type(target).__name__}. Decorate {WHAT_TO_DECORATE}"
        )

    return apply


def _wrap_generator(
    target: Callable[..., Generator[Any, Any, Any]], policy: ContextPolicy
) -> Callable[..., Generator[Any, Any, Any]]:
    """The policy is set around each step of the body (not across the caller's code between
    steps, which may run in another context)."""

    @functools.wraps(target)
    def wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        inner = target(*args, **kwargs)
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            token = _active_policy.set(policy)
            try:
                item = inner.throw(thrown) if thrown is not None else inner.send(sent)
            except StopIteration as stop:
                return stop.value
            finally:
                _active_policy.reset(token)
            sent, thrown = None, None
            try:
                sent = yield item
            except GeneratorExit:
                token = _active_policy.set(policy)
                try:
                    inner.close()
                finally:
                    _active_policy.reset(token)
                raise
            except BaseException as error:
                thrown = error

    return wrapper


def _wrap_async_generator(
    target: Callable[..., AsyncGenerator[Any, Any]], policy: ContextPolicy
) -> Callable[..., AsyncGenerator[Any, Any]]:
    @functools.wraps(target)
    async def wrapper(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
        inner = target(*args, **kwargs)
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            token = _active_policy.set(policy)
            try:
                item = await (inner.athrow(thrown) if thrown is not None else inner.asend(sent))
            except StopAsyncIteration:
                return
            finally:
                _active_policy.reset(token)
            sent, thrown = None, None
            try:
                sent = yield item
            except GeneratorExit:
                token = _active_policy.set(policy)
                try:
                    await inner.aclose()
                finally:
                    _active_policy.reset(token)
                raise
            except BaseException as error:
                thrown = error

    return wrapper


def resolve_policy(explicit: ContextPolicy | None, owner: object = None) -> ContextPolicy | None:
    """Explicit argument, else an enclosing decorated function's, else the owner class default."""
    if explicit is not None:
        if not isinstance(explicit, ContextPolicy):
            raise ConfigurationError(
                f"policy must be a ContextPolicy such as Summarize(), Offload() | Summarize(), "
                f"got {explicit!r}"
            )
        return explicit
    return active_policy() or getattr(owner, "default_context_policy", None)

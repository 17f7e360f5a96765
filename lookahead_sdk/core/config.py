"""`RuntimeConfig`: how a lookahead runtime runs, in one place.

The runtime, the reference agent and every framework adapter take `config=RuntimeConfig(...)`
plus keyword overrides of its fields, so a setting has one name and one check everywhere:

    config = RuntimeConfig(window_tokens=32768, summarizer=client, warmer=warmer)
    LookaheadRuntime(Summarize(), config)
    LookaheadMiddleware(Summarize(), config, mode="sync")      # an override
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, get_args

from lookahead_sdk.base.checks import require_flag, require_int, require_number
from lookahead_sdk.base.completion import CompletionClient
from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.base.tokens import TokenCounter
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.warmer import RequestShape, Warmer
from lookahead_sdk.errors import ConfigurationError

RuntimeMode = Literal["lookahead", "sync"]
DEFAULT_WINDOW_TOKENS = 8192
RUNTIME_MODES: tuple[str, ...] = get_args(RuntimeMode)


@dataclass(frozen=True)
class RuntimeConfig:
    """Everything about a runtime except its policy (which `@context_policy` swaps).

    - `mode`: "lookahead" runs transforms ahead of time; "sync" only at the limit (the baseline).
    - `window_tokens`: the model's context window; strategies scale their thresholds to it.
      None: not given. Framework adapters then read it off the model or its server and raise
      ConfigurationError when neither says; `LookaheadRuntime` used directly assumes
      DEFAULT_WINDOW_TOKENS (8192) and logs a warning.
    - `token_counter`: counts tokens as the model does (default: the best local tokenizer).
    - `summarizer`: the completion client a policy calls (Summarize's summaries).
    - `warmer`: pre-materializes lookahead results on the server (`lookahead_sdk.Warmer`).
    - `shape`: what requests carry besides messages (model name, tools), for warm-ups.
    - `offload_store`: where Offload writes large tool outputs.
    - `tags`: the program's request tags (default: the caller's `program(...)`, else a fresh id).
    - `warm_suffix`: also warm the messages that arrive after a lookahead's snapshot.
    - `transform_timeout_s`: a lookahead transform taking longer fails (the commit falls back).
    - `sync_transform_timeout_s`: a synchronous transform taking longer fails the commit, which
      leaves the history as it was (no fallback is left; the agent sees the error).
    - `commit_wait_timeout_s`: how long a commit waits for a promoted lookahead.
    - `warmup_wait_timeout_s`: how long a commit waits for a warm-up's chunk in flight.
    - `model_call_limit`: the most model calls the program makes in all: the step limit of an
      agent run once per task (LangChain `ModelCallLimitMiddleware(run_limit=N)`, LlamaIndex
      `run(..., max_iterations=N)` (N + 1 with `early_stopping_method="generate"`), AutoGen
      `AssistantAgent(max_tool_iterations=N)` (N + 1 with `reflect_on_tool_use`)). The runtime
      counts its commits (one before each model call; carried by `save_state`) and keeps
      `LookaheadRuntime.model_calls_left` at the limit less that count, so no lookahead starts
      that the run would end before committing. None (the default): no end known, as for an
      agent that takes further tasks on the same history (a lookahead started late in one task
      is committed in the next).
    """

    mode: RuntimeMode = "lookahead"
    window_tokens: int | None = None
    token_counter: TokenCounter | None = None
    summarizer: CompletionClient | None = None
    warmer: Warmer | None = None
    shape: RequestShape | None = None
    offload_store: OffloadStore | None = None
    tags: RequestTags | None = None
    warm_suffix: bool = True
    transform_timeout_s: float | None = 300.0
    sync_transform_timeout_s: float | None = 300.0
    commit_wait_timeout_s: float | None = 300.0
    warmup_wait_timeout_s: float | None = 2.0
    model_call_limit: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in RUNTIME_MODES:
            raise ConfigurationError(f"mode must be 'lookahead' or 'sync', got {self.mode!r}")
        require_int(
            "window_tokens",
            self.window_tokens,
            low=1,
            optional=True,
            meaning="the model's context size",
            error=ConfigurationError,
        )
        if self.token_counter is not None and not callable(
            getattr(self.token_counter, "count_text", None)
        ):
            raise ConfigurationError(
                "token_counter must have count_text(text) -> int (e.g. "
                f"lookahead_sdk.base.tokens.auto_token_counter()), got {_name(self.token_counter)}"
            )
        if self.summarizer is not None and not inspect.iscoroutinefunction(
            getattr(self.summarizer, "complete", None)
        ):
            raise ConfigurationError(
                "summarizer must be a CompletionClient (async complete(messages, *, max_tokens, "
                "temperature)), e.g. OpenAICompletionClient(AsyncOpenAI(...), model) or "
                f"Endpoint.chat_client(); got {_name(self.summarizer)}. Framework adapters also take "
                "the framework's own model object"
            )
        _check_type(self.warmer, Warmer, "warmer", "subclass lookahead_sdk.Warmer")
        _check_type(self.shape, RequestShape, "shape", "use lookahead_sdk.RequestShape")
        _check_type(self.offload_store, OffloadStore, "offload_store", "use OffloadStore(dir)")
        _check_type(self.tags, RequestTags, "tags", "use RequestTags(program_id=...)")
        if self.tags is not None and self.tags.program_id is None:
            raise ConfigurationError("tags.program_id is required: one id per agent program")
        require_int(
            "model_call_limit",
            self.model_call_limit,
            low=1,
            optional=True,
            meaning="the most model calls the program makes: a one-task agent's step limit",
            fix="None means no end is known",
            error=ConfigurationError,
        )
        require_flag("warm_suffix", self.warm_suffix, error=ConfigurationError)
        for name in (
            "transform_timeout_s",
            "sync_transform_timeout_s",
            "commit_wait_timeout_s",
            "warmup_wait_timeout_s",
        ):
            require_number(
                name,
                getattr(self, name),
                low_open=name != "warmup_wait_timeout_s",  # 0 there: never wait for a chunk
                optional=True,
                meaning="seconds",
                fix="None means no limit",
                error=ConfigurationError,
            )

    def with_overrides(self, **overrides: Any) -> RuntimeConfig:
        """This config with some fields replaced (validated; an unknown name is an error)."""
        unknown = sorted(set(overrides) - FIELD_NAMES)
        if unknown:
            raise ConfigurationError(
                f"unknown runtime setting(s) {', '.join(unknown)}; RuntimeConfig fields are "
                f"{', '.join(sorted(FIELD_NAMES))}"
            )
        return replace(self, **overrides) if overrides else self

    @classmethod
    def build(cls, config: RuntimeConfig | None = None, **overrides: Any) -> RuntimeConfig:
        """`config` (or the defaults) with `overrides` applied."""
        if config is not None and not isinstance(config, RuntimeConfig):
            raise ConfigurationError(
                f"config must be a RuntimeConfig, got {_name(config)}; pass settings as "
                "RuntimeConfig(...) or as keyword arguments"
            )
        return (config or cls()).with_overrides(**overrides)


FIELD_NAMES = frozenset(field.name for field in fields(RuntimeConfig))


def _check_type(value: object, expected: type, name: str, fix: str) -> None:
    if value is not None and not isinstance(value, expected):
        raise ConfigurationError(
            f"{name} must be a {expected.__name__} ({fix}), got {_name(value)}"
        )


def _name(value: object) -> str:
    return repr(value) if isinstance(value, str | int | float) else type(value).__name__

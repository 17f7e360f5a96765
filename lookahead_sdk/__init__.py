"""lookahead-sdk: lookahead context engineering and program-aware serving for LLM agents.

The public API is importable from here; each name is loaded on first use, so `import
lookahead_sdk` (and the `lookahead-sdk` command) stays fast and needs no optional dependency.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lookahead_sdk._version import __version__

_EXPORTS: dict[str, str] = {
    # base: messages, the wire protocol, tags, completion clients
    "Message": "lookahead_sdk.base.messages",
    "Tool": "lookahead_sdk.base.tools",
    "ToolRegistry": "lookahead_sdk.base.tools",
    "RequestTags": "lookahead_sdk.base.protocol",
    "current_tags": "lookahead_sdk.base.tags",
    "program": "lookahead_sdk.base.tags",
    "use_tags": "lookahead_sdk.base.tags",
    "Completion": "lookahead_sdk.base.completion",
    "CompletionClient": "lookahead_sdk.base.completion",
    "OpenAICompletionClient": "lookahead_sdk.base.completion",
    # core: state, policy, runtime
    "MainState": "lookahead_sdk.core.state",
    "LookaheadState": "lookahead_sdk.core.state",
    "LookaheadStatus": "lookahead_sdk.core.state",
    "PartialOutput": "lookahead_sdk.core.state",
    "ContextPolicy": "lookahead_sdk.core.policy",
    "Pipeline": "lookahead_sdk.core.policy",
    "TransformContext": "lookahead_sdk.core.policy",
    "TransformResult": "lookahead_sdk.core.policy",
    "context_policy": "lookahead_sdk.core.policy",
    "RuntimeConfig": "lookahead_sdk.core.config",
    "RuntimeMode": "lookahead_sdk.core.config",
    "LookaheadRuntime": "lookahead_sdk.core.runtime",
    "CommitKind": "lookahead_sdk.core.runtime",
    "CommitOutcome": "lookahead_sdk.core.runtime",
    "RuntimeStats": "lookahead_sdk.core.runtime",
    "SyncLookaheadRuntime": "lookahead_sdk.core.sync_runtime",
    "OffloadStore": "lookahead_sdk.core.offload_store",
    "Warmer": "lookahead_sdk.core.warmer",
    "DelegatingWarmer": "lookahead_sdk.core.warmer",
    "RequestShape": "lookahead_sdk.core.warmer",
    "WarmupResult": "lookahead_sdk.core.warmer",
    "WarmupSpend": "lookahead_sdk.core.warmer",
    # client: transports, server sessions, slack gate, warmers, endpoint
    "TaggingTransport": "lookahead_sdk.client.transport",
    "AsyncTaggingTransport": "lookahead_sdk.client.transport",
    "tagged_http_client": "lookahead_sdk.client.transport",
    "tagged_async_http_client": "lookahead_sdk.client.transport",
    "ServerSession": "lookahead_sdk.client.session",
    "SlackGate": "lookahead_sdk.client.slack",
    "OpenAIWarmer": "lookahead_sdk.client.warmers",
    "LlamaCppWarmer": "lookahead_sdk.client.warmers",
    "SGLangWarmer": "lookahead_sdk.client.warmers",
    "make_warmer": "lookahead_sdk.client.warmers",
    "Endpoint": "lookahead_sdk.client.endpoint",
    # agent: the reference agent loop
    "ReferenceAgent": "lookahead_sdk.agent.loop",
    # errors
    "LookaheadError": "lookahead_sdk.errors",
    "ConfigurationError": "lookahead_sdk.errors",
    "InvalidInputError": "lookahead_sdk.errors",
    "StateError": "lookahead_sdk.errors",
    "EngineError": "lookahead_sdk.errors",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lookahead_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from lookahead_sdk.agent.loop import ReferenceAgent
    from lookahead_sdk.base.completion import Completion, CompletionClient, OpenAICompletionClient
    from lookahead_sdk.base.messages import Message
    from lookahead_sdk.base.protocol import RequestTags
    from lookahead_sdk.base.tags import current_tags, program, use_tags
    from lookahead_sdk.base.tools import Tool, ToolRegistry
    from lookahead_sdk.client.endpoint import Endpoint
    from lookahead_sdk.client.session import ServerSession
    from lookahead_sdk.client.slack import SlackGate
    from lookahead_sdk.client.transport import (
        AsyncTaggingTransport,
        TaggingTransport,
        tagged_async_http_client,
        tagged_http_client,
    )
    from lookahead_sdk.client.warmers import LlamaCppWarmer, OpenAIWarmer, SGLangWarmer, make_warmer
    from lookahead_sdk.core.config import RuntimeConfig, RuntimeMode
    from lookahead_sdk.core.offload_store import OffloadStore
    from lookahead_sdk.core.policy import (
        ContextPolicy,
        Pipeline,
        TransformContext,
        TransformResult,
        context_policy,
    )
    from lookahead_sdk.core.runtime import CommitKind, CommitOutcome, LookaheadRuntime, RuntimeStats
    from lookahead_sdk.core.state import LookaheadState, LookaheadStatus, MainState, PartialOutput
    from lookahead_sdk.core.sync_runtime import SyncLookaheadRuntime
    from lookahead_sdk.core.warmer import (
        DelegatingWarmer,
        RequestShape,
        Warmer,
        WarmupResult,
        WarmupSpend,
    )
    from lookahead_sdk.errors import (
        ConfigurationError,
        EngineError,
        InvalidInputError,
        LookaheadError,
        StateError,
    )

"""lookahead-sdk: lookahead context engineering and program-aware serving for LLM agents."""

from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import RequestTags, current_tags, program, use_tags
from lookahead_sdk.client.transport import (
    AsyncTaggingTransport,
    TaggingTransport,
    tagged_async_http_client,
    tagged_http_client,
)
from lookahead_sdk.client.warmers import (
    LlamaCppWarmer,
    OpenAIWarmer,
    RequestShape,
    SGLangWarmer,
    make_warmer,
)
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import (
    Completion,
    CompletionClient,
    ContextPolicy,
    Pipeline,
    TransformContext,
    TransformResult,
    context_policy,
)
from lookahead_sdk.core.runtime import CommitKind, CommitOutcome, LookaheadRuntime, RuntimeStats
from lookahead_sdk.core.state import LookaheadState, LookaheadStatus, MainState, PartialOutput

__version__ = "0.1.0"

__all__ = [
    "AsyncTaggingTransport",
    "CommitKind",
    "CommitOutcome",
    "Completion",
    "CompletionClient",
    "ContextPolicy",
    "LlamaCppWarmer",
    "LookaheadRuntime",
    "LookaheadState",
    "LookaheadStatus",
    "MainState",
    "Message",
    "OffloadStore",
    "OpenAIWarmer",
    "PartialOutput",
    "Pipeline",
    "RequestShape",
    "RequestTags",
    "RuntimeStats",
    "SGLangWarmer",
    "TaggingTransport",
    "TransformContext",
    "TransformResult",
    "context_policy",
    "current_tags",
    "make_warmer",
    "program",
    "tagged_async_http_client",
    "tagged_http_client",
    "use_tags",
]

"""The plain OpenAI SDK, and any framework built on it: the one-line integration.

Every OpenAI-SDK-based client accepts an httpx client. Give it a tagging one and every request
it makes, streaming included, carries the current program's tags (top-level JSON fields such
as `program_id`, `priority_class`, `is_lookahead`, plus an `X-Program-Id` header):

    client = AsyncOpenAI(base_url=url, api_key=key, http_client=tagged_async_http_client())
    ChatOpenAI(..., http_client=tagged_http_client(), http_async_client=tagged_async_http_client())
    OpenAILike(..., http_client=tagged_http_client(), async_http_client=tagged_async_http_client())
    OpenAIChatCompletionClient(..., http_client=tagged_async_http_client())

    with program("agent-7"):       # the tags come from this contextvar
        await client.chat.completions.create(...)

Fields a request already has win over the tags. `wire="sglang"` / `"vllm"` add the engine's
own priority fields; `wire="llamacpp"` pins a program's requests to its llama.cpp slots.
For a server that cannot emit tool calls itself (the embedded engine), the `tool_call_*`
clients also obtain them by constrained decoding; `Endpoint` picks the right client for a server.
"""

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.base.tags import current_tags, program, use_tags
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.client.session import ServerFacts, ServerSession
from lookahead_sdk.client.toolcall_transport import (
    AsyncToolCallTransport,
    ToolCallTransport,
    ToolCallWarmer,
    tool_call_async_http_client,
    tool_call_http_client,
)
from lookahead_sdk.client.transport import (
    AsyncTaggingTransport,
    TaggingTransport,
    tagged_async_http_client,
    tagged_http_client,
)

__all__ = [
    "AsyncTaggingTransport",
    "AsyncToolCallTransport",
    "Endpoint",
    "RequestTags",
    "ServerFacts",
    "ServerSession",
    "TaggingTransport",
    "ToolCallTransport",
    "ToolCallWarmer",
    "current_tags",
    "program",
    "tagged_async_http_client",
    "tagged_http_client",
    "tool_call_async_http_client",
    "tool_call_http_client",
    "use_tags",
]

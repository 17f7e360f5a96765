"""The chat request `OpenAICompletionClient` sends: the history and tools exactly as given, with
the caller's extra fields, and without the openai SDK walking every message first (that walk
was a per-turn cost growing with the history, on every turn's TTFT)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from openai.resources.chat.completions import completions as sdk_completions

from lookahead_sdk.base.completion import OpenAICompletionClient
from lookahead_sdk.base.messages import Message

pytestmark = pytest.mark.timeout(30)

REPLY = (
    b'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n'
    b'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41}}\n\n'
    b"data: [DONE]\n\n"
)

HISTORY: list[Message] = [
    {"role": "system", "content": "You are terse."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c0", "content": "a.txt\nb.txt"},
]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}},
    }
]


def recording_client(sent: list[dict[str, Any]]) -> OpenAICompletionClient:
    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=REPLY)

    http = httpx.AsyncClient(transport=httpx.MockTransport(reply))
    openai = AsyncOpenAI(base_url="http://engine.test/v1", api_key="x", http_client=http)
    return OpenAICompletionClient(openai, "m")


async def test_the_history_and_tools_are_sent_as_given_with_the_callers_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walked: list[Any] = []
    transform = sdk_completions.async_maybe_transform

    async def spy(data: Any, expected_type: Any) -> Any:
        walked.append(data.get("messages") if isinstance(data, dict) else data)
        return await transform(data, expected_type)

    monkeypatch.setattr(sdk_completions, "async_maybe_transform", spy)
    sent: list[dict[str, Any]] = []
    client = recording_client(sent)
    result = await client.chat(
        HISTORY, max_tokens=8, tools=TOOLS, extra_body={"cache_prompt": True}, top_p=0.5
    )
    assert result.message["content"] == "ok" and result.prompt_tokens == 40
    (body,) = sent
    assert body["messages"] == HISTORY
    assert body["tools"] == TOOLS
    assert body["cache_prompt"] is True and body["top_p"] == 0.5
    assert body["model"] == "m" and body["max_tokens"] == 8 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    # The SDK's parameter walk never saw the history: it costs O(messages) every turn.
    assert walked == [[]]
    await client.aclose()


async def test_a_stoppable_reply_asks_for_usage_in_every_chunk_beside_the_callers_fields() -> None:
    sent: list[dict[str, Any]] = []
    client = recording_client(sent)
    client.must_yield = lambda: False
    await client.chat(HISTORY[:2], max_tokens=4, extra_body={"cache_prompt": True})
    (body,) = sent
    assert body["timings_per_token"] is True and body["cache_prompt"] is True
    assert body["messages"] == HISTORY[:2] and "tools" not in body
    await client.aclose()

"""The tool-call transport, seen through the real OpenAI SDK; the upstream server is an httpx
MockTransport answering like llama-server does under a json_schema constraint."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI

from lookahead_sdk.base.messages import Message
from lookahead_sdk.client.toolcall_transport import (
    AsyncToolCallTransport,
    SSEDecoder,
    ToolCallTransport,
    ToolCallWarmer,
    decode_completion,
)
from lookahead_sdk.core.warmer import RequestShape, Warmer, WarmupResult, WarmupSpend

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_source",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
CALL_REPLY = '{\n  "name": "read_source",\n  "arguments": {\n    "path": "csv.py"\n  }\n}'
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "read csv.py"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c0",
                "type": "function",
                "function": {"name": "read_source", "arguments": '{"path": "a.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c0", "content": "def f(): pass"},
]


def sse(pieces: Sequence[str], finish: str = "stop") -> bytes:
    head = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    chunks = [
        {
            **head,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}
            ],
        }
    ]
    chunks += [
        {**head, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for piece in pieces
    ]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append(
        {
            **head,
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14},
        }
    )
    return (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )


class Upstream:
    """Records request bodies; answers with `reply`, whole or as SSE split into small pieces."""

    def __init__(self, reply: str, finish: str = "stop") -> None:
        self.reply, self.finish = reply, finish
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        if body.get("stream"):
            pieces = [self.reply[i : i + 3] for i in range(0, len(self.reply), 3)]
            return httpx.Response(
                200, content=sse(pieces, self.finish), headers={"content-type": "text/event-stream"}
            )
        message = {"role": "assistant", "content": self.reply}
        return httpx.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14},
            },
        )


def sync_client(upstream: Upstream) -> OpenAI:
    transport = ToolCallTransport(httpx.MockTransport(upstream))
    return OpenAI(
        base_url="http://engine/v1",
        api_key="x",
        http_client=httpx.Client(transport=transport),
        max_retries=0,
    )


def async_client(upstream: Upstream) -> AsyncOpenAI:
    transport = AsyncToolCallTransport(httpx.MockTransport(upstream))
    return AsyncOpenAI(
        base_url="http://engine/v1",
        api_key="x",
        http_client=httpx.AsyncClient(transport=transport),
        max_retries=0,
    )


def test_request_offers_tools_through_a_schema_and_renders_history_calls() -> None:
    upstream = Upstream(CALL_REPLY)
    sync_client(upstream).chat.completions.create(
        model="m", messages=HISTORY, tools=TOOLS, tool_choice="required", parallel_tool_calls=False
    )
    sent = upstream.bodies[0]
    assert "tools" not in sent and "tool_choice" not in sent and "parallel_tool_calls" not in sent
    schema = sent["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["name"] == {"const": "read_source"}
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
    assert json.loads(sent["messages"][1]["content"]) == {
        "name": "read_source",
        "arguments": {"path": "a.py"},
    }


def test_whole_reply_comes_back_as_a_tool_call() -> None:
    upstream = Upstream(CALL_REPLY, finish="length")  # trailing whitespace ran into max_tokens
    choice = (
        sync_client(upstream)
        .chat.completions.create(model="m", messages=HISTORY, tools=TOOLS)
        .choices[0]
    )
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "read_source" and json.loads(call.function.arguments) == {
        "path": "csv.py"
    }


def test_streamed_reply_comes_back_as_streamed_tool_call_deltas() -> None:
    upstream = Upstream(CALL_REPLY)

    async def collect() -> tuple[str, str, str, list[str | None]]:
        client = async_client(upstream)
        stream = await client.chat.completions.create(
            model="m", messages=HISTORY, tools=TOOLS, stream=True
        )
        name = arguments = content = ""
        finishes = []
        async for chunk in stream:
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or ():
                    name += call.function.name or ""
                    arguments += call.function.arguments or ""
                content += choice.delta.content or ""
                finishes.append(choice.finish_reason)
        await client.close()
        return name, arguments, content, finishes

    name, arguments, content, finishes = asyncio.run(collect())
    assert name == "read_source" and json.loads(arguments) == {"path": "csv.py"} and content == ""
    assert [f for f in finishes if f] == ["tool_calls"]


def test_requests_without_tools_pass_through_undecoded() -> None:
    upstream = Upstream('{"name": "not a call I asked for", "arguments": {}}')
    choice = sync_client(upstream).chat.completions.create(model="m", messages=HISTORY).choices[0]
    assert "response_format" not in upstream.bodies[0]
    assert choice.message.content == upstream.reply and not choice.message.tool_calls


def test_an_explicit_response_format_is_left_to_the_caller() -> None:
    upstream = Upstream('{"answer": 1}')
    fmt = {"type": "json_object"}
    choice = (
        sync_client(upstream)
        .chat.completions.create(model="m", messages=HISTORY, tools=TOOLS, response_format=fmt)
        .choices[0]
    )
    assert (
        upstream.bodies[0]["response_format"] == fmt and choice.message.content == '{"answer": 1}'
    )


def streamed_arguments(data: bytes) -> str:
    """The tool-call argument text of an SSE stream."""
    return "".join(
        call["function"].get("arguments", "")
        for line in data.split(b"\n")
        if line.startswith(b"data: {")
        for choice in json.loads(line[6:])["choices"]
        for call in choice["delta"].get("tool_calls", ())
    )


def test_sse_lines_split_anywhere_decode_the_same() -> None:
    stream = sse([CALL_REPLY[i : i + 2] for i in range(0, len(CALL_REPLY), 2)])
    whole = SSEDecoder()
    expected = whole.feed(stream) + whole.close()
    pieces = SSEDecoder()
    out = (
        b"".join(pieces.feed(stream[i : i + 7]) for i in range(0, len(stream), 7)) + pieces.close()
    )
    assert (
        json.loads(streamed_arguments(out))
        == json.loads(streamed_arguments(expected))
        == {"path": "csv.py"}
    )


def test_decode_completion_keeps_a_non_json_reply_as_text() -> None:
    document = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "prose"},
                "finish_reason": "stop",
            }
        ]
    }
    assert decode_completion(document)["choices"][0]["message"]["content"] == "prose"


class RecordingWarmer(Warmer):
    copies_live_context = True

    def __init__(self) -> None:
        self.warmed: list[tuple[list[Message], RequestShape]] = []
        self.copied: list[tuple[list[Message], RequestShape]] = []

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        self.warmed.append((list(messages), shape))
        return WarmupResult(prompt_tokens=10, cached_tokens=0, seconds=0.0)

    async def fork_live(
        self, program_id: str, messages: Sequence[Message], *, shape: RequestShape
    ) -> bool:
        self.copied.append((list(messages), shape))
        return True


def test_warmer_renders_warm_ups_and_live_copies_like_the_transport() -> None:
    inner = RecordingWarmer()
    warmer = ToolCallWarmer(inner)
    shape = RequestShape("m", tools=tuple(TOOLS))
    asyncio.run(warmer.warm(HISTORY, shape=shape))
    assert asyncio.run(warmer.fork_live("p", HISTORY, shape=shape))
    assert warmer.copies_live_context
    assert inner.copied == inner.warmed  # the copy renders the same messages as the warm-up
    messages, shape = inner.warmed[0]
    upstream = Upstream(CALL_REPLY)
    sync_client(upstream).chat.completions.create(model="m", messages=HISTORY, tools=TOOLS)
    # A content-only template renders role and content: the warm-up renders what is sent ...
    rendered = [(m["role"], m["content"]) for m in upstream.bodies[0]["messages"]]
    assert [(m["role"], m["content"]) for m in messages] == rendered
    # ... and without tool_calls, so a history ending on a call can be rendered open.
    assert not any("tool_calls" in m for m in messages)
    assert shape.tools is None and shape.model == "m"


@pytest.mark.parametrize("status", [400, 500])
def test_error_replies_pass_through(status: int) -> None:
    def failing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": {"message": "bad"}})

    client = OpenAI(
        base_url="http://engine/v1",
        api_key="x",
        max_retries=0,
        http_client=httpx.Client(transport=ToolCallTransport(httpx.MockTransport(failing))),
    )
    with pytest.raises(Exception, match="bad"):
        client.chat.completions.create(model="m", messages=HISTORY, tools=TOOLS)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_emulated_reply_ends_its_foreground_request_streamed_or_not(stream: bool) -> None:
    """The tagging transport sits outside the emulation. A reply it rebuilds whole (not
    streamed) arrives already read: the request must still count as answered and ended, or
    the slack gate would hold best-effort work for good (AutoGen's agent does not stream)."""
    from lookahead_sdk import RequestTags, ServerSession, use_tags
    from lookahead_sdk.client.timeline import RequestTimeline
    from lookahead_sdk.client.transport import AsyncTaggingTransport

    session = ServerSession("http://engine")
    session.timeline = RequestTimeline()
    transport = AsyncTaggingTransport(
        AsyncToolCallTransport(httpx.MockTransport(Upstream(CALL_REPLY))), session=session
    )
    client = AsyncOpenAI(
        base_url="http://engine/v1",
        api_key="x",
        http_client=httpx.AsyncClient(transport=transport),
        max_retries=0,
    )
    with use_tags(RequestTags("p")):
        if stream:
            reply = await client.chat.completions.create(
                model="m", messages=HISTORY, tools=TOOLS, stream=True
            )
            chunks = [chunk async for chunk in reply]
            assert any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
        else:
            reply = await client.chat.completions.create(model="m", messages=HISTORY, tools=TOOLS)
            assert reply.choices[0].message.tool_calls
    await client.close()
    assert (session.foreground.inflight, session.foreground.prefilling) == (0, 0)
    (entry,) = session.timeline.entries
    assert entry.kind == "foreground" and entry.ended_at is not None
    assert entry.first_output_at is not None and entry.first_output_at <= entry.ended_at

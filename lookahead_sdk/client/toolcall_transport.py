"""httpx transports that give any OpenAI client real tool calls from a server that can only do
constrained decoding (see `toolcalls`), plus the matching warm-up wrapper.

    AsyncOpenAI(base_url=engine, http_client=tool_call_async_http_client())
    ChatOpenAI(base_url=engine, http_client=tool_call_http_client(), http_async_client=tool_call_async_http_client())

Every chat request is rewritten the same way: history tool calls rendered as content, and, when
tools are offered, `tools`/`tool_choice` replaced by a `response_format` json_schema. Replies,
whole or streamed (SSE), come back in standard OpenAI form with `tool_calls`. The clients also
tag requests like `lookahead_sdk.client.transport.tagged_*_http_client`.

Warm-ups must render exactly like the requests they prepare: wrap the runtime's warmer in
`ToolCallWarmer` so its messages get the same rewrite (`Endpoint.warmer()` does). A server needs
this when `ServerSession.facts.needs_tool_emulation` says so.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.protocol import WireFormat
from lookahead_sdk.client.session import ServerSession
from lookahead_sdk.client.toolcalls import (
    StreamDecoder,
    call_schema,
    decode_reply,
    render_tool_calls,
)
from lookahead_sdk.client.transport import DEFAULT_TIMEOUT, AsyncTaggingTransport, TaggingTransport
from lookahead_sdk.core.warmer import DelegatingWarmer, RequestShape, WarmupResult, WarmupSpend

_DROPPED_RESPONSE_HEADERS = ("content-length", "content-encoding", "transfer-encoding")


def rewrite_chat_body(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(the body to send, whether its reply is constrained and must be decoded)."""
    rewritten = dict(body)
    if isinstance(body.get("messages"), list):
        rewritten["messages"] = render_tool_calls(body["messages"])
    tools = rewritten.pop("tools", None) or []
    tool_choice = rewritten.pop("tool_choice", "auto")
    rewritten.pop("parallel_tool_calls", None)
    if "response_format" in body:  # the caller asked for its own structured output: leave it
        return rewritten, False
    schema = call_schema(tools, tool_choice)
    if schema is None:
        return rewritten, False
    rewritten["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "tool_call", "schema": schema},
    }
    return rewritten, True


def _chat_body(request: httpx.Request) -> dict[str, Any] | None:
    if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
        return None
    try:
        body = json.loads(request.read())
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _rebuilt(request: httpx.Request, body: dict[str, Any]) -> httpx.Request:
    content = json.dumps(body).encode()
    headers = httpx.Headers(request.headers)
    headers["content-length"] = str(len(content))
    return httpx.Request(
        request.method, request.url, headers=headers, content=content, extensions=request.extensions
    )


def _response_headers(response: httpx.Response) -> list[tuple[str, str]]:
    return [
        (k, v)
        for k, v in response.headers.multi_items()
        if k.lower() not in _DROPPED_RESPONSE_HEADERS
    ]


def decode_completion(document: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed chat completion with each choice's constrained reply decoded."""
    choices = []
    for choice in document.get("choices") or ():
        message = choice.get("message") or {}
        content = message.get("content")
        if isinstance(content, str):
            decoded = decode_reply(content)
            message = {**message, **decoded.message()}
            finish = choice.get("finish_reason")
            # A complete call is a complete reply, even if the grammar let trailing whitespace run on.
            reason = "tool_calls" if decoded.tool_calls else finish
            choice = {**choice, "message": message, "finish_reason": reason}
        choices.append(choice)
    return {**document, "choices": choices}


@dataclass
class SSEDecoder:
    """Rewrites a chat-completion SSE stream chunk by chunk (one decoder per choice index)."""

    _buffer: bytes = b""

    def __post_init__(self) -> None:
        self._decoders: dict[int, StreamDecoder] = {}

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        return b"".join(self._line(line) + b"\n" for line in lines)

    def close(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return self._line(rest) if rest else b""

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:"):
            return line
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return line
        try:
            chunk = json.loads(payload)
        except ValueError:
            return line
        if not isinstance(chunk, dict) or not chunk.get("choices"):
            return line
        events = [self._translate(chunk, choice) for choice in chunk["choices"]]
        return (
            b"\n\n".join(
                b"data: " + json.dumps(event).encode() for group in events for event in group
            )
            or b""
        )

    def _translate(self, chunk: dict[str, Any], choice: dict[str, Any]) -> list[dict[str, Any]]:
        index = choice.get("index", 0)
        decoder = self._decoders.setdefault(index, StreamDecoder())
        delta = dict(choice.get("delta") or {})
        text = delta.pop("content", None)
        deltas = decoder.feed(text) if isinstance(text, str) else []
        finish = choice.get("finish_reason")
        if finish is not None:
            tail, reason = decoder.finish()
            deltas += tail
            finish = "tool_calls" if reason == "tool_calls" else finish
        head = {key: value for key, value in delta.items() if key == "role"}
        if not deltas:
            deltas = [{}]
        events = []
        for position, piece in enumerate(deltas):
            last = position == len(deltas) - 1
            out_delta = {**(head if position == 0 else {}), **piece}
            out_choice = {**choice, "delta": out_delta, "finish_reason": finish if last else None}
            events.append({**chunk, "choices": [out_choice]})
        return events


class _SyncDecodedStream(httpx.SyncByteStream):
    def __init__(self, upstream: httpx.Response) -> None:
        self.upstream = upstream

    def __iter__(self) -> Iterator[bytes]:
        decoder = SSEDecoder()
        for data in self.upstream.iter_bytes():
            if out := decoder.feed(data):
                yield out
        if out := decoder.close():
            yield out

    def close(self) -> None:
        self.upstream.close()


class _AsyncDecodedStream(httpx.AsyncByteStream):
    def __init__(self, upstream: httpx.Response) -> None:
        self.upstream = upstream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoder = SSEDecoder()
        async for data in self.upstream.aiter_bytes():
            if out := decoder.feed(data):
                yield out
        if out := decoder.close():
            yield out

    async def aclose(self) -> None:
        await self.upstream.aclose()


class ToolCallTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport | None = None) -> None:
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = _chat_body(request)
        if body is None:
            return self.inner.handle_request(request)
        rewritten, constrained = rewrite_chat_body(body)
        response = self.inner.handle_request(_rebuilt(request, rewritten))
        if not constrained or response.status_code != 200:
            return response
        if rewritten.get("stream"):
            return httpx.Response(
                response.status_code,
                headers=_response_headers(response),
                stream=_SyncDecodedStream(response),
                request=request,
            )
        response.read()
        document = decode_completion(response.json())
        return httpx.Response(
            response.status_code,
            headers=_response_headers(response),
            json=document,
            request=request,
        )

    def close(self) -> None:
        self.inner.close()


class AsyncToolCallTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = _chat_body(request)
        if body is None:
            return await self.inner.handle_async_request(request)
        rewritten, constrained = rewrite_chat_body(body)
        response = await self.inner.handle_async_request(_rebuilt(request, rewritten))
        if not constrained or response.status_code != 200:
            return response
        if rewritten.get("stream"):
            return httpx.Response(
                response.status_code,
                headers=_response_headers(response),
                stream=_AsyncDecodedStream(response),
                request=request,
            )
        await response.aread()
        document = decode_completion(response.json())
        return httpx.Response(
            response.status_code,
            headers=_response_headers(response),
            json=document,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def tool_call_http_client(
    *,
    wire: WireFormat | None = None,
    session: ServerSession | None = None,
    **client_kwargs: Any,
) -> httpx.Client:
    """A tagging httpx client whose chat requests get tool calls by constrained decoding. The
    tagging transport is outside: its request observers (slack gate, timeline) see the reply
    the caller sees, whose first tool call comes once the constrained JSON names it, some
    tokens after the server's first output."""
    client_kwargs.setdefault("timeout", DEFAULT_TIMEOUT)
    transport = TaggingTransport(ToolCallTransport(), wire=wire, session=session)
    return httpx.Client(transport=transport, **client_kwargs)


def tool_call_async_http_client(
    *,
    wire: WireFormat | None = None,
    session: ServerSession | None = None,
    **client_kwargs: Any,
) -> httpx.AsyncClient:
    """The async twin of `tool_call_http_client`."""
    client_kwargs.setdefault("timeout", DEFAULT_TIMEOUT)
    transport = AsyncTaggingTransport(AsyncToolCallTransport(), wire=wire, session=session)
    return httpx.AsyncClient(transport=transport, **client_kwargs)


def rendered_for_emulation(messages: Sequence[Message]) -> list[Message]:
    """Messages as the tool-call transport sends them: calls rendered as content. The rendered
    calls also leave the messages' `tool_calls`: the server renders content only, and
    llama-server refuses to render a history ending with an assistant message that still has
    tool calls ("Cannot continue an assistant message that contains tool calls"), which is
    where a boundary after a model turn leaves it."""
    return [{k: v for k, v in m.items() if k != "tool_calls"} for m in render_tool_calls(messages)]


class ToolCallWarmer(DelegatingWarmer):
    """Warms what the tool-call transport will actually send: calls rendered as content, no
    tools. Every other hook goes to the wrapped warmer unchanged."""

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        return await self.inner.warm(
            rendered_for_emulation(messages),
            shape=replace(shape, tools=None),
            open_last=open_last,
            spend=spend,
        )

    async def fork_live(
        self, program_id: str, messages: Sequence[Message], *, shape: RequestShape
    ) -> bool:
        return await self.inner.fork_live(
            program_id, rendered_for_emulation(messages), shape=replace(shape, tools=None)
        )

    async def hand_over(
        self,
        program_id: str,
        child_id: str,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
    ) -> None:
        await self.inner.hand_over(
            program_id,
            child_id,
            rendered_for_emulation(messages),
            shape=replace(shape, tools=None),
        )

"""One exchange with a backend: send the call, relay the answer to the client as it arrives
(stream chunks go out as soon as their events are complete; nothing is buffered), and read the
token usage on the way.

A failure before any byte reached the client (connection refused, a 5xx status, a body cut off
before its first event) raises `UpstreamFailed`: the proxy may retry it on another backend. A
backend that dies mid-stream, once the client has its first bytes, gets the stream ended with an
SSE error event; the exchange reports it as `broken`.

The data plane runs on aiohttp's client (its C HTTP parser): with httpx most of the router's own
time went into httpcore, h11 and anyio reading the upstream stream (docs/router.md, overhead).
Discovery and health checks, off the request path, keep httpx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from lookahead_sdk.router.proxy_call import (
    BACKEND_HEADER,
    PATHS,
    Call,
    Headers,
    Reply,
    error_payload,
)
from lookahead_sdk.router.sse import (
    GenerateTap,
    SseFramer,
    UsageTap,
    data_event,
    ends_stream,
    generate_total,
    response_total,
)


class UpstreamFailed(Exception):
    def __init__(self, backend: str, kind: str, detail: str) -> None:
        super().__init__(f"{backend}: {detail}")
        self.backend = backend
        self.kind = kind  # connect | status | read


@dataclass(frozen=True, slots=True)
class Exchange:
    status: int
    total_tokens: int | None  # what the backend reported
    output_estimate: int  # output tokens counted by the proxy (for a backend without usage)
    broken: bool = False  # the backend died mid-stream

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.broken


# What reading from a backend raises: its connection failed, broke off or timed out.
UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)

# Servers close a keep-alive connection after ~5 s idle (llama-server's cpp-httplib, uvicorn for
# SGLang and vLLM): the pool lets connections go before that, so it rarely hands out a closed one.
KEEPALIVE_S = 4.0


def _stale_connection(error: BaseException) -> bool:
    """A call that failed on an open connection before any answer: the backend closed a pooled
    keep-alive connection as the call was written on it. A backend that is down refuses the
    connection instead (`ClientConnectorError`), so resending once on a new connection tells the
    two apart without counting an idle close as a failed backend."""
    if isinstance(error, aiohttp.ClientConnectorError):
        return False
    return isinstance(error, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))


def upstream_session(connect_timeout_s: float, read_timeout_s: float) -> aiohttp.ClientSession:
    """The proxy's one client for calls to backends: pooled keep-alive connections, no limit on
    their number, no proxy settings from the environment, bytes passed through undecoded."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
        timeout=aiohttp.ClientTimeout(
            total=None, connect=connect_timeout_s, sock_read=read_timeout_s
        ),
        trust_env=False,
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
    )


async def exchange(
    session: aiohttp.ClientSession,
    call: Call,
    reply: Reply,
    backend: str,
    body: bytes,
    count_text: Callable[[str], int],
    headers: Headers = (),
) -> Exchange:
    """`headers` go to the client with the answer, after the backend's."""
    upstream = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in call.headers]
    url = f"{backend}{PATHS[call.route]}"
    try:
        try:
            response = await session.post(url, data=body, headers=upstream)
        except UPSTREAM_ERRORS as error:
            if not _stale_connection(error):
                raise
            response = await session.post(url, data=body, headers=upstream)
    except UPSTREAM_ERRORS as error:
        raise UpstreamFailed(backend, "connect", _describe(error)) from error
    complete = False
    try:
        if response.status >= 500:
            detail = await _head_of(response)
            raise UpstreamFailed(backend, "status", f"HTTP {response.status}: {detail}")
        event_stream = response.headers.get("content-type", "").startswith("text/event-stream")
        if call.stream and event_stream:
            result = await _relay_stream(call, reply, response, backend, headers)
        else:
            result = await _relay_whole(call, reply, response, backend, count_text, headers)
        complete = not result.broken
        return result
    finally:
        # A response read to its end keeps its connection for the next call; any other (the
        # client went away, the backend failed) closes it, which makes the engine abort.
        if complete:
            response.release()
        else:
            response.close()


async def _relay_whole(
    call: Call,
    reply: Reply,
    response: aiohttp.ClientResponse,
    backend: str,
    count_text: Callable[[str], int],
    extra: Headers,
) -> Exchange:
    try:
        content = await response.read()
    except UPSTREAM_ERRORS as error:
        raise UpstreamFailed(backend, "read", _describe(error)) from error
    headers = [
        (b"content-type", response.headers.get("content-type", "application/json").encode()),
        (b"content-length", str(len(content)).encode()),
        (BACKEND_HEADER, backend.encode()),
        *extra,
    ]
    await reply.start(response.status, headers)
    await reply.send(content, more=False)
    total, estimate = None, 0
    if 200 <= response.status < 300:
        payload = _json(content)
        total = generate_total(payload) if call.route == "generate" else response_total(payload)
        if total is None:
            estimate = count_text(_output_text(payload))
    return Exchange(response.status, total, estimate)


async def _relay_stream(
    call: Call, reply: Reply, response: aiohttp.ClientResponse, backend: str, extra: Headers
) -> Exchange:
    framer = SseFramer()
    tap: UsageTap | GenerateTap = (
        GenerateTap() if call.route == "generate" else UsageTap(keep_usage=call.keep_usage)
    )
    headers = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
        (BACKEND_HEADER, backend.encode()),
        *extra,
    ]
    ended = False  # the client's response is complete: it went out with the [DONE] event
    try:
        async for data in response.content.iter_any():
            if ended:
                continue  # read the backend's stream to its end, so its connection is reused
            events = framer.feed(data)
            if not events:
                continue
            out = b"".join([tap.pass_event(event) for event in events])
            if not reply.started:
                await reply.start(response.status, headers)
            # OpenAI clients close the connection as soon as they read [DONE]: the client's
            # response ends with it, not when the backend later ends its stream (a client gone
            # in between would read as a disconnect).
            ended = any(map(ends_stream, events))
            if out or ended:
                await reply.send(out, more=not ended)
    except UPSTREAM_ERRORS as error:
        if not reply.started:
            raise UpstreamFailed(backend, "read", _describe(error)) from error
        if not ended:
            message = f"backend {backend} failed mid-stream: {_describe(error)}"
            await reply.send(data_event(error_payload(502, message, "backend_error")), more=False)
            return Exchange(response.status, None, tap.content_chunks, broken=True)
    if not ended:
        rest = framer.rest()
        if not reply.started:
            await reply.start(response.status, headers)
        await reply.send(tap.pass_event(rest) if rest else b"", more=False)
    if isinstance(tap, GenerateTap):
        tap.finish()
    return Exchange(response.status, tap.total_tokens, tap.content_chunks)


async def _head_of(response: aiohttp.ClientResponse) -> str:
    try:
        content = await response.read()
    except UPSTREAM_ERRORS as error:
        return _describe(error)
    return content[:300].decode(errors="replace")


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _output_text(payload: Any) -> str:
    if not isinstance(payload, dict):
        return ""
    if isinstance(payload.get("text"), str):  # /generate
        return payload["text"]
    parts: list[str] = []
    for choice in payload.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else choice.get("text")
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts)


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__

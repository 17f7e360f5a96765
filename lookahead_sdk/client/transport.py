"""httpx transports that tag every JSON request with the current program's RequestTags.

Any framework built on the openai SDK accepts an `http_client`, so one line tags all its traffic:

    AsyncOpenAI(base_url=..., http_client=tagged_async_http_client())
    ChatOpenAI(..., http_async_client=tagged_async_http_client())

Fields the request already carries win over the tags (an explicit per-call `extra_body` stays).
Bound to a `ServerSession` (`session.async_http_client()`), a transport also counts that server's
latency-critical requests for its slack gate and adds the session's placement fields (llama.cpp
slots); `wire` then defaults to the session's, which `ServerSession.connect` learns by probing:
a server not known to accept tag fields (a hosted API) gets wire "none", the `X-Program-Id`
header only. Without a session the wire is "openai" (top-level fields) unless given.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from lookahead_sdk.base.protocol import (
    BEST_EFFORT_BATCH_FIELD,
    RequestTags,
    WireFormat,
    check_wire,
)
from lookahead_sdk.base.tags import current_tags
from lookahead_sdk.client.first_output import FirstOutput
from lookahead_sdk.client.slack import (
    ForegroundRegistry,
    counts_as_foreground,
    is_generation_path,
)
from lookahead_sdk.client.timeline import request_kind

if TYPE_CHECKING:
    from lookahead_sdk.client.session import ServerSession


def merge_tags(
    body: dict[str, Any], tags: RequestTags, wire: WireFormat, placement: dict[str, Any]
) -> dict[str, Any]:
    merged = dict(body)
    for key, value in {**tags.body_fields(wire), **placement}.items():
        if key == "custom_params" and isinstance(merged.get(key), dict):
            merged[key] = {**value, **merged[key]}
        else:
            merged.setdefault(key, value)
    return merged


# The best-effort batch size a tagged request asks for, kept beside it for the timeline.
BATCH_TOKENS_EXTENSION = "lookahead_sdk.batch_tokens"


def tag_request(
    request: httpx.Request, wire: WireFormat, session: ServerSession | None = None
) -> httpx.Request:
    tags = current_tags()
    if tags is None:
        return request
    for name, value in tags.headers().items():
        request.headers.setdefault(name, value)
    if wire == "none" or request.method != "POST":
        return request  # "none": a server not known to accept tag fields gets the header only
    if "json" not in request.headers.get("content-type", ""):
        return request
    try:
        body = json.loads(request.read())
    except ValueError:
        return request
    if not isinstance(body, dict):
        return request
    placement = session.placement_fields(tags, request.url.path) if session is not None else {}
    merged = merge_tags(body, tags, wire, placement)
    content = json.dumps(merged).encode()
    headers = httpx.Headers(request.headers)
    headers["content-length"] = str(len(content))
    extensions = dict(request.extensions)
    if (batch_tokens := merged.get(BEST_EFFORT_BATCH_FIELD)) is not None:
        extensions[BATCH_TOKENS_EXTENSION] = batch_tokens  # for the session's timeline
    return httpx.Request(
        request.method, request.url, headers=headers, content=content, extensions=extensions
    )


class ResponseObserver(Protocol):
    """Told when a response's first output arrives and when it ends (`ForegroundRequest`,
    `TimelineEntry`)."""

    def first_token(self) -> None: ...

    def end(self) -> None: ...


def _end_all(observers: Sequence[ResponseObserver]) -> None:
    for observer in observers:
        observer.end()


class _ObservedSyncStream(httpx.SyncByteStream):
    """A response body whose first chunk carrying output marks the first token (`FirstOutput`:
    a streamed reply starts after the prefill, and a tool call only once parsed) and whose
    closing ends the request, for each observer."""

    def __init__(
        self,
        inner: httpx.SyncByteStream,
        observers: Sequence[ResponseObserver],
        first_output: FirstOutput,
    ) -> None:
        self.inner, self.observers, self.first_output = inner, observers, first_output

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            _on_chunk(chunk, self.first_output, self.observers)
            yield chunk

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            _end_all(self.observers)


class _ObservedAsyncStream(httpx.AsyncByteStream):
    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        observers: Sequence[ResponseObserver],
        first_output: FirstOutput,
    ) -> None:
        self.inner, self.observers, self.first_output = inner, observers, first_output

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            _on_chunk(chunk, self.first_output, self.observers)
            yield chunk

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            _end_all(self.observers)


def _on_chunk(
    chunk: bytes, first_output: FirstOutput, observers: Sequence[ResponseObserver]
) -> None:
    if not first_output.seen and first_output.feed(chunk):
        for observer in observers:
            observer.first_token()


def _observed(
    response: httpx.Response,
    observers: Sequence[ResponseObserver],
    stream_type: type[_ObservedSyncStream] | type[_ObservedAsyncStream],
) -> httpx.Response:
    if response.is_closed:
        # An inner transport read the whole body already (the tool-call emulation rebuilds a
        # reply that was not streamed): the caller will not read this stream, and the request
        # has its output and has ended now.
        for observer in observers:
            observer.first_token()
        _end_all(observers)
        return response
    streamed = response.headers.get("content-type", "").startswith("text/event-stream")
    response.stream = stream_type(response.stream, observers, FirstOutput(streamed=streamed))  # type: ignore[arg-type]
    return response


class _Tagging:
    """What the sync and async transports share: the wire format, the session, and which
    requests count as the session's foreground."""

    def __init__(self, wire: WireFormat | None, session: ServerSession | None) -> None:
        if wire is None:
            wire = session.wire if session is not None else "openai"
        self.wire = check_wire(wire)
        self.session = session

    def sends_after(self, request: httpx.Request) -> tuple[ForegroundRegistry, str | None] | None:
        """For a best-effort generation request on the session's server: the registry and the
        program whose announced model call it goes out after (`ForegroundRegistry.until_sent`)."""
        session = self.session
        if (
            session is None
            or counts_as_foreground()
            or request.method != "POST"
            or not is_generation_path(request.url.path)
            or not session.counts(str(request.url))
        ):
            return None
        tags = current_tags()
        return session.foreground, tags.program_id if tags else None

    def prepare(self, request: httpx.Request) -> tuple[httpx.Request, list[ResponseObserver]]:
        """The tagged request, and what watches its response: its foreground count if it is
        latency-critical generation on the session's server, its timeline entry if the session
        keeps one."""
        tagged = tag_request(request, self.wire, self.session)
        session = self.session
        if session is None or not session.counts(str(request.url)):
            return tagged, []
        generation = request.method == "POST" and is_generation_path(request.url.path)
        foreground = counts_as_foreground()
        observers: list[ResponseObserver] = []
        tags = current_tags()
        if generation and foreground:
            observers.append(session.foreground.begin(tags.program_id if tags else None))
        if session.timeline is not None:
            kind = request_kind(request.url.path, foreground=foreground, generation=generation)
            observers.append(
                session.timeline.begin(
                    kind,
                    tags.program_id if tags else None,
                    request.url.path,
                    batch_tokens=tagged.extensions.get(BATCH_TOKENS_EXTENSION),
                )
            )
        return tagged, observers


class TaggingTransport(_Tagging, httpx.BaseTransport):
    def __init__(
        self,
        inner: httpx.BaseTransport | None = None,
        *,
        wire: WireFormat | None = None,
        session: ServerSession | None = None,
    ) -> None:
        super().__init__(wire, session)
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if (after := self.sends_after(request)) is not None:
            after[0].wait_sent(after[1])
        tagged, observers = self.prepare(request)
        if not observers:
            return self.inner.handle_request(tagged)
        try:
            response = self.inner.handle_request(tagged)
        except BaseException:
            _end_all(observers)
            raise
        return _observed(response, observers, _ObservedSyncStream)

    def close(self) -> None:
        self.inner.close()


class AsyncTaggingTransport(_Tagging, httpx.AsyncBaseTransport):
    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        wire: WireFormat | None = None,
        session: ServerSession | None = None,
    ) -> None:
        super().__init__(wire, session)
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if (after := self.sends_after(request)) is not None:
            await after[0].until_sent(after[1])
        tagged, observers = self.prepare(request)
        if not observers:
            return await self.inner.handle_async_request(tagged)
        try:
            response = await self.inner.handle_async_request(tagged)
        except BaseException:
            _end_all(observers)
            raise
        return _observed(response, observers, _ObservedAsyncStream)

    async def aclose(self) -> None:
        await self.inner.aclose()


DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)


def tagged_http_client(
    *,
    wire: WireFormat | None = None,
    session: ServerSession | None = None,
    **client_kwargs: Any,
) -> httpx.Client:
    client_kwargs.setdefault("timeout", DEFAULT_TIMEOUT)
    return httpx.Client(transport=TaggingTransport(wire=wire, session=session), **client_kwargs)


def tagged_async_http_client(
    *,
    wire: WireFormat | None = None,
    session: ServerSession | None = None,
    **client_kwargs: Any,
) -> httpx.AsyncClient:
    client_kwargs.setdefault("timeout", DEFAULT_TIMEOUT)
    return httpx.AsyncClient(
        transport=AsyncTaggingTransport(wire=wire, session=session), **client_kwargs
    )

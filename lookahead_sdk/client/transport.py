"""httpx transports that tag every JSON request with the current program's RequestTags.

Any framework built on the openai SDK accepts an `http_client`, so one line tags all its traffic:

    AsyncOpenAI(base_url=..., http_client=tagged_async_http_client())
    ChatOpenAI(..., http_async_client=tagged_async_http_client())

Fields the request already carries win over the tags (an explicit per-call `extra_body` stays).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import httpx

from lookahead_sdk.base.tags import PROGRAM_HEADER, RequestTags, current_tags
from lookahead_sdk.client.llamacpp_slots import SLOT_PAIRS
from lookahead_sdk.client.slack import (
    FOREGROUND,
    ForegroundRequest,
    counts_as_foreground,
    is_generation_path,
    origin_of,
)

WireFormat = Literal["openai", "sglang", "vllm", "llamacpp"]
WIRE_FORMATS: tuple[str, ...] = ("openai", "sglang", "vllm", "llamacpp")


def tag_fields(tags: RequestTags, wire: WireFormat, origin: str = "") -> dict[str, Any]:
    if wire == "sglang":
        return {**tags.to_body(), **tags.to_sglang()}
    if wire == "vllm":
        return {**tags.to_body(), **tags.to_vllm()}
    if wire == "llamacpp":
        slot = SLOT_PAIRS.slot_for(origin, tags)
        return {**tags.to_body(), **({"id_slot": slot} if slot is not None else {})}
    return tags.to_body()


def merge_tags(
    body: dict[str, Any], tags: RequestTags, wire: WireFormat, origin: str = ""
) -> dict[str, Any]:
    merged = dict(body)
    for key, value in tag_fields(tags, wire, origin).items():
        if key == "custom_params" and isinstance(merged.get(key), dict):
            merged[key] = {**value, **merged[key]}
        else:
            merged.setdefault(key, value)
    return merged


def tag_request(request: httpx.Request, wire: WireFormat) -> httpx.Request:
    tags = current_tags()
    if tags is None:
        return request
    request.headers.setdefault(PROGRAM_HEADER, tags.program_id)
    if request.method != "POST" or "json" not in request.headers.get("content-type", ""):
        return request
    try:
        body = json.loads(request.read())
    except ValueError:
        return request
    if not isinstance(body, dict):
        return request
    content = json.dumps(merge_tags(body, tags, wire, origin_of(str(request.url)))).encode()
    headers = httpx.Headers(request.headers)
    headers["content-length"] = str(len(content))
    return httpx.Request(
        request.method, request.url, headers=headers, content=content, extensions=request.extensions
    )


def _check_wire(wire: str) -> WireFormat:
    if wire not in WIRE_FORMATS:
        raise ValueError(f"wire must be one of {WIRE_FORMATS}, got {wire!r}")
    return wire  # type: ignore[return-value]


class _CountedSyncStream(httpx.SyncByteStream):
    """The response body of a foreground request: its first chunk marks the first token (a
    streamed reply starts after the prefill), closing it ends the request."""

    def __init__(self, inner: httpx.SyncByteStream, request: ForegroundRequest) -> None:
        self.inner, self.request = inner, request

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.request.first_token()
            yield chunk

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            self.request.end()


class _CountedAsyncStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, request: ForegroundRequest) -> None:
        self.inner, self.request = inner, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.request.first_token()
            yield chunk

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            self.request.end()


def _foreground_origin(request: httpx.Request) -> str | None:
    """The origin to count this request against, if it is latency-critical generation."""
    if request.method == "POST" and is_generation_path(request.url.path) and counts_as_foreground():
        return origin_of(str(request.url))
    return None


class TaggingTransport(httpx.BaseTransport):
    def __init__(
        self, inner: httpx.BaseTransport | None = None, *, wire: WireFormat = "openai"
    ) -> None:
        self.inner = inner or httpx.HTTPTransport()
        self.wire = _check_wire(wire)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        origin = _foreground_origin(request)
        if origin is None:
            return self.inner.handle_request(tag_request(request, self.wire))
        held = FOREGROUND.begin(origin)
        try:
            response = self.inner.handle_request(tag_request(request, self.wire))
        except BaseException:
            held.end()
            raise
        response.stream = _CountedSyncStream(response.stream, held)  # type: ignore[arg-type]
        return response

    def close(self) -> None:
        self.inner.close()


class AsyncTaggingTransport(httpx.AsyncBaseTransport):
    def __init__(
        self, inner: httpx.AsyncBaseTransport | None = None, *, wire: WireFormat = "openai"
    ) -> None:
        self.inner = inner or httpx.AsyncHTTPTransport()
        self.wire = _check_wire(wire)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        origin = _foreground_origin(request)
        if origin is None:
            return await self.inner.handle_async_request(tag_request(request, self.wire))
        held = FOREGROUND.begin(origin)
        try:
            response = await self.inner.handle_async_request(tag_request(request, self.wire))
        except BaseException:
            held.end()
            raise
        response.stream = _CountedAsyncStream(response.stream, held)  # type: ignore[arg-type]
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)


def tagged_http_client(*, wire: WireFormat = "openai", **client_kwargs: Any) -> httpx.Client:
    client_kwargs.setdefault("timeout", DEFAULT_TIMEOUT)
    return httpx.Client(transport=TaggingTransport(wire=wire), **client_kwargs)


def tagged_async_http_client(
    *, wire: WireFormat = "openai", **client_kwargs: Any
) -> httpx.AsyncClient:
    client_kwargs.setdefault("timeout", DEFAULT_TIMEOUT)
    return httpx.AsyncClient(transport=AsyncTaggingTransport(wire=wire), **client_kwargs)

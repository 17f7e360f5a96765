"""Reading a JSON request body safely, for the simulator's and the router's HTTP servers (raw
ASGI `receive`, so Starlette, FastAPI and a bare ASGI app share it): the size limit is checked
on Content-Length and again while the body streams in (a body over it is never held whole), deep
nesting is refused instead of crashing the handler, and a handler can wait for its client to go
away."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]

DEFAULT_BODY_LIMIT = 8 * 1024 * 1024


class BodyError(ValueError):
    """The body cannot be accepted: answer with `status` (400 or 413) and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


async def read_body(receive: Receive, content_length: str | None, limit: int) -> bytes:
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise BodyError(
                400, f"Content-Length must be a number, got {content_length!r}"
            ) from None
        if declared > limit:
            raise BodyError(413, _too_large(limit))
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyError(413, _too_large(limit))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except RecursionError:
        raise BodyError(400, "the request body is JSON nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BodyError(400, f"the request body is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise BodyError(400, "the request body must be a JSON object")
    return value


async def read_json_object(
    receive: Receive, content_length: str | None, limit: int = DEFAULT_BODY_LIMIT
) -> dict[str, Any]:
    return parse_json_object(await read_body(receive, content_length, limit))


async def wait_for_disconnect(receive: Receive) -> None:
    """Returns when the client has gone away (call once the body has been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _too_large(limit: int) -> str:
    return f"the request body is larger than the limit of {limit} bytes"

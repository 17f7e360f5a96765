"""One inference request as the proxy handles it: the parsed call, the reply channel back to
the client (the ASGI layer implements it), the upstream body and headers, and error bodies."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from lookahead_sdk.base.protocol import DISCARD_SLOT_PROMPT_FIELD, RequestTags
from lookahead_sdk.router.state import LookaheadKind

Route = Literal["chat", "completions", "generate"]
PATHS: dict[Route, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "generate": "/generate",
}
Headers = Sequence[tuple[bytes, bytes]]
BACKEND_HEADER = b"x-router-backend"  # which backend answered
HELD_HEADER = b"x-router-held-ms"  # how long a program's request waited at the router for room

# Never forwarded upstream: hop-by-hop headers, and what the proxy sets itself.
_DROPPED = {
    b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te",
    b"trailer", b"upgrade", b"proxy-authorization", b"proxy-connection", b"expect",
    b"accept-encoding",
}  # fmt: skip


@dataclass(slots=True)
class Call:
    route: Route
    body: dict[str, Any]
    raw: bytes
    headers: Headers  # the client's, already filtered for upstream
    tags: RequestTags | None

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def keep_usage(self) -> bool:
        """The client asked for the usage chunk itself."""
        options = self.body.get("stream_options")
        return isinstance(options, Mapping) and options.get("include_usage") is True

    @property
    def openai_stream(self) -> bool:
        return self.stream and self.route != "generate"

    @property
    def program_id(self) -> str | None:
        return None if self.tags is None else self.tags.program_id

    @property
    def lookahead(self) -> LookaheadKind | None:
        """A lookahead branch: best-effort, or promoted (sent latency-critical at commit)."""
        if self.tags is None or not self.tags.is_lookahead:
            return None
        return "promoted" if self.tags.priority_class == "lc" else "best_effort"

    def upstream_body(self, slot: int | None = None) -> bytes:
        """The body sent to the backend: the client's bytes, unless the proxy must ask for the
        usage chunk of a stream (it reads the program's tokens from it) or place the request
        in a llama.cpp slot (`slot`; a client's own `id_slot` wins). A client's
        `discard_slot_prompt` speaks of the slot it named: with none named, it is dropped, for
        the slot the proxy chooses may hold a context some program still needs."""
        changes: dict[str, Any] = {}
        options = self.body.get("stream_options")
        if self.openai_stream and not self.keep_usage and isinstance(options, Mapping | None):
            changes["stream_options"] = {**(options or {}), "include_usage": True}
        if slot is not None and "id_slot" not in self.body:
            changes["id_slot"] = slot
        unplaced_discard = DISCARD_SLOT_PROMPT_FIELD in self.body and "id_slot" not in self.body
        if not changes and not unplaced_discard:
            return self.raw
        body = self.body
        if unplaced_discard:
            body = {k: v for k, v in body.items() if k != DISCARD_SLOT_PROMPT_FIELD}
        return json.dumps({**body, **changes}, separators=(",", ":")).encode()


class Reply(Protocol):
    """The response channel to the client."""

    @property
    def started(self) -> bool: ...

    async def start(self, status: int, headers: Headers) -> None: ...

    async def send(self, data: bytes, *, more: bool) -> None: ...


class LastBytesHeld:
    """A `Reply` that holds back the response's last bytes until `release()`: the proxy first
    records how the request ended, so that a client reading `/programs`, or sending its
    program's next request, right after its answer finds this request finished."""

    def __init__(self, reply: Reply) -> None:
        self._reply = reply
        self._last: bytes | None = None

    @property
    def started(self) -> bool:
        return self._reply.started

    async def start(self, status: int, headers: Headers) -> None:
        await self._reply.start(status, headers)

    async def send(self, data: bytes, *, more: bool) -> None:
        if more:
            await self._reply.send(data, more=True)
        else:
            self._last = data

    async def release(self) -> None:
        if self._last is not None:
            data, self._last = self._last, None
            await self._reply.send(data, more=False)


def upstream_headers(headers: Headers, *, drop_authorization: bool) -> list[tuple[bytes, bytes]]:
    kept = [
        (name, value)
        for name, value in headers
        if name not in _DROPPED and not (drop_authorization and name == b"authorization")
    ]
    kept.append((b"accept-encoding", b"identity"))  # bytes pass through undecoded
    return kept


def error_payload(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


async def reply_json(
    reply: Reply, status: int, payload: Any, extra: Mapping[str, str] | None = None
) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await reply.start(status, headers)
    await reply.send(body, more=False)


async def reply_error(reply: Reply, status: int, message: str, kind: str) -> None:
    await reply_json(reply, status, error_payload(status, message, kind))

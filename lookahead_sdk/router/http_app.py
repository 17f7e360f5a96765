"""The router's HTTP front: a small ASGI app (no framework: it must watch for client disconnects
while a request is held or streaming, and add as little latency as it can).

Routes: POST /v1/chat/completions, /v1/completions, /generate (inference, through the policy);
GET /v1/models; GET /programs, GET /programs/{id}, POST /programs/release; GET /health,
GET /metrics. With an API key, every route but /health needs `Authorization: Bearer KEY`."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote

from lookahead_sdk.base.protocol import RequestTags, check_id
from lookahead_sdk.router.exposition import CONTENT_TYPE
from lookahead_sdk.router.proxy import TASK_PREFIX, RouterProxy
from lookahead_sdk.router.proxy_call import (
    Call,
    Headers,
    Route,
    error_payload,
    reply_error,
    reply_json,
    upstream_headers,
)
from lookahead_sdk.sim.http_body import (
    BodyError,
    ClientGone,
    parse_json_object,
    read_body,
    wait_for_disconnect,
)

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

INFERENCE: dict[str, Route] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/generate": "generate",
}
PROGRAMS_PREFIX = "/programs/"


class AsgiReply:
    """`proxy_call.Reply` over an ASGI `send`."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._started = False
        self._finished = False

    @property
    def started(self) -> bool:
        return self._started

    @property
    def finished(self) -> bool:
        """The whole response went out."""
        return self._finished

    async def start(self, status: int, headers: Headers) -> None:
        self._started = True
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def send(self, data: bytes, *, more: bool) -> None:
        self._finished = not more
        await self._send({"type": "http.response.body", "body": data, "more_body": more})


class RouterApp:
    def __init__(self, proxy: RouterProxy) -> None:
        self.proxy = proxy
        key = proxy.config.api_key
        self._expected = None if key is None else f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        reply = AsgiReply(send)
        method, path = scope["method"], scope["path"]
        headers: Headers = scope["headers"]
        if path != "/health" and not self._authorized(headers):
            await reply_json(
                reply, 401, error_payload(401, "missing or wrong API key", "unauthorized"),
                {"www-authenticate": "Bearer"},
            )  # fmt: skip
            return
        route = INFERENCE.get(path)
        if route is not None and method == "POST":
            await self._inference(route, headers, receive, reply)
        elif method == "GET" and path == "/health":
            health = self.proxy.health()
            await reply_json(reply, 200 if health["backends_up"] else 503, health)
        elif method == "GET" and path == "/metrics":
            text = self.proxy.metrics_text().encode()
            await reply.start(200, [(b"content-type", CONTENT_TYPE.encode())])
            await reply.send(text, more=False)
        elif method == "GET" and path == "/v1/models":
            await self.proxy.models(reply)
        elif method == "GET" and path == "/programs":
            await reply_json(reply, 200, self.proxy.programs_view())
        elif method == "POST" and path == "/programs/release":
            await self._release(headers, receive, reply)
        elif method == "GET" and path.startswith(PROGRAMS_PREFIX):
            program_id = _program_id(scope)
            view = self.proxy.program_view(program_id)
            if view is None:
                await reply_error(reply, 404, f"no program {program_id!r}", "not_found")
            else:
                await reply_json(reply, 200, view)
        elif route is not None or path in ("/health", "/metrics", "/v1/models", "/programs"):
            await reply_error(
                reply, 405, f"{method} is not allowed on {path}", "method_not_allowed"
            )
        else:
            await reply_error(reply, 404, f"no route {path}", "not_found")

    def _authorized(self, headers: Headers) -> bool:
        if self._expected is None:
            return True
        given = next((value for name, value in headers if name == b"authorization"), b"")
        return hmac.compare_digest(given, self._expected)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.proxy.start()
                except Exception as error:
                    log.exception("router start failed")
                    await send({"type": "lifespan.startup.failed", "message": repr(error)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.proxy.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _json_body(self, headers: Headers, receive: Receive, reply: AsgiReply) -> Any:
        """The request's JSON object, or None after answering the error."""
        length = next((v.decode() for n, v in headers if n == b"content-length"), None)
        try:
            raw = await read_body(receive, length, self.proxy.config.max_body_bytes)
            return raw, parse_json_object(raw)
        except BodyError as error:
            await reply_error(reply, error.status, str(error), "invalid_request_error")
        except ClientGone:
            pass
        return None

    async def _inference(
        self, route: Route, headers: Headers, receive: Receive, reply: AsgiReply
    ) -> None:
        parsed = await self._json_body(headers, receive, reply)
        if parsed is None:
            return
        raw, body = parsed
        text_headers = {n.decode("latin-1"): v.decode("latin-1") for n, v in headers}
        try:
            tags = RequestTags.from_request(body, text_headers)
        except ValueError as error:
            await reply_error(reply, 400, str(error), "invalid_request_error")
            return
        forwarded = upstream_headers(headers, drop_authorization=self._expected is not None)
        call = Call(route, body, raw, forwarded, tags)
        await self._until_disconnect(self.proxy.serve(call, reply), receive, reply)

    async def _until_disconnect(
        self, work: Awaitable[None], receive: Receive, reply: AsgiReply
    ) -> None:
        """Run `work`; cancel it if the client goes away before its response is complete (a
        held request is dropped, an upstream request is cancelled)."""
        task = asyncio.ensure_future(work)
        task.set_name(f"{TASK_PREFIX}request")
        watch = asyncio.create_task(wait_for_disconnect(receive), name=f"{TASK_PREFIX}watch")
        try:
            await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
            if reply.finished and not task.done():
                # The client has its whole answer (uvicorn reports a disconnect as soon as a
                # response is complete): what is left of the work (the usage, the upstream
                # connection) runs to its end.
                await asyncio.wait((task,))
        finally:
            for pending in (task, watch):
                pending.cancel()
            await asyncio.wait((task, watch))
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("request failed", exc_info=error)
            if not reply.started:
                with contextlib.suppress(Exception):
                    await reply_error(reply, 500, f"router error: {error!r}", "router_error")

    async def _release(self, headers: Headers, receive: Receive, reply: AsgiReply) -> None:
        parsed = await self._json_body(headers, receive, reply)
        if parsed is None:
            return
        _, body = parsed
        try:
            program_id = check_id(body.get("program_id"), "program_id")
        except ValueError as error:
            await reply_error(reply, 400, str(error), "invalid_request_error")
            return
        released = self.proxy.release(program_id)
        await reply_json(reply, 200, {"program_id": program_id, "released": released})


def _program_id(scope: Scope) -> str:
    """The id in `/programs/{id}`, percent-decoded once. `scope["path"]` is decoded already (an
    encoded '/' in the id is a '/' there); the raw path, where the server gives it, is exact."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes) and raw.startswith(PROGRAMS_PREFIX.encode()):
        return unquote(raw.decode("latin-1").removeprefix(PROGRAMS_PREFIX))
    return scope["path"].removeprefix(PROGRAMS_PREFIX)

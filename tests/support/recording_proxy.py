"""A real HTTP server that records every request; it forwards to a real upstream engine (proxy mode)
or, for unit tests of one piece, answers with a minimal OpenAI-shaped reply (stub mode)."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stub_reply(body: dict[str, Any]) -> Response:
    text = "stub reply"
    if body.get("stream"):

        def chunks():
            head = {"id": "s", "object": "chat.completion.chunk", "created": 0, "model": "stub"}
            yield f"data: {json.dumps({**head, 'choices': [{'index': 0, 'delta': {'role': 'assistant', 'content': text}}]})}\n\n"
            yield f"data: {json.dumps({**head, 'choices': [], 'usage': {'prompt_tokens': 5, 'completion_tokens': 2, 'total_tokens': 7}})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")
    return JSONResponse(
        {
            "id": "s",
            "object": "chat.completion",
            "created": 0,
            "model": "stub",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        }
    )


@dataclass
class RecordingProxy:
    upstream: str | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    props: dict[str, Any] | None = None  # stub mode: what GET /props answers (404 if None)

    def __post_init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = FastAPI()
        app.add_api_route("/{path:path}", self._handle, methods=["GET", "POST"])
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    async def _handle(self, path: str, request: Request) -> Response:
        raw = await request.body()
        body = (
            json.loads(raw)
            if raw and "json" in request.headers.get("content-type", "")
            else raw.decode(errors="replace")
        )
        self.requests.append(
            RecordedRequest(request.method, "/" + path, dict(request.headers), body)
        )
        if self.upstream is None:
            if path.endswith("chat/completions"):
                return stub_reply(body)
            if path == "props":
                return JSONResponse(self.props or {}, status_code=200 if self.props else 404)
            return JSONResponse({"ok": True})
        client = httpx.AsyncClient(timeout=600)
        upstream_request = client.build_request(
            request.method,
            f"{self.upstream}/{path}" + (f"?{request.url.query}" if request.url.query else ""),
            content=raw,
            headers={"content-type": request.headers.get("content-type", "application/json")},
        )
        upstream = await client.send(upstream_request, stream=True)

        async def relay():
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()
                await client.aclose()

        return StreamingResponse(
            relay(),
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type"),
        )

    def bodies(self, path_suffix: str) -> list[Any]:
        return [r.body for r in self.requests if r.path.endswith(path_suffix)]

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("recording proxy did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

"""Real processes and real HTTP for the router's proxy tests: simulated engines started as
`lookahead-sdk sim serve` processes, a scriptable stub backend, the router served in-process by
uvicorn (so a test can look at its tasks and memory), and waiting for conditions."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn

from lookahead_sdk.router.http_app import RouterApp
from lookahead_sdk.router.proxy import TASK_PREFIX, RouterProxy
from lookahead_sdk.router.proxy_config import ProxyConfig


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- simulated engines -------------------------------------------------------------------------


@dataclass
class SimProcess:
    url: str
    process: subprocess.Popen[bytes]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def kill(self) -> None:
        """SIGKILL: the engine dies mid-whatever, as a crashed GPU server would."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/stats", timeout=10).json()


def spawn_sim(
    port: int | None = None,
    *,
    kv_tokens: int = 200_000,
    time_scale: float = 0.05,
    default_max_tokens: int = 4,
) -> SimProcess:
    port = port or free_port()
    command = [sys.executable, "-m", "lookahead_sdk", "sim", "serve", "--truth", "model"]
    command += ["--kv-tokens", str(kv_tokens), "--port", str(port)]
    command += ["--time-scale", str(time_scale), "--default-max-tokens", str(default_max_tokens)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return SimProcess(f"http://127.0.0.1:{port}", process)


def wait_healthy(sims: list[SimProcess], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    for sim in sims:
        while True:
            assert sim.process.poll() is None, f"sim at {sim.url} exited"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{sim.url}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"sim at {sim.url} did not start"
            time.sleep(0.1)


@contextlib.contextmanager
def sims_running(count: int, **settings: Any) -> Iterator[list[SimProcess]]:
    sims = [spawn_sim(**settings) for _ in range(count)]
    try:
        wait_healthy(sims)
        yield sims
    finally:
        for sim in sims:
            sim.kill()


# --- the router in-process ---------------------------------------------------------------------


@dataclass
class Router:
    url: str
    proxy: RouterProxy

    def client(self, **settings: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=settings.pop("timeout", 60), **settings)


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn in the running event loop; yields its URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(), name="test:uvicorn")
    await wait_for(lambda: server.started or task.done(), 30, "the server to start")
    assert not task.done(), "the server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


@contextlib.asynccontextmanager
async def router_running(config: ProxyConfig, **proxy_settings: Any) -> AsyncIterator[Router]:
    proxy = RouterProxy(config, **proxy_settings)
    async with serving(RouterApp(proxy)) as url:
        yield Router(url, proxy)


def proxy_tasks() -> list[str]:
    """The names of the router's tasks in this event loop (`router:tick` when idle)."""
    return sorted(t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith(TASK_PREFIX))


async def wait_for(
    condition: Callable[[], bool | Awaitable[bool]], timeout_s: float, what: str
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(0.02)


async def program(client: httpx.AsyncClient, program_id: str) -> dict[str, Any] | None:
    response = await client.get(f"/programs/{program_id}")
    return None if response.status_code == 404 else response.json()


def conversation(program_id: str, turns: int, words: int = 60) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": f"You are agent {program_id}."},
        *(
            {"role": "user", "content": f"step {i} of {program_id}: " + "lorem ipsum " * words}
            for i in range(turns)
        ),
    ]


def sse_payloads(lines: list[str]) -> list[dict[str, Any]]:
    return [
        json.loads(line.removeprefix("data: "))
        for line in lines
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


# --- a scriptable backend ----------------------------------------------------------------------


@dataclass
class StubBackend:
    """An OpenAI-compatible backend whose answers a test chooses: `status` for inference
    routes (500: a failing engine), usage in every response, a vLLM-like completions stream."""

    capacity_tokens: int = 100_000
    status: int = 200
    health_status: int = 200  # of GET /health
    fail_marker: str | None = None  # a prompt containing it is answered 500
    # A prompt containing `hold_marker` waits for `resume` before it is answered.
    hold_marker: str | None = None
    resume: asyncio.Event = field(default_factory=asyncio.Event)
    report_usage: bool = True
    llamacpp_slots: int | None = None  # answer like llama-server: /props and /slots
    # Seconds between a stream's [DONE] event and its end (a busy backend's last write).
    end_after_done_s: float = 0.0
    seen: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while (message := await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        if path == "/health":
            return await _send_json(send, self.health_status, {})
        if path == "/get_server_info" and self.llamacpp_slots is None:
            return await _send_json(send, 200, {"max_total_num_tokens": self.capacity_tokens})
        if path == "/props" and self.llamacpp_slots is not None:
            settings = {"n_ctx": self.capacity_tokens // self.llamacpp_slots}
            props = {"default_generation_settings": settings, "total_slots": self.llamacpp_slots}
            return await _send_json(send, 200, props)
        if path == "/slots" and self.llamacpp_slots is not None:
            n_ctx = self.capacity_tokens // self.llamacpp_slots
            slots = [{"id": i, "n_ctx": n_ctx} for i in range(self.llamacpp_slots)]
            return await _send_json(send, 200, slots)
        if scope["method"] == "GET":
            return await _send_json(send, 404, {"error": "not found"})
        payload = json.loads(body) if body else {}
        self.seen.append({"path": path, "body": payload, "headers": dict(scope["headers"])})
        prompt = str(payload.get("prompt", ""))
        if self.hold_marker is not None and self.hold_marker in prompt:
            await self.resume.wait()
        failed = self.fail_marker is not None and self.fail_marker in prompt
        if self.status != 200 or failed:
            status = 500 if failed else self.status
            return await _send_json(send, status, {"error": {"message": "stub failure"}})
        usage = {"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103}
        if not payload.get("stream"):
            answer: dict[str, Any] = {"choices": [{"index": 0, "text": "a b c"}]}
            if self.report_usage:
                answer["usage"] = usage
            return await _send_json(send, 200, answer)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for word in ("a", "b", "c"):
            chunk = {"choices": [{"index": 0, "text": word, "finish_reason": None}]}
            await _send_event(send, chunk)
        if (payload.get("stream_options") or {}).get("include_usage"):
            await _send_event(send, {"choices": [], "usage": usage})
        if not self.end_after_done_s:
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            return
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
        await asyncio.sleep(self.end_after_done_s)
        await send({"type": "http.response.body", "body": b""})


async def _send_event(send: Callable, payload: dict[str, Any]) -> None:
    data = f"data: {json.dumps(payload)}\n\n".encode()
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _send_json(send: Callable, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def stub_running(stub: StubBackend) -> AsyncIterator[StubBackend]:
    async with serving(stub) as url:
        stub.url = url
        yield stub

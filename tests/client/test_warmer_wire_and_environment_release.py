"""Warm-ups tagged in the session's wire, tool environments released on
every path, bad settings rejected at construction."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.base.tags import program, use_tags
from lookahead_sdk.client.session import ServerSession
from lookahead_sdk.client.slack import BatchSizer, ChunkSizer, ForegroundRegistry, SlackGate
from lookahead_sdk.client.tool_environments import TempDirEnvironment, ToolEnvironments
from lookahead_sdk.client.warmers import LlamaCppWarmer, OpenAIWarmer
from lookahead_sdk.core.warmer import RequestShape

pytestmark = pytest.mark.timeout(30)


# -- OpenAIWarmer: the session's wire ---------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "present", "absent"),
    [
        # a hosted API answers 400 to unknown top-level fields: the header only
        ("none", (), ("program_id", "priority_class", "is_lookahead", "priority")),
        # vLLM schedules by the integer priority: a warm-up must not go at the agents' 0
        ("vllm", ("priority",), ("custom_params",)),
        # SGLang's scheduler sees only `priority` and `custom_params`
        ("sglang", ("priority", "custom_params"), ()),
        ("openai", ("program_id", "is_lookahead"), ("priority", "custom_params")),
    ],
)
async def test_openai_warmer_tags_in_the_session_wire(
    wire: str, present: tuple[str, ...], absent: tuple[str, ...]
) -> None:
    bodies: list[dict[str, Any]] = []
    headers: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        headers.append(request.headers)
        return httpx.Response(200, json={"usage": {"prompt_tokens": 3}})

    warmer = OpenAIWarmer(ServerSession("http://api.test", wire=wire))  # type: ignore[arg-type]
    warmer._client._transport.inner = httpx.MockTransport(handler)  # type: ignore[attr-defined]
    with use_tags(RequestTags("agent-7").lookahead("g1")):
        await warmer.warm([{"role": "user", "content": "hi"}], shape=RequestShape())
    await warmer.aclose()
    assert all(field in bodies[0] for field in present), bodies[0]
    assert not any(field in bodies[0] for field in absent), bodies[0]
    assert headers[0]["x-program-id"] == "agent-7"
    if wire in ("vllm", "sglang"):
        assert bodies[0]["priority"] == 10  # best-effort, below the agents' requests


def test_openai_warmer_from_a_url_keeps_the_openai_wire() -> None:
    assert OpenAIWarmer("http://127.0.0.1:1").session.wire == "openai"
    assert LlamaCppWarmer(ServerSession("http://127.0.0.1:1", wire="none")).wire == "llamacpp"


# -- tool environments --------------------------------------------------------------------------


class NotARouter(BaseHTTPRequestHandler):
    """Answers every GET 200 with a page that is not the router's program view."""

    gets = 0
    seen_two = threading.Event()

    def do_GET(self) -> None:
        body = b"<html>maintenance</html>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        type(self).gets += 1
        if type(self).gets >= 2:
            type(self).seen_two.set()

    def do_POST(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def not_a_router() -> Iterator[str]:
    NotARouter.gets, NotARouter.seen_two = 0, threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotARouter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


class Counting:
    def __init__(self, *, fail_prepare: bool = False) -> None:
        self.fail_prepare = fail_prepare
        self.prepares = self.teardowns = 0

    async def prepare(self) -> None:
        self.prepares += 1
        if self.fail_prepare:
            raise RuntimeError("docker daemon not running")

    async def teardown(self) -> None:
        self.teardowns += 1


async def test_a_router_page_that_is_not_json_does_not_skip_the_teardown(
    not_a_router: str,
) -> None:
    env = Counting()
    settings = ToolEnvironments([env], watch_interval_s=0.01)
    async with program("agent-1", release_to=[not_a_router], environments=settings):
        # Two polls: the watcher has read (and survived) the first page.
        assert await asyncio.to_thread(NotARouter.seen_two.wait, 10)
    assert env.teardowns == 1


async def test_a_scratch_dir_a_tool_removed_is_torn_down_at_once() -> None:
    env = TempDirEnvironment()
    await env.prepare()
    assert env.path is not None
    shutil.rmtree(env.path)
    await env.teardown()  # no FileNotFoundError to retry with backoff for seconds
    assert env.path is None


async def test_a_failed_prepare_releases_what_was_prepared() -> None:
    scratch, broken = TempDirEnvironment(), Counting(fail_prepare=True)
    with pytest.raises(RuntimeError, match="docker daemon"):
        async with program("agent-1", release_to=(), environments=[scratch, broken]):
            pytest.fail("the body must not run")
    assert scratch.path is None and broken.teardowns == 1


def test_a_failed_prepare_releases_what_was_prepared_in_sync_code() -> None:
    scratch, broken = TempDirEnvironment(), Counting(fail_prepare=True)
    with pytest.raises(RuntimeError, match="docker daemon"):
        with program("agent-1", release_to=(), environments=[scratch, broken]):
            pytest.fail("the body must not run")
    assert scratch.path is None and broken.teardowns == 1


# -- settings rejected at construction ---------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: ChunkSizer(target_s=float("nan")), "target_s"),
        (lambda: ChunkSizer(target_s=float("inf")), "target_s"),
        (lambda: ChunkSizer(initial_tokens_per_s=float("inf")), "initial_tokens_per_s"),
        (lambda: ChunkSizer(initial_tokens_per_s=float("nan")), "initial_tokens_per_s"),
        (lambda: BatchSizer(target_s=float("nan")), "target_s"),
        (lambda: LlamaCppWarmer("http://127.0.0.1:1", chunk_target_s=float("nan")), "target_s"),
        (lambda: SlackGate(ForegroundRegistry(), poll_s=float("inf")), "poll_s"),
        (lambda: ForegroundRegistry().expect("agent-1", within_s=float("nan")), "within_s"),
        (lambda: ServerSession.connect_blocking(None), "base_url"),  # type: ignore[arg-type]
        (lambda: asyncio.run(ServerSession.connect(None)), "base_url"),  # type: ignore[arg-type]
    ],
)
def test_bad_settings_fail_at_once_naming_the_field(make: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        make()


def test_a_nan_announcement_would_hold_best_effort_work() -> None:
    registry = ForegroundRegistry()
    with pytest.raises(ValueError):
        registry.expect("agent-1", within_s=float("nan"))
    assert registry.prefilling == 0 and not registry.announced("agent-1")

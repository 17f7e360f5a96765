"""A streamed reply is closed however its reading ends, bad settings fail at
construction naming the field, a malformed tool call fails validation instead of later."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import httpx
import pytest
from openai import AsyncOpenAI

from lookahead_sdk.base.completion import OpenAICompletionClient
from lookahead_sdk.base.messages import validate_messages
from lookahead_sdk.base.tags import program
from lookahead_sdk.client.session import ServerSession

pytestmark = pytest.mark.timeout(30)

CHUNK = (
    b'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
)


class EndlessReply(httpx.AsyncByteStream):
    """A reply that keeps decoding until its connection is closed."""

    def __init__(self) -> None:
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self.closed:
            yield CHUNK
            await asyncio.sleep(0.001)

    async def aclose(self) -> None:
        self.closed = True


def streaming_client(reply: EndlessReply) -> tuple[OpenAICompletionClient, ServerSession]:
    session = ServerSession("http://engine.test", wire="openai")
    http = session.async_http_client()
    http._transport.inner = httpx.MockTransport(  # type: ignore[attr-defined]
        lambda request: httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=reply
        )
    )
    openai = AsyncOpenAI(base_url="http://engine.test/v1", api_key="x", http_client=http)
    return OpenAICompletionClient(openai, "m"), session


async def test_a_cancelled_delta_callback_closes_the_stream_at_once() -> None:
    reply = EndlessReply()
    client, session = streaming_client(reply)
    delivering = asyncio.Event()

    async def on_delta(text: str, tool: str | None) -> None:
        delivering.set()
        await asyncio.Event().wait()  # e.g. a slow UI the caller gives up on

    # No collector run may close it for us: the reply must be closed by the client itself.
    gc.disable()
    try:
        task = asyncio.create_task(
            client.chat([{"role": "user", "content": "hi"}], max_tokens=50, on_delta=on_delta)
        )
        await delivering.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert reply.closed, "the server would keep decoding into an open connection"
        assert session.foreground.inflight == 0  # the slack gate no longer waits for it
    finally:
        gc.enable()


async def test_a_raising_delta_callback_closes_the_stream() -> None:
    reply = EndlessReply()
    client, session = streaming_client(reply)

    def on_delta(text: str, tool: str | None) -> None:
        raise RuntimeError("callback failed")

    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="callback failed"):
            await client.chat([{"role": "user", "content": "hi"}], max_tokens=50, on_delta=on_delta)
        assert reply.closed and session.foreground.inflight == 0
    finally:
        gc.enable()


@pytest.mark.parametrize("timeout_s", [-1, 0, float("nan"), float("inf"), "5", True])
def test_program_rejects_a_bad_release_timeout_before_its_body(timeout_s: object) -> None:
    ran = False
    with pytest.raises(ValueError, match="timeout_s"):
        with program("agent-1", release_to=["http://127.0.0.1:9"], timeout_s=timeout_s):  # type: ignore[arg-type]
            ran = True
    assert not ran


def test_a_tool_call_whose_function_is_not_an_object_fails_validation() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": "read_file"}]},
    ]
    with pytest.raises(ValueError, match=r"messages\[1\]\.tool_calls\[0\]\.function"):
        validate_messages(messages)
    # A call without a function part (some frameworks' partial calls) stays accepted.
    validate_messages([{"role": "assistant", "tool_calls": [{"id": "c1"}]}])

"""The first chunk of a reply that carries output is what ends a foreground request's wait: the
slack gate and the request timeline go by it, not by the first bytes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_sdk import RequestTags, ServerSession, use_tags
from lookahead_sdk.client.first_output import FirstOutput, event_carries_output
from lookahead_sdk.client.transport import AsyncTaggingTransport


def sse(event: dict | str) -> bytes:
    payload = event if isinstance(event, str) else json.dumps(event)
    return f"data: {payload}\n\n".encode()


ROLE_ONLY = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}
TOOL_CALL = {
    "choices": [
        {
            "index": 0,
            "delta": {"tool_calls": [{"index": 0, "function": {"name": "read_source"}}]},
        }
    ]
}
CONTENT = {"choices": [{"index": 0, "delta": {"content": "Reading"}}]}


def test_events_carry_output_in_every_streamed_format_we_serve() -> None:
    assert not event_carries_output(ROLE_ONLY)
    assert not event_carries_output({"choices": [{"delta": {"content": ""}}]})
    assert not event_carries_output({"choices": []})  # a usage-only chunk
    assert event_carries_output(TOOL_CALL) and event_carries_output(CONTENT)
    assert event_carries_output({"choices": [{"delta": {"reasoning_content": "hm"}}]})
    assert event_carries_output({"choices": [{"text": "x"}]})  # /v1/completions
    assert event_carries_output({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    assert event_carries_output({"content": "x", "stop": False})  # llama.cpp /completion
    assert not event_carries_output({"content": "", "stop": False})
    assert event_carries_output({"text": "x"})  # SGLang /generate
    assert event_carries_output({"error": {"message": "boom"}})


def test_the_first_output_is_found_across_pings_and_split_lines() -> None:
    first = FirstOutput(streamed=True)
    assert not first.feed(b": ping\n\n")
    assert not first.feed(sse(ROLE_ONLY))
    call = sse(TOOL_CALL)
    assert not first.feed(call[:17])  # the event's line split across two chunks
    assert first.feed(call[17:])
    assert first.feed(sse(CONTENT)) and first.seen
    whole = FirstOutput(streamed=False)  # a JSON reply arrives whole
    assert whole.feed(b'{"choices": [')
    done = FirstOutput(streamed=True)
    assert done.feed(sse("[DONE]"))  # an empty reply ends the wait too


@given(cut=st.integers(min_value=0, max_value=200), pieces=st.integers(min_value=1, max_value=9))
def test_any_chunking_of_a_stream_finds_the_same_event(cut: int, pieces: int) -> None:
    body = sse(ROLE_ONLY) + b": ping\n\n" + sse(TOOL_CALL) + sse(CONTENT)
    first_output_ends_at = len(sse(ROLE_ONLY) + b": ping\n\n" + sse(TOOL_CALL))
    size = max(1, (cut % len(body)) // pieces + 1)
    first = FirstOutput(streamed=True)
    fed = 0
    found_at = None
    while fed < len(body):
        chunk = body[fed : fed + size]
        fed += len(chunk)
        if first.feed(chunk) and found_at is None:
            found_at = fed
    # Found in the chunk holding the end of the tool call's line, not before it.
    assert found_at is not None
    assert first_output_ends_at - 1 <= found_at < first_output_ends_at - 1 + size


async def test_a_request_waits_until_its_first_output_not_its_first_bytes() -> None:
    """llama.cpp streams a tool call once parsed: the role chunk comes first, the call later.
    Until the call arrives the request still waits, and the gate holds best-effort work."""
    release = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield sse(ROLE_ONLY)
        await release.wait()
        yield sse(TOOL_CALL)
        yield sse("[DONE]")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    session = ServerSession("http://engine.test")
    gate = session.gate(admit="decode")  # decode: gated by the first output alone
    client = httpx.AsyncClient(
        transport=AsyncTaggingTransport(httpx.MockTransport(handler), session=session)
    )
    try:
        with use_tags(RequestTags("p")):
            async with client.stream(
                "POST", "http://engine.test/v1/chat/completions", json={"stream": True}
            ) as response:
                chunks = response.aiter_raw()
                assert await chunks.__anext__() == sse(ROLE_ONLY)
                assert session.foreground.prefilling == 1 and not gate.has_slack()
                release.set()
                await chunks.__anext__()
                assert session.foreground.prefilling == 0 and gate.has_slack()
                async for _ in chunks:
                    pass
    finally:
        await client.aclose()
    assert session.foreground.inflight == 0


def test_an_announced_model_call_holds_best_effort_work_until_it_is_sent() -> None:
    session = ServerSession("http://engine.test")
    registry, gate = session.foreground, session.gate(admit="decode")
    registry.expect("p")
    assert (registry.inflight, registry.prefilling) == (1, 1) and not gate.has_slack()
    request = registry.begin("q")  # another program's request is not the one announced
    assert registry.prefilling == 2
    request.end()
    request = registry.begin("p")
    assert registry.prefilling == 1  # the announced one, now in flight
    request.first_token()
    assert registry.prefilling == 0 and gate.has_slack()
    request.end()
    registry.expect("p")
    registry.expect("r")
    registry.begin(None).end()  # untagged: takes the oldest announcement
    assert registry.prefilling == 1
    with pytest.raises(ValueError, match="within_s"):
        registry.expect("p", within_s=0)


async def test_an_announced_model_call_that_never_comes_stops_holding() -> None:
    registry = ServerSession("http://engine.test").foreground
    registry.expect("p", within_s=0.05)
    assert registry.prefilling == 1
    while registry.prefilling:  # noqa: ASYNC110 (waits for the condition, however slow)
        await asyncio.sleep(0.01)
    assert registry.inflight == 0

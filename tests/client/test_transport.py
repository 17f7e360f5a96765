from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI

from lookahead_sdk import (
    RequestTags,
    program,
    tagged_async_http_client,
    tagged_http_client,
    use_tags,
)
from lookahead_sdk.client.transport import TaggingTransport

from ..support.recording_proxy import RecordingProxy


@pytest.fixture
def stub_server():
    with RecordingProxy() as server:
        yield server


def test_sync_openai_client_requests_carry_tags_and_header(stub_server: RecordingProxy) -> None:
    client = OpenAI(base_url=f"{stub_server.url}/v1", api_key="x", http_client=tagged_http_client())
    with program("agent-42", release_to=()) as tags:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "untagged"}])
    tagged, untagged = stub_server.requests
    assert tagged.body["program_id"] == "agent-42" and tagged.body["priority_class"] == "lc"
    assert tagged.headers["x-program-id"] == "agent-42" and tags.program_id == "agent-42"
    assert "program_id" not in untagged.body and "x-program-id" not in untagged.headers


async def test_async_streaming_requests_carry_tags_and_explicit_fields_win(
    stub_server: RecordingProxy,
) -> None:
    client = AsyncOpenAI(
        base_url=f"{stub_server.url}/v1", api_key="x", http_client=tagged_async_http_client()
    )
    lookahead = RequestTags("agent-7").lookahead("agent-7:summarize:s3", commit_deadline_ms=1234)
    with use_tags(lookahead):
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            extra_body={"priority_class": "lc"},  # an explicit per-call field is never overwritten
        )
        chunks = [chunk async for chunk in stream]
    assert chunks
    body = stub_server.requests[0].body
    assert body["stream"] is True and body["is_lookahead"] is True
    assert (
        body["lookahead_group_id"] == "agent-7:summarize:s3" and body["commit_deadline_ms"] == 1234
    )
    assert body["priority_class"] == "lc"


async def test_tags_follow_each_asyncio_task(stub_server: RecordingProxy) -> None:
    client = httpx.AsyncClient(transport=__import__("lookahead_sdk").AsyncTaggingTransport())

    async def call(program_id: str) -> None:
        with use_tags(RequestTags(program_id)):
            await asyncio.sleep(0.01)
            await client.post(f"{stub_server.url}/echo", json={"n": program_id})

    await asyncio.gather(*(call(f"p{i}") for i in range(5)))
    await client.aclose()
    assert sorted((r.body["n"], r.body["program_id"]) for r in stub_server.requests) == [
        (f"p{i}", f"p{i}") for i in range(5)
    ]


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (
            "sglang",
            {
                "priority": 10,
                "custom_params": {
                    "program_id": "p",
                    "priority_class": "be",
                    "is_lookahead": True,
                    "lookahead_group_id": "g",
                },
            },
        ),
        ("vllm", {"priority": 10}),
    ],
)
def test_engine_specific_wire_formats(wire: str, expected: dict) -> None:
    captured: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        captured.append(json.loads(request.content))
        return httpx.Response(200, json={})

    client = httpx.Client(transport=TaggingTransport(httpx.MockTransport(handler), wire=wire))
    with use_tags(RequestTags("p").lookahead("g")):
        client.post(
            "http://engine/v1/chat/completions",
            json={"custom_params": {"mine": 1}} if wire == "sglang" else {},
        )
    body = captured[0]
    for key, value in expected.items():
        if key == "custom_params":
            assert body[key] == {**value, "mine": 1}
        else:
            assert body[key] == value


def test_non_json_bodies_pass_through_untouched() -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200)

    client = httpx.Client(transport=TaggingTransport(httpx.MockTransport(handler)))
    with use_tags(RequestTags("p")):
        client.post(
            "http://x/upload",
            content=b"raw-bytes",
            headers={"content-type": "application/octet-stream"},
        )
    assert seen == [b"raw-bytes"]


def test_program_releases_on_exit_even_when_the_body_raises(stub_server: RecordingProxy) -> None:
    with pytest.raises(ZeroDivisionError), program("doomed", release_to=[stub_server.url]):
        raise ZeroDivisionError("the agent crashed")
    release = stub_server.requests[-1]
    assert release.path == "/programs/release" and release.body == {"program_id": "doomed"}


async def test_async_program_releases_and_restores_outer_tags(stub_server: RecordingProxy) -> None:
    from lookahead_sdk import current_tags

    with use_tags(RequestTags("outer")):
        async with program("inner", release_to=[stub_server.url]) as tags:
            assert current_tags() is tags
        assert current_tags().program_id == "outer"
    assert stub_server.requests[-1].body == {"program_id": "inner"}


def test_release_failure_does_not_mask_the_program() -> None:
    with program("p", release_to=["http://127.0.0.1:9"]) as tags:  # nothing listens on port 9
        pass
    assert tags.program_id == "p"


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"priority_class": "urgent"}, "priority_class"),
        ({"program_id": ""}, "program_id"),
        ({"is_lookahead": True}, "lookahead_group_id"),
        ({"commit_deadline_ms": -5}, "commit_deadline_ms"),
        ({"is_lookahead": "yes", "lookahead_group_id": "g"}, "is_lookahead"),
    ],
)
def test_bad_tags_name_the_field(fields: dict, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        RequestTags(**{"program_id": "p", **fields})


def test_unknown_wire_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="wire"):
        TaggingTransport(wire="grpc")  # type: ignore[arg-type]

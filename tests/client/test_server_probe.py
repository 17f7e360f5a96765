"""What a probe learns from a server (engine, window, wire, tokenizer), and that tag fields go
only where a server is known to take them: a hosted API that rejects unknown fields still
answers a tagged request, because tags are off there."""

from __future__ import annotations

import httpx
import pytest
from openai import AsyncOpenAI, BadRequestError

from lookahead_sdk import RequestTags, ServerSession, use_tags
from lookahead_sdk.base.protocol import PROGRAM_HEADER
from lookahead_sdk.base.tokens import CalibratedTokenCounter, ServerTokenCounter
from lookahead_sdk.client.session import ServerFacts
from lookahead_sdk.client.transport import tagged_async_http_client

from ..support.fake_servers import hosted_api, sglang_server, vllm_server


async def test_a_tagged_request_to_a_hosted_api_succeeds_because_tags_are_off_there() -> None:
    with hosted_api() as server:
        session = await ServerSession.connect(server.url)
        assert session.wire == "none" and session.facts.engine == "unknown"
        client = AsyncOpenAI(
            base_url=f"{server.url}/v1", api_key="k", http_client=session.async_http_client()
        )
        with use_tags(RequestTags("agent-7").lookahead("g1")):
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
        assert reply.choices[0].message.content == "ok"
        (body,) = server.bodies("/v1/chat/completions")
        assert "program_id" not in body and "is_lookahead" not in body
        assert server.headers("/v1/chat/completions")[0][PROGRAM_HEADER] == "agent-7"
        # The same request with tag fields forced into the body is what hosted APIs refuse.
        forced = AsyncOpenAI(
            base_url=f"{server.url}/v1",
            api_key="k",
            http_client=tagged_async_http_client(wire="openai"),
            max_retries=0,
        )
        with use_tags(RequestTags("agent-7")), pytest.raises(BadRequestError, match="Unrecognized"):
            await forced.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
        await client.close()
        await forced.close()


def test_an_unprobed_session_sends_no_tag_fields() -> None:
    assert ServerSession("http://127.0.0.1:9").wire == "none"


@pytest.mark.parametrize(
    ("server", "engine", "wire", "window", "dialect"),
    [
        (vllm_server(32768), "vllm", "vllm", 32768, "vllm"),
        (sglang_server(40960), "sglang", "sglang", 40960, "sglang"),
    ],
)
def test_vllm_and_sglang_are_recognised_with_their_window_and_tokenizer(
    server, engine: str, wire: str, window: int, dialect: str
) -> None:
    with server:
        session = ServerSession.connect_blocking(server.url)
        assert (session.facts.engine, session.wire, session.facts.window_tokens) == (
            engine,
            wire,
            window,
        )
        counter = session.token_counter()
        assert counter is not None and counter.dialect is not None
        assert counter.dialect.name == dialect
        assert counter.count_text("one two three four") == 4


def test_facts_from_replies_of_each_engine() -> None:
    llamacpp = ServerFacts.from_replies(
        {"data": [{"id": "smol", "owned_by": "llamacpp"}]},
        {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 4},
    )
    assert (llamacpp.engine, llamacpp.wire, llamacpp.window_tokens) == (
        "llamacpp",
        "llamacpp",
        8192,
    )
    sglang_pool_only = ServerFacts.from_replies(
        {"data": [{"id": "q", "owned_by": "sglang"}]},
        None,
        {"model_path": "q", "context_length": None, "max_total_num_tokens": 120000},
    )
    assert (sglang_pool_only.engine, sglang_pool_only.window_tokens) == ("sglang", 120000)
    router = ServerFacts.from_replies(
        {"data": [{"id": "q", "owned_by": "llamacpp"}]},
        None,
        None,
        {"policy": "thunder", "programs": [], "waiting": []},
    )
    assert (router.engine, router.wire) == ("lookahead", "openai")
    assert ServerFacts.from_replies(None, None).wire == "none"


def test_the_server_tokenizer_dialect_is_the_one_that_answers() -> None:
    with vllm_server() as server:
        counter = ServerTokenCounter(server.url, model="qwen")
        assert counter.probe() and counter.dialect is not None
        assert counter.dialect.name == "vllm"  # llama.cpp's form was refused first
        (first, second) = server.bodies("/tokenize")[:2]
        assert "content" in first and second["prompt"] == "probe" and second["model"] == "qwen"
        counter.close()
    with pytest.raises(httpx.HTTPError):
        ServerTokenCounter("http://127.0.0.1:9", dialect=counter.dialect).count_text("x")


class Words:
    name = "words"

    def count_text(self, text: str) -> int:
        return len(text.split())


def test_calibration_moves_counts_towards_reported_usage_and_stays_bounded() -> None:
    counter = CalibratedTokenCounter(Words(), smoothing=0.5)
    text = " ".join(["w"] * 100)
    assert counter.count_text(text) == 100
    for _ in range(12):
        counter.observe(counter.count_text(text), 150)  # the model says 1.5x as many
    assert counter.scale == pytest.approx(1.5, rel=0.01)
    assert counter.count_text(text) == pytest.approx(150, abs=2)
    counter.observe(10, 1000)  # too small a prompt to say anything
    assert counter.scale == pytest.approx(1.5, rel=0.01)
    for _ in range(40):
        counter.observe(counter.count_text(text), 100_000)
    assert counter.scale == counter.bounds[1]

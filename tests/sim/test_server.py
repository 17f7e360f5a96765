"""The simulated engine over real HTTP: a uvicorn server on a free port, httpx as the client."""

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from lookahead_sdk.scheduling import H100_QWEN3_8B, LatencyModel
from lookahead_sdk.sim import ClusterConfig, ModelTruth
from lookahead_sdk.sim.server import SimServeConfig, create_app

KV_TOKENS = 300_000
TIME_SCALE = 0.2  # five simulated seconds per wall second: fast tests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(cluster: ClusterConfig, **settings: Any) -> Iterator[str]:
    config = SimServeConfig(
        profile=H100_QWEN3_8B,
        cluster=cluster,
        time_scale=TIME_SCALE,
        truth=ModelTruth(LatencyModel(H100_QWEN3_8B)),
        default_max_tokens=8,
        **settings,
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the simulated server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with serving(ClusterConfig(kv_tokens=KV_TOKENS)) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as http:
        yield http


def conversation(n_turns: int, seed: int) -> list[dict]:
    return [{"role": "system", "content": f"You are agent {seed}."}] + [
        {
            "role": "user",
            "content": f"step {i} of agent {seed}: " + "lorem ipsum dolor sit amet " * 40,
        }
        for i in range(n_turns)
    ]


def test_health_models_and_server_info(client: httpx.Client) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/v1/models").json()["data"][0]["id"] == "sim-qwen3-8b"
    info = client.get("/get_server_info").json()
    assert info["max_total_num_tokens"] == KV_TOKENS
    assert info["simulator"]["profile"] == "h100-qwen3-8b"


def test_streaming_chat_sends_tokens_then_usage(client: httpx.Client) -> None:
    body = {
        "model": "any",
        "messages": conversation(2, seed=1),
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = []
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line.removeprefix("data: ")))
            assert line != "data: [DONE]" or chunks
    contents = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert [text for text in contents if text] and len([t for t in contents if t]) == 5
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == 5 and usage["prompt_tokens"] > 100


def test_prefill_only_generate_then_chat_hits_the_cache(client: httpx.Client) -> None:
    prefix = conversation(6, seed=2)
    ids = client.post(
        "/tokenize", json={"messages": prefix, "add_generation_prompt": False}
    ).json()["tokens"]
    warm = client.post(
        "/generate",
        json={
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 0},
            "priority": 10,
            "custom_params": {
                "priority_class": "be",
                "is_lookahead": True,
                "lookahead_group_id": "p2:s1",
            },
        },
    ).json()
    assert warm["meta_info"]["prompt_tokens"] == len(ids)
    assert warm["meta_info"]["completion_tokens"] == 0
    commit = client.post(
        "/v1/chat/completions",
        json={
            "model": "any",
            "messages": [*prefix, {"role": "user", "content": "next step"}],
            "max_tokens": 2,
        },
    ).json()
    cached = commit["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert len(ids) - 16 < cached <= len(ids)


def test_answer_is_cached_for_the_next_turn(client: httpx.Client) -> None:
    messages = conversation(3, seed=3)
    first = client.post(
        "/v1/chat/completions", json={"model": "m", "messages": messages, "max_tokens": 40}
    ).json()
    follow = [*messages, first["choices"][0]["message"], {"role": "user", "content": "continue"}]
    second = client.post(
        "/v1/chat/completions", json={"model": "m", "messages": follow, "max_tokens": 1}
    ).json()
    assert (
        second["usage"]["prompt_tokens_details"]["cached_tokens"]
        >= first["usage"]["prompt_tokens"] + 40 - 16
    )


def test_message_prefix_renders_to_a_token_prefix(client: httpx.Client) -> None:
    messages = conversation(4, seed=4)
    short = client.post(
        "/tokenize", json={"messages": messages[:3], "add_generation_prompt": False}
    ).json()["tokens"]
    full = client.post("/tokenize", json={"messages": messages}).json()["tokens"]
    assert full[: len(short)] == short and len(full) > len(short)
    text = client.post("/tokenize", json={"content": "hello world"}).json()
    assert text["count"] == len(text["tokens"]) > 0


def test_tags_from_every_carrier_are_counted_in_stats(client: httpx.Client) -> None:
    before = client.get("/stats").json()
    top_level = {
        "is_lookahead": True,
        "priority_class": "be",
        "lookahead_group_id": "p5:s1",
        "commit_deadline_ms": 60_000,
    }
    client.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": conversation(1, 5), "max_tokens": 1, **top_level},
    )
    client.post(
        "/generate",
        json={
            "text": "warm me " * 50,
            "sampling_params": {
                "max_new_tokens": 0,
                "custom_params": {**top_level, "lookahead_group_id": "p5:s2"},
            },
        },
        headers={"X-Program-Id": "p5"},
    )
    after = client.get("/stats").json()
    assert after["requests"].get("lookahead", 0) - before["requests"].get("lookahead", 0) == 2
    assert after["lookahead"]["completed"] - before["lookahead"]["completed"] == 2
    assert after["lookahead"]["admitted_chunks"] > before["lookahead"]["admitted_chunks"]


def test_promote_endpoint_raises_a_pending_lookahead(client: httpx.Client, base_url: str) -> None:
    async_body = {
        "input_ids": list(range(1000, 31_000)),
        "sampling_params": {"max_new_tokens": 0},
        "is_lookahead": True,
        "priority_class": "be",
        "lookahead_group_id": "p6:s1",
    }
    with httpx.Client(base_url=base_url, timeout=60) as other:
        done = threading.Event()
        threading.Thread(
            target=lambda: (other.post("/generate", json=async_body), done.set()), daemon=True
        ).start()
        promoted: list[str] = []
        deadline = time.monotonic() + 10
        while not promoted and time.monotonic() < deadline and not done.is_set():
            promoted = client.post(
                "/lookahead/promote", json={"lookahead_group_id": "p6:s1"}
            ).json()["promoted"]
        assert promoted, "the lookahead finished before it could be promoted"
        assert done.wait(30)
    assert client.get("/stats").json()["lookahead"]["promoted"] >= 1


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/chat/completions", {"messages": []}, "messages"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "priority_class": "urgent"},
            "priority_class",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "is_lookahead": True},
            "lookahead_group_id",
        ),
        ("/generate", {"input_ids": ["a"]}, "input_ids"),
        ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
        ("/generate", {"input_ids": list(range(50_000))}, "context length"),
        ("/tokenize", {"nothing": 1}, "messages"),
        ("/lookahead/promote", {}, "lookahead_group_id"),
    ],
)
def test_bad_requests_get_400_naming_the_field(client: httpx.Client, path, body, message) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


def test_disaggregated_engine_serves_chat_and_prefill_only_requests() -> None:
    with (
        serving(ClusterConfig(mode="disagg", kv_tokens=KV_TOKENS)) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        messages = conversation(2, seed=7)
        first = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 3})
        again = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 3})
        warm = http.post(
            "/generate",
            json={
                "text": "warm " * 100,
                "sampling_params": {"max_new_tokens": 0},
                "custom_params": {"is_lookahead": True, "lookahead_group_id": "g7"},
            },
        )
        stats = http.get("/stats").json()
    assert first.json()["usage"]["completion_tokens"] == 3
    assert again.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert warm.json()["meta_info"]["completion_tokens"] == 0
    assert stats["mode"] == "disagg" and set(stats["workers"]) == {"prefill", "decode"}
    assert stats["workers"]["decode"]["iterations"] >= 2 * 2  # tokens 2..3 of both chats
    assert stats["lookahead"]["completed"] == 1


# --- hardening: malformed input is a 400 naming the field, not a 500 or an accepted request ---

CHAT = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/chat/completions", {**CHAT, "stream": True, "stream_options": "x"}, "stream_options"),
        (
            "/v1/chat/completions",
            {**CHAT, "stream": True, "stream_options": {"include_usage": "yes"}},
            "stream_options.include_usage",
        ),
        ("/v1/chat/completions", {**CHAT, "stream": "no"}, "stream"),
        ("/v1/chat/completions", {**CHAT, "tools": "x"}, "tools"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "robot", "content": "beep"}]},
            "messages[0].role",
        ),
        ("/v1/chat/completions", {"messages": ["hello"]}, "messages[0]"),
        ("/generate", {"text": "x", "stream": "no"}, "stream"),
        ("/generate", {"input_ids": [5, -1]}, "input_ids[1]"),
        ("/generate", {"input_ids": [5, 10_000_000]}, "input_ids[1]"),
        ("/tokenize", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ],
)
def test_malformed_fields_get_400_naming_the_field(
    client: httpx.Client, path: str, body: dict, message: str
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_json_gets_400(client: httpx.Client, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    for path in ("/v1/chat/completions", "/generate"):
        response = client.post(
            path,
            content=f'{{"messages": {nested}, "input_ids": {nested}}}',
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 400, response.text


def test_a_body_over_the_limit_gets_413_by_length_and_by_streamed_size() -> None:
    limit = 64 * 1024
    with (
        serving(ClusterConfig(kv_tokens=KV_TOKENS), max_body_bytes=limit) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        text = "x" * (limit + 10)
        declared = http.post("/generate", json={"text": text})
        assert declared.status_code == 413 and str(limit) in declared.json()["error"]["message"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
            yield b'{"text": "'
            for _ in range(20):
                yield b"y" * 4096
            yield b'"}'

        streamed = http.post("/generate", content=chunks())
        assert streamed.status_code == 413
        assert http.post("/generate", json={"text": "small", "sampling_params": {
            "max_new_tokens": 1}}).status_code == 200  # fmt: skip


# --- a client that goes away aborts its simulated request ------------------------------------

LONG = 4000  # decode tokens: seconds of wall time at this time scale


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def worker_stats(client: httpx.Client) -> dict[str, Any]:
    return client.get("/stats").json()["workers"]["colocated"]


def test_disconnect_of_a_non_streamed_request_aborts_it(
    client: httpx.Client, base_url: str
) -> None:
    aborted = worker_stats(client)["aborted"]
    body = json.dumps({"messages": conversation(2, seed=11), "max_tokens": LONG}).encode()
    port = int(base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_until(lambda: worker_stats(client)["running"] == 1, 10, "the request to run")
    started = time.monotonic()
    wait_until(lambda: worker_stats(client)["running"] == 0, 3, "the abort")
    assert time.monotonic() - started < 3
    assert worker_stats(client)["aborted"] == aborted + 1


def test_disconnect_mid_stream_aborts_the_request(client: httpx.Client, base_url: str) -> None:
    aborted = worker_stats(client)["aborted"]
    body = {"messages": conversation(2, seed=12), "max_tokens": LONG, "stream": True}
    with httpx.Client(base_url=base_url, timeout=30) as other:
        with other.stream("POST", "/v1/chat/completions", json=body) as response:
            lines = response.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            assert worker_stats(client)["running"] == 1
    wait_until(lambda: worker_stats(client)["running"] == 0, 3, "the abort")
    stats = worker_stats(client)
    assert stats["aborted"] == aborted + 1 and stats["kv_reserved_tokens"] == 0

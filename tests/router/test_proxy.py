"""The router's HTTP proxy over real `lookahead-sdk sim serve` processes: routes, program
tracking, usage handling, identity, release, holding, lookahead refusal, auth and metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.base.tags import program as program_scope
from lookahead_sdk.router.config import ThunderConfig
from lookahead_sdk.router.proxy_call import Call
from lookahead_sdk.router.proxy_config import ProxyConfig
from tests.router.proxy_helpers import (
    SimProcess,
    StubBackend,
    conversation,
    program,
    router_running,
    sims_running,
    sse_payloads,
    stub_running,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sims() -> Iterator[list[SimProcess]]:
    with sims_running(2) as running:
        yield running


@pytest.fixture
def backends(sims: list[SimProcess]) -> tuple[str, ...]:
    return tuple(sim.url for sim in sims)


def chat(program_id: str | None, turns: int = 1, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": conversation(program_id or "anon", turns), "max_tokens": 3}
    if program_id is not None:
        body["program_id"] = program_id
    return {**body, **fields}


async def stream_lines(client: httpx.AsyncClient, path: str, body: dict, **kw: Any) -> list[str]:
    async with client.stream("POST", path, json=body, **kw) as response:
        assert response.status_code == 200
        return [line async for line in response.aiter_lines() if line]


class RecordingReply:
    """A client channel that records what the proxy sends, in order."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.started = False

    async def start(self, status: int, headers: Any) -> None:
        self.started = True
        self.events.append(f"start {status}")

    async def send(self, data: bytes, *, more: bool) -> None:
        self.events.append("bytes" if more else "last bytes")


@pytest.mark.parametrize("stream", [False, True])
async def test_the_last_bytes_go_out_after_the_table_records_how_the_request_ended(
    backends, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    async with router_running(ProxyConfig(backends)) as router:
        proxy, events = router.proxy, []
        finish = proxy._finish

        def recorded_finish(request_id: str, **outcome: Any) -> None:
            finish(request_id, **outcome)
            events.append("finished")

        monkeypatch.setattr(proxy, "_finish", recorded_finish)
        body = chat("p-order", stream=stream)
        call = Call("chat", body, json.dumps(body).encode(), [], RequestTags.from_request(body, {}))
        await proxy.serve(call, RecordingReply(events))
        assert events[0] == "start 200" and events[-2:] == ["finished", "last bytes"], events
        view = proxy.program_view("p-order")
        assert view is not None and view["steps"] == 1 and not view["in_flight"]


async def test_chat_tracks_the_program_with_usage_streamed_or_not(backends) -> None:
    async with router_running(ProxyConfig(backends)) as router, router.client() as client:
        first = await client.post("/v1/chat/completions", json=chat("p-chat"))
        assert first.status_code == 200
        usage = first.json()["usage"]
        view = await program(client, "p-chat")
        assert view["steps"] == 1 and view["phase"] == "acting" and view["status"] == "active"
        assert view["tokens"] == usage["total_tokens"]
        assert first.headers["x-router-backend"] == view["backend"]

        # The client did not ask for usage: the proxy asked for it upstream and strips it.
        lines = await stream_lines(
            client, "/v1/chat/completions", chat("p-chat", turns=2, stream=True)
        )
        assert lines[-1] == "data: [DONE]"
        payloads = sse_payloads(lines)
        assert payloads and all(p["choices"] and "usage" not in p for p in payloads)
        view = await program(client, "p-chat")
        assert view["steps"] == 2 and view["tokens"] > usage["total_tokens"]

        # The client asked for usage: it gets the usage chunk, and the program its total.
        body = chat("p-chat", turns=3, stream=True, stream_options={"include_usage": True})
        payloads = sse_payloads(await stream_lines(client, "/v1/chat/completions", body))
        assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["total_tokens"] > 0
        view = await program(client, "p-chat")
        assert view["tokens"] == payloads[-1]["usage"]["total_tokens"] and view["steps"] == 3


async def test_generate_counts_meta_info_tokens(backends) -> None:
    async with router_running(ProxyConfig(backends)) as router, router.client() as client:
        body = {"text": "hello " * 50, "sampling_params": {"max_new_tokens": 2}}
        whole = await client.post("/generate", json=body, headers={"X-Program-Id": "p-gen"})
        meta = whole.json()["meta_info"]
        view = await program(client, "p-gen")
        assert view["tokens"] == meta["prompt_tokens"] + meta["completion_tokens"]
        streamed = await stream_lines(
            client, "/generate", {**body, "stream": True}, headers={"X-Program-Id": "p-gen"}
        )
        last = sse_payloads(streamed)[-1]["meta_info"]
        view = await program(client, "p-gen")
        assert view["tokens"] == last["prompt_tokens"] + last["completion_tokens"]
        assert view["steps"] == 2


async def test_completions_route_streams_and_strips_usage() -> None:
    async with (
        stub_running(StubBackend()) as stub,
        router_running(ProxyConfig((stub.url,))) as router,
        router.client() as client,
    ):
        body = {"prompt": "once upon a time", "program_id": "p-cmp", "stream": True}
        payloads = sse_payloads(await stream_lines(client, "/v1/completions", body))
        assert [p["choices"][0]["text"] for p in payloads] == ["a", "b", "c"]
        assert stub.seen[-1]["body"]["stream_options"] == {"include_usage": True}
        assert (await program(client, "p-cmp"))["tokens"] == 103
        whole = await client.post("/v1/completions", json={**body, "stream": False})
        assert whole.json()["usage"]["total_tokens"] == 103
        assert "stream_options" not in stub.seen[-1]["body"]


async def test_release_is_idempotent_and_answers_what_the_sdk_sends(backends) -> None:
    async with router_running(ProxyConfig(backends)) as router, router.client() as client:
        await client.post("/v1/chat/completions", json=chat("p-rel"))
        first = await client.post("/programs/release", json={"program_id": "p-rel"})
        again = await client.post("/programs/release", json={"program_id": "p-rel"})
        assert first.json() == {"program_id": "p-rel", "released": True}
        assert again.json() == {"program_id": "p-rel", "released": False}
        view = await program(client, "p-rel")
        assert view["terminated"] and view["cause"] == "release" and not view["lease_expired"]
        listed = (await client.get("/programs")).json()["programs"]
        assert "p-rel" not in [p["program_id"] for p in listed]
        bad = await client.post("/programs/release", json={"program_id": ""})
        assert bad.status_code == 400

        async with program_scope("p-sdk", release_to=[router.url]) as tags:
            await client.post("/v1/chat/completions", json=chat(None), headers=tags.headers())
            assert (await program(client, "p-sdk"))["steps"] == 1
        assert (await program(client, "p-sdk"))["terminated"]


async def test_identity_from_headers_and_dynamo_fields(backends) -> None:
    async with router_running(ProxyConfig(backends)) as router, router.client() as client:
        await client.post("/v1/chat/completions", json=chat(None), headers={"X-Program-Id": "h1"})
        await client.post(
            "/v1/chat/completions", json=chat(None), headers={"x-dynamo-session-id": "dyn-s"}
        )
        await client.post(
            "/v1/chat/completions",
            json=chat(None, nvext={"agent_context": {"trajectory_id": "traj-9"}}),
        )
        body_tag = chat(None, custom_params={"program_id": "cp-1"})
        await client.post("/v1/chat/completions", json=body_tag)
        ids = {p["program_id"] for p in (await client.get("/programs")).json()["programs"]}
        assert ids == {"h1", "dyn-s", "traj-9", "cp-1"}
        bad = await client.post("/v1/chat/completions", json=chat("p", priority_class="urgent"))
        assert bad.status_code == 400 and "priority_class" in bad.json()["error"]["message"]


async def test_untagged_requests_pass_through_untracked(backends) -> None:
    async with router_running(ProxyConfig(backends)) as router, router.client() as client:
        answers = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=chat(None)) for _ in range(6))
        )
        assert all(a.status_code == 200 for a in answers)
        assert {a.headers["x-router-backend"] for a in answers} <= set(backends)
        assert (await client.get("/programs")).json()["programs"] == []
        metrics = (await client.get("/metrics")).text
        assert 'lookahead_router_requests_total{route="chat",outcome="ok"} 6' in metrics
        models = await client.get("/v1/models")
        assert models.json()["data"][0]["id"] == "sim-qwen3-8b"


def one_backend_of_1000_tokens(sim: SimProcess, **thunder: Any) -> ProxyConfig:
    """A backend the router believes holds 1,000 KV tokens: two ~600-token programs do not fit
    together. No decay: only a release frees room."""
    return ProxyConfig(
        (sim.url,),
        capacities={sim.url: 1000},
        thunder=ThunderConfig(decay_half_life_s=0.0, **thunder),
    )


def long_prompt(program_id: str) -> list[dict[str, str]]:
    return conversation(program_id, turns=1, words=280)  # ~600 tokens


async def test_a_held_request_goes_when_capacity_frees(sims) -> None:
    async with (
        router_running(one_backend_of_1000_tokens(sims[0])) as router,
        router.client() as client,
    ):
        first = await client.post(
            "/v1/chat/completions", json={"messages": long_prompt("A"), "program_id": "A"}
        )
        assert first.status_code == 200
        assert float(first.headers["x-router-held-ms"]) < 100  # forwarded at once
        held = asyncio.create_task(
            client.post(
                "/v1/chat/completions", json={"messages": long_prompt("B"), "program_id": "B"}
            )
        )
        await wait_for(lambda: router.proxy.held_requests == 1, 10, "B's request to be held")
        view = await program(client, "B")
        assert view["status"] == "paused" and view["held"] and view["phase"] == "reasoning"
        await asyncio.sleep(0.3)  # a few ticks: nothing frees room, B stays held
        assert not held.done()
        await client.post("/programs/release", json={"program_id": "A"})
        answer = await asyncio.wait_for(held, 10)
        assert answer.status_code == 200
        assert float(answer.headers["x-router-held-ms"]) >= 300  # how long it waited for room
        assert (await program(client, "B"))["steps"] == 1


async def test_best_effort_lookahead_of_a_paused_program_gets_409(sims) -> None:
    async with (
        router_running(one_backend_of_1000_tokens(sims[0])) as router,
        router.client() as client,
    ):
        await client.post(
            "/v1/chat/completions", json={"messages": long_prompt("A"), "program_id": "A"}
        )
        lookahead = {"is_lookahead": True, "lookahead_group_id": "A:1", "priority_class": "be"}
        live = await client.post(
            "/v1/chat/completions", json={**chat("A"), **lookahead, "max_tokens": 1}
        )
        assert live.status_code == 200  # A is active: its lookahead runs where A lives
        assert live.headers["x-router-backend"] == sims[0].url

        held_main = asyncio.create_task(
            client.post(
                "/v1/chat/completions", json={"messages": long_prompt("B"), "program_id": "B"}
            )
        )
        await wait_for(lambda: router.proxy.held_requests == 1, 10, "B to be held")
        refused = await client.post(
            "/v1/chat/completions",
            json={**chat("B"), **lookahead, "lookahead_group_id": "B:1"},
        )
        assert refused.status_code == 409
        assert refused.json()["error"]["type"] == "program_paused"
        unknown = await client.post(
            "/generate",
            json={"text": "x", **lookahead, "program_id": "never-seen", "lookahead_group_id": "n"},
        )
        assert unknown.status_code == 409

        # A promoted lookahead (sent latency-critical at commit) waits with its program.
        promoted = asyncio.create_task(
            client.post(
                "/v1/chat/completions",
                json={
                    **chat("B"),
                    **lookahead,
                    "lookahead_group_id": "B:2",
                    "priority_class": "lc",
                },
            )
        )
        await wait_for(lambda: router.proxy.held_requests == 2, 10, "the promoted one held")
        await client.post("/programs/release", json={"program_id": "A"})
        answers = await asyncio.wait_for(asyncio.gather(held_main, promoted), 10)
        assert [a.status_code for a in answers] == [200, 200]


async def test_api_key_guards_every_route_but_health(backends) -> None:
    config = ProxyConfig(backends, api_key="s3cret")
    async with router_running(config) as router, router.client() as client:
        assert (await client.get("/health")).status_code == 200
        for method, path in (("GET", "/programs"), ("GET", "/metrics"), ("GET", "/v1/models")):
            denied = await client.request(method, path)
            assert denied.status_code == 401 and denied.headers["www-authenticate"] == "Bearer"
        assert (await client.post("/v1/chat/completions", json=chat("k"))).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (await client.get("/programs", headers=wrong)).status_code == 401
        good = {"Authorization": "Bearer s3cret"}
        answer = await client.post("/v1/chat/completions", json=chat("k"), headers=good)
        assert answer.status_code == 200
        assert (await client.get("/programs", headers=good)).json()["programs"]


async def test_metrics_exposition(backends) -> None:
    async with router_running(ProxyConfig(backends)) as router, router.client() as client:
        await client.post("/v1/chat/completions", json=chat("m1"))
        await client.post("/v1/chat/completions", json=chat("m2", max_tokens=2))
        response = await client.get("/metrics")
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        samples = dict(
            line.rsplit(" ", 1) for line in response.text.splitlines() if not line.startswith("#")
        )
        assert samples['lookahead_router_programs{status="active",phase="acting"}'] == "2"
        assert samples["lookahead_router_held_requests"] == "0"
        assert samples['lookahead_router_requests_total{route="chat",outcome="ok"}'] == "2"
        for backend in backends:
            assert samples[f'lookahead_router_backend_capacity_tokens{{backend="{backend}"}}'] == (
                "200000"
            )
            assert f'lookahead_router_backend_accounted_tokens{{backend="{backend}"}}' in samples
        for name in ("forced_admits", "pauses", "restores", "migrations", "retries"):
            assert f"lookahead_router_{name}_total" in samples


async def test_bad_bodies_are_refused(backends) -> None:
    config = ProxyConfig(backends, max_body_bytes=4096)
    async with router_running(config) as router, router.client() as client:
        big = await client.post("/v1/chat/completions", json=chat("b", turns=40))
        assert big.status_code == 413
        not_json = await client.post("/v1/chat/completions", content=b"{nope")
        assert not_json.status_code == 400
        nested = "[" * 2000 + "]" * 2000  # under the size limit, too deep for the parser
        deep = await client.post("/v1/chat/completions", content=f'{{"x": {nested}}}'.encode())
        assert deep.status_code == 400 and "nested" in deep.json()["error"]["message"]
        assert (await client.get("/nowhere")).status_code == 404
        assert (await client.get("/v1/chat/completions")).status_code == 405
        assert json.loads((await client.get("/programs/none")).text)["error"]["type"] == (
            "not_found"
        )


async def test_llamacpp_backends_get_capacity_from_slots_and_programs_get_slots() -> None:
    async with (
        stub_running(StubBackend(capacity_tokens=8192, llamacpp_slots=4)) as stub,
        router_running(ProxyConfig((stub.url,))) as router,
        router.client() as client,
    ):
        assert router.proxy.core.capacity_tokens(stub.url) == 8192
        body = {"prompt": "hello", "max_tokens": 1}
        for program_id in ("A", "B", "A"):
            await client.post("/v1/completions", json={**body, "program_id": program_id})
        lookahead = {"is_lookahead": True, "lookahead_group_id": "A:1", "priority_class": "be"}
        await client.post("/v1/completions", json={**body, "program_id": "A", **lookahead})
        await client.post("/v1/completions", json={**body, "program_id": "B", "id_slot": 3})
        assert [seen["body"]["id_slot"] for seen in stub.seen] == [0, 1, 0, 2, 3]
        await client.post("/programs/release", json={"program_id": "A"})
        await client.post("/v1/completions", json={**body, "program_id": "C"})
        assert stub.seen[-1]["body"]["id_slot"] == 0  # A's slot was freed
        # A dead-context mark speaks of the slot its client named; none named, it is dropped.
        dead = {**body, "program_id": "C", "discard_slot_prompt": True}
        await client.post("/v1/completions", json=dead)
        assert stub.seen[-1]["body"]["id_slot"] == 0
        assert "discard_slot_prompt" not in stub.seen[-1]["body"]
        await client.post("/v1/completions", json={**dead, "id_slot": 3})
        assert stub.seen[-1]["body"]["discard_slot_prompt"] is True

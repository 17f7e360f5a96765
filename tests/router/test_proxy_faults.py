"""Faults through the router, against real `lookahead-sdk sim serve` processes: a backend
SIGKILLed mid-stream, a client that disconnects (streaming or held), a backend answering 5xx
before its first byte and failing its health check, every backend down, a backend unreachable
at start; and what is no fault: a client closing its connection once it has the whole answer."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from lookahead_sdk.router.config import ThunderConfig
from lookahead_sdk.router.http_app import AsgiReply, RouterApp
from lookahead_sdk.router.proxy import RouterProxy
from lookahead_sdk.router.proxy_config import ProxyConfig
from tests.router.proxy_helpers import (
    SimProcess,
    StubBackend,
    conversation,
    free_port,
    program,
    router_running,
    sims_running,
    spawn_sim,
    sse_payloads,
    stub_running,
    wait_for,
    wait_healthy,
)

pytestmark = pytest.mark.timeout(120)

SLOW = {"time_scale": 1.0}  # real-time simulation: a 3,000-token answer takes ~30 s


def chat(program_id: str, turns: int = 1, **fields: Any) -> dict[str, Any]:
    return {"messages": conversation(program_id, turns), "program_id": program_id, **fields}


async def sim_stats(sim: SimProcess) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as client:
        return (await client.get(f"{sim.url}/stats")).json()


async def running_at(sim: SimProcess) -> int:
    return (await sim_stats(sim))["workers"]["colocated"]["running"]


def metric(text: str, sample: str) -> str | None:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return line.rsplit(" ", 1)[1]
    return None


async def test_backend_killed_mid_stream_ends_the_stream_and_requeues_the_program() -> None:
    with sims_running(2, **SLOW) as sims:
        config = ProxyConfig(tuple(s.url for s in sims), retry_s=60)
        async with router_running(config) as router, router.client() as client:
            body = chat("P", max_tokens=3000, stream=True)
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                victim = next(s for s in sims if s.url == response.headers["x-router-backend"])
                lines = response.aiter_lines()
                first = await anext(line async for line in lines if line.startswith("data: "))
                assert "content" in first
                victim.kill()
                rest = [line async for line in lines if line]
            error = sse_payloads(rest)[-1]["error"]
            assert error["type"] == "backend_error" and victim.url in error["message"]

            # Requeued, never lost: off the dead backend (and, room allowing, already restored
            # onto the survivor), out of reasoning.
            survivor = next(s for s in sims if s is not victim)
            view = await program(client, "P")
            assert view["phase"] == "acting" and view["in_flight"] == []
            assert view["backend"] in (None, survivor.url)
            again = await client.post("/v1/chat/completions", json=chat("P", 2, max_tokens=2))
            assert again.status_code == 200 and again.headers["x-router-backend"] == survivor.url
            view = await program(client, "P")
            assert view["status"] == "active" and view["backend"] == survivor.url
            metrics = (await client.get("/metrics")).text
            kind = f'lookahead_router_upstream_errors_total{{backend="{victim.url}",kind="stream"}}'
            assert metric(metrics, kind) == "1"
            assert metric(metrics, f'lookahead_router_backend_up{{backend="{victim.url}"}}') == "0"


async def test_client_disconnect_mid_stream_cancels_upstream_and_ends_reasoning() -> None:
    with sims_running(1, **SLOW) as sims:
        (sim,) = sims
        async with router_running(ProxyConfig((sim.url,))) as router, router.client() as client:
            body = chat("D", max_tokens=3000, stream=True)
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                lines = response.aiter_lines()
                await anext(line async for line in lines if line.startswith("data: "))
                assert (await program(client, "D"))["phase"] == "reasoning"
                assert await running_at(sim) == 1
            # Leaving the block closed the connection mid-stream.
            await wait_for(lambda: _zero(running_at(sim)), 5, "the upstream request to stop")
            assert (await sim_stats(sim))["workers"]["colocated"]["aborted"] == 1
            await wait_for(lambda: _acting(client, "D"), 5, "the program to leave reasoning")
            view = await program(client, "D")
            assert view["in_flight"] == [] and view["steps"] == 0
            metrics = (await client.get("/metrics")).text
            assert metric(metrics, 'lookahead_router_requests_total{route="chat",outcome='
                          '"disconnected"}') == "1"  # fmt: skip


async def _zero(value: Any) -> bool:
    return await value == 0


async def _acting(client: httpx.AsyncClient, program_id: str) -> bool:
    view = await program(client, program_id)
    return view is not None and view["phase"] == "acting"


async def test_client_disconnect_while_held_forwards_nothing() -> None:
    with sims_running(1) as sims:
        (sim,) = sims
        config = ProxyConfig(
            (sim.url,), capacities={sim.url: 1000}, thunder=ThunderConfig(decay_half_life_s=0)
        )
        async with router_running(config) as router, router.client() as client:
            long = conversation("x", 1, words=280)  # ~600 tokens: two do not fit in 1,000
            await client.post("/v1/chat/completions", json={"messages": long, "program_id": "A"})
            requests_before = (await sim_stats(sim))["requests"]
            held = asyncio.create_task(
                client.post("/v1/chat/completions", json={"messages": long, "program_id": "B"})
            )
            await wait_for(lambda: router.proxy.held_requests == 1, 10, "B to be held")
            held.cancel()  # the client gives up: its connection closes
            await wait_for(lambda: router.proxy.held_requests == 0, 5, "the hold to be dropped")
            view = await program(client, "B")
            assert view["held"] == [] and view["phase"] == "acting"
            await client.post("/programs/release", json={"program_id": "A"})
            await asyncio.sleep(2 * config.tick_s)  # a restore pass or two: nothing to send
            assert (await sim_stats(sim))["requests"] == requests_before


async def test_5xx_from_an_unhealthy_backend_is_retried_on_another_backend() -> None:
    with sims_running(1) as sims:
        (sim,) = sims
        broken = StubBackend(capacity_tokens=1_000_000, status=500, health_status=503)
        async with stub_running(broken) as stub:
            # The stub has the most room: a new program is placed there first.
            config = ProxyConfig((stub.url, sim.url), retry_s=60)
            async with router_running(config) as router, router.client() as client:
                answer = await client.post("/v1/chat/completions", json=chat("R", max_tokens=2))
                assert answer.status_code == 200
                assert answer.headers["x-router-backend"] == sim.url
                assert len(stub.seen) == 1
                view = await program(client, "R")
                assert view["backend"] == sim.url and view["steps"] == 1
                metrics = (await client.get("/metrics")).text
                assert metric(metrics, "lookahead_router_retries_total") == "1"
                errors = (
                    f'lookahead_router_upstream_errors_total{{backend="{stub.url}",kind="status"}}'
                )
                assert metric(metrics, errors) == "1"
                assert (await client.get("/health")).json()["backends_down"] == [stub.url]


async def test_every_backend_down_gives_502_naming_them_then_503_after_the_hold() -> None:
    with sims_running(2) as sims:
        config = ProxyConfig(
            tuple(s.url for s in sims), retry_s=60, thunder=ThunderConfig(hold_timeout_s=0.5)
        )
        async with router_running(config) as router, router.client() as client:
            for sim in sims:
                sim.kill()
            answer = await client.post("/v1/chat/completions", json=chat("Z"))
            assert answer.status_code == 502
            message = answer.json()["error"]["message"]
            assert all(sim.url in message for sim in sims), message
            assert (await program(client, "Z"))["phase"] == "acting"
            # With every backend down a request is held, then refused at the hold timeout.
            later = await client.post("/v1/chat/completions", json=chat("Z", 2))
            assert later.status_code == 503 and later.json()["error"]["type"] == "no_backend"
            untracked = await client.post("/v1/chat/completions", json={"messages": [
                {"role": "user", "content": "hi"}]})  # fmt: skip
            assert untracked.status_code == 503
            assert (await client.get("/health")).status_code == 503


async def test_a_backend_unreachable_at_start_is_retried_and_joins() -> None:
    with sims_running(1) as sims:
        late_port = free_port()
        late_url = f"http://127.0.0.1:{late_port}"
        config = ProxyConfig((sims[0].url, late_url), retry_s=0.2, retry_max_s=0.5)
        async with router_running(config) as router, router.client() as client:
            health = (await client.get("/health")).json()
            assert health["backends_down"] == [late_url]
            answer = await client.post("/v1/chat/completions", json=chat("U", max_tokens=1))
            assert answer.headers["x-router-backend"] == sims[0].url
            late = spawn_sim(late_port)
            try:
                await asyncio.to_thread(wait_healthy, [late])
                await wait_for(lambda: _up(client, late_url), 10, "the late backend to join")
            finally:
                late.kill()


async def _up(client: httpx.AsyncClient, url: str) -> bool:
    return url in (await client.get("/health")).json()["backends_up"]


async def test_a_client_closing_at_done_is_answered_not_disconnected() -> None:
    """The OpenAI SDK closes its connection as soon as it reads [DONE]; a backend ending its
    stream a moment later (any busy machine) must not turn that into a disconnect: each request
    is `ok` and the program's tokens are the usage's total."""
    async with (
        stub_running(StubBackend(end_after_done_s=0.3)) as stub,
        router_running(ProxyConfig((stub.url,))) as router,
    ):
        client = AsyncOpenAI(base_url=f"{router.url}/v1", api_key="-", max_retries=0)
        try:
            for _ in range(3):
                stream = await client.completions.create(
                    model="stub", prompt="hi", max_tokens=3, stream=True,
                    extra_body={"program_id": "C"},
                )  # fmt: skip
                assert "".join([chunk.choices[0].text async for chunk in stream]) == "abc"
        finally:
            await client.close()
        counters = router.proxy.counters
        await wait_for(lambda: sum(counters.requests.values()) == 3, 10, "3 requests to end")
        assert counters.requests == {("completions", "ok"): 3}
        view = router.proxy.core.program("C")
        assert view is not None and view.tokens == 103 and view.steps == 3


async def test_a_disconnect_after_the_whole_response_lets_the_work_finish() -> None:
    """uvicorn reports `http.disconnect` as soon as a response is complete: the work left after
    the last byte (reading the usage, closing the upstream response) is not cancelled."""
    sent: list[dict[str, Any]] = []
    complete = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message["more_body"]:
            complete.set()

    async def receive() -> dict[str, Any]:
        await complete.wait()
        return {"type": "http.disconnect"}

    reply = AsgiReply(send)
    finished: list[bool] = []

    async def work() -> None:
        await reply.start(200, [])
        await reply.send(b"{}", more=False)
        for _ in range(5):  # what a response's close may await
            await asyncio.sleep(0.01)
        finished.append(True)

    app = RouterApp(RouterProxy(ProxyConfig(("http://127.0.0.1:9",)), count_text=len))
    await app._until_disconnect(work(), receive, reply)
    assert finished == [True] and len(sent) == 2

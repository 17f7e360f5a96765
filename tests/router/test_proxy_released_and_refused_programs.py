"""Programs that are gone by the time the proxy acts: a held request whose program is released
after a restore forwarded it but before its handler ran is answered 409 and sent nowhere (it
took a llama.cpp slot nobody freed), and requests the policy refused before their program
entered the table leave no prompt-tracking state behind (no `Teardown` ever forgets it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lookahead_sdk.router.config import ThunderConfig
from lookahead_sdk.router.proxy_config import ProxyConfig
from tests.router.proxy_helpers import (
    StubBackend,
    free_port,
    router_running,
    stub_running,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)


def completion(program_id: str) -> dict[str, Any]:
    return {"prompt": "hi", "max_tokens": 1, "program_id": program_id}


async def test_a_held_request_of_a_program_released_before_its_turn_is_not_sent() -> None:
    stub = StubBackend(capacity_tokens=8192, llamacpp_slots=2)
    thunder = ThunderConfig(tick_s=60)  # no tick restores C meanwhile
    async with (
        stub_running(stub),
        router_running(ProxyConfig((stub.url,), thunder=thunder), count_text=len) as router,
        router.client() as client,
    ):
        proxy = router.proxy
        for program_id in ("A", "B"):  # one slot each: the server is full
            assert (await client.post("/v1/completions", json=completion(program_id))).is_success
        held = asyncio.create_task(client.post("/v1/completions", json=completion("C")))
        await wait_for(lambda: proxy.held_requests == 1, 10, "C's request to be held")
        sent = len(stub.seen)
        # One step of the event loop: A's release restores C (its request is forwarded), then C
        # is released, before C's handler runs.
        assert proxy.release("A") and proxy.release("C")
        answer = await held
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["type"] == "program_released"
        assert len(stub.seen) == sent  # nothing reached the backend
        assert proxy.core.program("C") is None
        slots = proxy._backends[stub.url].slots
        assert slots is not None and len(slots) == 1  # B's slot only


async def test_requests_refused_before_their_program_exists_leave_no_prompt_state() -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: no backend is ever up
    config = ProxyConfig((down,), policy="round-robin", retry_s=60)
    async with router_running(config, count_text=len) as router, router.client() as client:
        for index in range(5):
            body = {"messages": [{"role": "user", "content": "hi"}], "program_id": f"p{index}"}
            answer = await client.post("/v1/chat/completions", json=body)
            assert answer.status_code == 503, answer.text
            await client.post("/programs/release", json={"program_id": f"p{index}"})
        assert router.proxy.core.programs() == []
        assert router.proxy.tracked_contexts == 0

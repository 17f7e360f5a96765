"""Soak: 1,000 agent programs x 5 steps, 64 concurrent clients, through the real router over two
`lookahead-sdk sim serve` processes whose KV the router believes is tight (so programs are
paused, held and restored along the way). At the end nothing is left behind: no program in the
table, no held request, no task of the proxy but its tick loop, no prompt-tracking state; every
request was answered exactly once and reached a backend exactly once; memory growth is bounded.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from collections import Counter
from typing import Any

import httpx
import pytest

from lookahead_sdk.router.config import ThunderConfig
from lookahead_sdk.router.proxy import TASK_PREFIX
from lookahead_sdk.router.proxy_config import ProxyConfig
from tests.router.proxy_helpers import (
    Router,
    proxy_tasks,
    router_running,
    sims_running,
    wait_for,
)

PROGRAMS = 1000
STEPS = 5
CLIENTS = 64
WARMUP_PROGRAMS = 100  # before memory tracing starts (connection pools, caches fill up)
CAPACITY = 12_000  # per backend, as the router sees it: 64 live programs need about 5x this
MEMORY_BOUND = 16 * 2**20

pytestmark = pytest.mark.timeout(900)


def step_body(program_id: str, step: int) -> dict[str, Any]:
    messages: list[dict[str, str]] = [
        {"role": "system", "content": f"You are agent {program_id}. " + "rules " * 40},
        {"role": "user", "content": f"task of {program_id}: " + "describe the plan " * 30},
    ]
    for done in range(step):
        messages.append({"role": "assistant", "content": f"call tool {done}"})
        messages.append({"role": "tool", "content": f"result {done} " + "data " * 300})
    body: dict[str, Any] = {"messages": messages, "max_tokens": 4, "stream": step % 2 == 1}
    if step % 3 != 2:
        body["program_id"] = program_id  # otherwise it travels in the X-Program-Id header
    return body


async def run_program(client: httpx.AsyncClient, program_id: str, answers: Counter[str]) -> None:
    for step in range(STEPS):
        body = step_body(program_id, step)
        headers = {} if "program_id" in body else {"X-Program-Id": program_id}
        if body["stream"]:
            async with client.stream(
                "POST", "/v1/chat/completions", json=body, headers=headers
            ) as response:
                lines = [line async for line in response.aiter_lines() if line]
            assert response.status_code == 200 and lines[-1] == "data: [DONE]", lines[-3:]
        else:
            response = await client.post("/v1/chat/completions", json=body, headers=headers)
            assert response.status_code == 200, response.text
        answers[f"{program_id}/{step}"] += 1
    released = await client.post("/programs/release", json={"program_id": program_id})
    assert released.json() == {"program_id": program_id, "released": True}


async def run_load(router: Router, first: int, count: int, answers: Counter[str]) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(first, first + count):
        queue.put_nowait(index)

    async def client_loop() -> None:
        limits = httpx.Limits(max_keepalive_connections=1)
        async with router.client(limits=limits, timeout=600) as client:
            while not queue.empty():
                await run_program(client, f"soak-{queue.get_nowait()}", answers)

    await asyncio.gather(*(client_loop() for _ in range(CLIENTS)))


async def test_soak_leaves_nothing_behind() -> None:
    with sims_running(2, time_scale=0.01, default_max_tokens=4) as sims:
        backends = tuple(sim.url for sim in sims)
        config = ProxyConfig(
            backends,
            capacities={url: CAPACITY for url in backends},
            thunder=ThunderConfig(tick_s=0.25),
        )
        async with router_running(config) as router:
            answers: Counter[str] = Counter()
            started = time.perf_counter()
            await run_load(router, 0, WARMUP_PROGRAMS, answers)
            gc.collect()
            tracemalloc.start()
            try:
                await run_load(router, WARMUP_PROGRAMS, PROGRAMS - WARMUP_PROGRAMS, answers)
                wall_s = time.perf_counter() - started
                await wait_for(
                    lambda: proxy_tasks() == [f"{TASK_PREFIX}tick"], 10, "request tasks to end"
                )
                gc.collect()
                grown, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()

            proxy = router.proxy
            metrics = proxy.core.metrics()
            assert proxy.core.programs() == [] and proxy.core.waiting() == ()
            assert metrics.held_requests == 0 and metrics.in_flight_requests == 0
            assert proxy.held_requests == 0 and proxy.tracked_contexts == 0
            assert metrics.terminated == PROGRAMS
            assert len(answers) == PROGRAMS * STEPS and set(answers.values()) == {1}
            outcomes = proxy.counters.requests
            assert outcomes == Counter({("chat", "ok"): PROGRAMS * STEPS}), outcomes
            reached = 0
            for sim in sims:
                async with httpx.AsyncClient(timeout=10) as client:
                    reached += sum(
                        (await client.get(f"{sim.url}/stats")).json()["requests"].values()
                    )
            assert reached == PROGRAMS * STEPS  # forwarded exactly once each
            print(
                f"\nsoak: {PROGRAMS} programs x {STEPS} steps, {CLIENTS} clients: {wall_s:.1f} s; "
                f"pauses {metrics.pauses}, restores {metrics.restores}, migrations "
                f"{metrics.migrations}, forced admits {metrics.forced_admits}; memory grown "
                f"{grown / 2**20:.2f} MiB over {PROGRAMS - WARMUP_PROGRAMS} programs "
                f"(peak {peak / 2**20:.2f} MiB)"
            )
            assert metrics.pauses > 0 and metrics.restores > metrics.pauses  # it was exercised
            assert grown < MEMORY_BOUND

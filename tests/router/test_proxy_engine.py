"""End to end on real engines: two embedded llama-servers (2 slots each) behind the router,
four reference agents (keep-recent policy) running their programs through it at once. Checks
llama.cpp capacity discovery, that every program completes and is released, that every request
was answered `ok` (an OpenAI client closing its connection at `[DONE]` is no disconnect, however
slow the machine), and that nothing is left in the router."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from lookahead_sdk.agent.driver import run_program
from lookahead_sdk.agent.loop import AgentRun
from lookahead_sdk.agent.workload import CodeAnalysisWorkload
from lookahead_sdk.base.tokens import auto_token_counter
from lookahead_sdk.engine.config import MODEL_CONTEXT
from lookahead_sdk.engine.server import EngineHandle
from lookahead_sdk.router.proxy import TASK_PREFIX
from lookahead_sdk.router.proxy_config import ProxyConfig
from lookahead_sdk.strategies import KeepRecent
from tests.router.proxy_helpers import Router, free_port, proxy_tasks, router_running, wait_for
from tests.support.engine import engine_fixture

pytestmark = [pytest.mark.engine, pytest.mark.timeout(900)]

PROGRAMS = 4
STEPS = 5
SLOTS = 2


@pytest.fixture(scope="module")
def engines() -> Iterator[list[EngineHandle]]:
    fixtures = [engine_fixture(port=free_port(), slots=SLOTS) for _ in range(2)]
    try:
        yield [next(fixture) for fixture in fixtures]
    finally:
        for fixture in fixtures:
            fixture.close()  # stops the engine it started


async def run_agent(router: Router, index: int) -> AgentRun:
    workload = CodeAnalysisWorkload(
        seed=index, steps=STEPS, token_counter=auto_token_counter(),
        tokens_per_output=(120, 160), large_output_every=0,
    )  # fmt: skip
    return await run_program(
        router.url,
        f"engine-{index}",
        workload,
        KeepRecent(budget=500, lookahead_at=650, hard_limit=1000),
        release_to=(router.url,),
        max_tokens=6,
        window_tokens=MODEL_CONTEXT,
    )


async def test_reference_agents_run_through_the_router_on_two_llama_servers(engines) -> None:
    config = ProxyConfig(tuple(engine.base_url for engine in engines))
    async with router_running(config) as router:
        core = router.proxy.core
        for engine in engines:
            assert core.capacity_tokens(engine.base_url) == SLOTS * MODEL_CONTEXT
        runs = await asyncio.gather(*(run_agent(router, i) for i in range(PROGRAMS)))
        assert all(len([t for t in run.turns if t.agent == "main"]) >= STEPS for run in runs)
        # The router counts a request when its work ends: the client may have its whole answer
        # a moment before the backend's stream has ended.
        await wait_for(
            lambda: proxy_tasks() == [f"{TASK_PREFIX}tick"], 60, "the router's requests to end"
        )
        assert core.programs() == [] and core.metrics().terminated == PROGRAMS
        outcomes = router.proxy.counters.requests
        calls = sum(len(run.turns) for run in runs)
        assert outcomes == {("chat", "ok"): calls}, outcomes
        assert router.proxy.counters.upstream_errors == {}

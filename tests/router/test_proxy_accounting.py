"""A program's accounting through the proxy, against a scriptable stub backend: llama.cpp slots
that agree with the policy, requests that survive another request's 5xx, a release that a retry
cannot undo, estimates without usage, and `/programs/{id}` for any id."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lookahead_sdk.client.tool_environments import RouterWatcher
from lookahead_sdk.router.proxy_config import ProxyConfig
from tests.router.proxy_helpers import (
    StubBackend,
    program,
    router_running,
    stub_running,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

BEST_EFFORT = {"is_lookahead": True, "lookahead_group_id": "A:1", "priority_class": "be"}


def completion(prompt: str, program_id: str | None = None, **fields: Any) -> dict[str, Any]:
    tagged = {} if program_id is None else {"program_id": program_id}
    return {"prompt": prompt, "max_tokens": 1, **tagged, **fields}


async def test_a_lookahead_branch_frees_its_llamacpp_slot_when_it_ends() -> None:
    async with (
        stub_running(StubBackend(capacity_tokens=8192, llamacpp_slots=2)) as stub,
        router_running(ProxyConfig((stub.url,))) as router,
        router.client() as client,
    ):
        await client.post("/v1/completions", json=completion("hello", "A"))
        branch = await client.post("/v1/completions", json=completion("hi", "A", **BEST_EFFORT))
        assert branch.status_code == 200 and stub.seen[-1]["body"]["id_slot"] == 1
        # The branch ended: the core counts its slot free, so B is admitted, into that slot.
        answer = await client.post("/v1/completions", json=completion("hello", "B"))
        assert answer.status_code == 200
        assert stub.seen[-1]["body"]["id_slot"] == 1
        core = router.proxy.core
        assert core.accounted_tokens(stub.url) == core.capacity_tokens(stub.url)
        slots = router.proxy._backends[stub.url].slots
        assert slots is not None and len(slots) == 2  # one context per slot, as the core counts


async def test_a_baseline_frees_the_llamacpp_slot_a_program_left() -> None:
    """Round-robin sends a program's next request to the other backend: the slot it held on the
    first is freed, so another program gets a slot there (before: none, and llama.cpp chose one,
    maybe a slot holding a context some program still needs)."""
    async with (
        stub_running(StubBackend(capacity_tokens=8192, llamacpp_slots=1)) as first,
        stub_running(StubBackend(capacity_tokens=8192, llamacpp_slots=1)) as second,
        router_running(ProxyConfig((first.url, second.url), policy="round-robin")) as router,
        router.client() as client,
    ):
        for prompt in ("one", "two"):
            assert (
                await client.post("/v1/completions", json=completion(prompt, "A"))
            ).status_code == 200
        assert len(first.seen) == len(second.seen) == 1  # A's requests went one each way
        assert (await client.post("/v1/completions", json=completion("hi", "B"))).status_code == 200
        assert [s["body"]["prompt"] for s in first.seen] == ["one", "hi"]
        assert first.seen[-1]["body"].get("id_slot") == 0
        slots = router.proxy._backends[first.url].slots
        assert slots is not None and len(slots) == 1  # B's slot only: A's was freed


async def test_a_5xx_from_a_healthy_backend_keeps_the_other_requests_counted() -> None:
    stub = StubBackend(fail_marker="boom", hold_marker="wait")
    async with (
        stub_running(stub),
        router_running(ProxyConfig((stub.url,), retry_s=60), count_text=len) as router,
        router.client() as client,
    ):
        core = router.proxy.core
        running = asyncio.create_task(client.post("/v1/completions", json=completion("wait", "Q")))
        await wait_for(lambda: len(stub.seen) == 1, 10, "Q's request to reach the backend")
        failed = await client.post("/v1/completions", json=completion("boom"))  # untracked
        assert failed.status_code == 502
        assert core.is_up(stub.url), "one request's 5xx took a healthy backend down"
        view = core.program("Q")
        assert view is not None and view.phase == "reasoning" and len(view.in_flight) == 1
        stub.resume.set()
        assert (await running).status_code == 200
        view = core.program("Q")
        assert view is not None and (view.steps, view.tokens) == (1, 103)
        assert router.proxy.counters.upstream_errors == {(stub.url, "status"): 1}


async def test_a_released_programs_retry_does_not_bring_it_back() -> None:
    failing = StubBackend(capacity_tokens=1_000_000, status=500, hold_marker="x")
    async with (
        stub_running(failing),
        stub_running(StubBackend()) as other,
        router_running(ProxyConfig((failing.url, other.url), retry_s=60)) as router,
        router.client() as client,
    ):
        request = asyncio.create_task(client.post("/v1/completions", json=completion("x", "Q")))
        await wait_for(lambda: len(failing.seen) == 1, 10, "Q's request to reach the backend")
        released = await client.post("/programs/release", json={"program_id": "Q"})
        assert released.json()["released"] is True
        failing.resume.set()  # the request fails now, after the release
        answer = await request
        assert answer.status_code == 409
        assert answer.json()["error"]["type"] == "program_released"
        assert other.seen == [] and router.proxy.core.program("Q") is None
        view = await program(client, "Q")
        assert view is not None and view["status"] == "terminated"


async def test_a_backend_without_usage_estimates_the_main_context_only() -> None:
    stub = StubBackend(report_usage=False, hold_marker="L")
    async with (
        stub_running(stub),
        router_running(ProxyConfig((stub.url,)), count_text=len) as router,
        router.client() as client,
    ):
        core = router.proxy.core

        def tokens() -> int:
            view = core.program("P")
            assert view is not None
            return view.tokens

        await client.post("/v1/completions", json=completion("a" * 100, "P"))
        assert tokens() == 105  # the prompt and the counted reply "a b c"
        look = completion("L" * 5000, "P", **BEST_EFFORT)
        branch = asyncio.create_task(client.post("/v1/completions", json=look))
        await wait_for(lambda: tokens() > 5000, 10, "the branch to count toward P")
        # The next step repeats the reply (skipped) and adds 10 characters.
        await client.post("/v1/completions", json=completion("a" * 100 + "a b c" + "b" * 10, "P"))
        stub.resume.set()
        assert (await branch).status_code == 200
        assert tokens() == 120  # 105 + 10 added + the reply "a b c"; no branch tokens


@pytest.mark.parametrize("program_id", ["job%41-7", "a/b c", "100%"])
async def test_programs_view_finds_any_id_the_sdk_watcher_asks_for(program_id: str) -> None:
    async with (
        stub_running(StubBackend()) as stub,
        router_running(ProxyConfig((stub.url,))) as router,
        router.client() as client,
    ):
        await client.post("/v1/completions", json=completion("hi", program_id))
        watcher = RouterWatcher([router.url], program_id, None)  # type: ignore[arg-type]
        (url,) = watcher.urls
        answer = await client.get(url)
        assert answer.status_code == 200, answer.text
        assert answer.json()["program_id"] == program_id

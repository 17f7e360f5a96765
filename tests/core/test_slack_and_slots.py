"""Client-side slack admission and llama.cpp slot placement, over real HTTP to a stub server."""

from __future__ import annotations

import asyncio

import pytest
from openai import AsyncOpenAI

from lookahead_sdk import RequestTags, tagged_async_http_client, use_tags
from lookahead_sdk.client.llamacpp_slots import SlotPairs
from lookahead_sdk.client.slack import FOREGROUND, ForegroundRegistry, SlackGate, origin_of

from ..support.recording_proxy import RecordingProxy


@pytest.fixture
def stub_server():
    with RecordingProxy() as server:
        yield server


async def test_foreground_requests_are_counted_until_their_stream_closes(
    stub_server: RecordingProxy,
) -> None:
    origin = origin_of(stub_server.url)
    client = AsyncOpenAI(
        base_url=f"{stub_server.url}/v1", api_key="x", http_client=tagged_async_http_client()
    )
    with use_tags(RequestTags("p")):
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert FOREGROUND.count(origin) == 1
        assert FOREGROUND.prefilling(origin) == 1  # no token has arrived yet
        chunks = stream.__aiter__()
        await chunks.__anext__()
        assert (FOREGROUND.count(origin), FOREGROUND.prefilling(origin)) == (1, 0)  # decoding
        async for _ in chunks:
            pass
    assert (FOREGROUND.count(origin), FOREGROUND.prefilling(origin)) == (0, 0)
    with use_tags(RequestTags("p").lookahead("g")):  # best-effort work is never foreground
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert FOREGROUND.count(origin) == 0
    await client.close()


async def test_idle_gate_holds_best_effort_work_until_the_foreground_is_done() -> None:
    registry = ForegroundRegistry()
    gate = SlackGate("http://engine:1", admit="idle", poll_s=0.005, registry=registry)
    held = registry.begin("http://engine:1")
    with use_tags(RequestTags("p").lookahead("g")):
        waiter = asyncio.create_task(gate.wait())
        await asyncio.sleep(0.05)
        held.first_token()  # a decoding request still holds an "idle" gate
        await asyncio.sleep(0.02)
        assert not waiter.done()
        held.end()
        assert await waiter >= 0.06
    with use_tags(RequestTags("p")):  # latency-critical callers never wait
        registry.begin("http://engine:1")
        assert await gate.wait() == 0.0


async def test_decode_admission_opens_once_no_foreground_request_waits_for_its_first_token() -> (
    None
):
    registry = ForegroundRegistry()
    gate = SlackGate("http://engine:1", admit="decode", poll_s=0.005, registry=registry)
    decoding, prefilling = registry.begin("http://engine:1"), registry.begin("http://engine:1")
    decoding.first_token()
    with use_tags(RequestTags("p").lookahead("g")):
        waiter = asyncio.create_task(gate.wait())
        await asyncio.sleep(0.03)
        assert not waiter.done()  # one request still waits for its first token
        prefilling.end()  # ended before any token (e.g. an error): no longer waiting either
        await asyncio.wait_for(waiter, 1)
    assert (registry.count("http://engine:1"), registry.prefilling("http://engine:1")) == (1, 0)
    decoding.first_token(), decoding.end(), decoding.end(), prefilling.first_token()
    assert (registry.count("http://engine:1"), registry.prefilling("http://engine:1")) == (0, 0)


def test_gate_rejects_an_unknown_admission_rule() -> None:
    with pytest.raises(ValueError, match="admit must be one of"):
        SlackGate("http://engine:1", admit="always")  # type: ignore[arg-type]


async def test_promotion_releases_waiting_work_of_that_group_only() -> None:
    registry = ForegroundRegistry()
    gate = SlackGate("http://engine:1", poll_s=0.005, registry=registry)
    registry.begin("http://engine:1")

    async def wait_as(group: str) -> float:
        with use_tags(RequestTags("p").lookahead(group)):
            return await gate.wait()

    promoted, other = asyncio.create_task(wait_as("g1")), asyncio.create_task(wait_as("g2"))
    await asyncio.sleep(0.02)
    registry.promote("g1")
    await asyncio.wait_for(promoted, 1)
    assert not other.done()
    other.cancel()


async def test_a_waiter_that_no_longer_wants_to_send_leaves_a_closed_gate() -> None:
    registry = ForegroundRegistry()
    gate = SlackGate("http://engine:1", poll_s=0.005, registry=registry)
    registry.begin("http://engine:1")  # a foreground prefill holds the gate closed
    stop = False
    with use_tags(RequestTags("p").lookahead("g")):
        waiter = asyncio.create_task(gate.wait(until=lambda: stop))
        await asyncio.sleep(0.03)
        assert not waiter.done()
        stop = True
        await asyncio.wait_for(waiter, 1)
    assert registry.prefilling("http://engine:1") == 1  # it left without slack


def test_slot_pairs_pin_foreground_and_lookahead_and_swap_on_commit() -> None:
    pairs = SlotPairs()
    pairs.configure("http://e", 5)
    first, second = pairs.enroll("http://e", "a"), pairs.enroll("http://e", "b")
    assert first is not None and second is not None
    assert pairs.enroll("http://e", "c") is None  # 5 slots hold two pairs only
    assert {first.current, first.branch}.isdisjoint({second.current, second.branch})
    live, branch = RequestTags("a"), RequestTags("a").lookahead("g")
    current = pairs.slot_for("http://e", live)
    assert pairs.slot_for("http://e", branch) != current
    # A lookahead request extending the live context (a summary) runs where it is cached.
    assert pairs.slot_for("http://e", branch.extending_live_context()) == current
    assert "extends_live_context" not in branch.extending_live_context().to_body()
    pairs.swap("http://e", "a")
    assert pairs.slot_for("http://e", branch) == current
    assert pairs.slot_for("http://e", RequestTags("a/sub1")) is None  # not handed over: server's
    pairs.release("http://e", "a")
    assert pairs.enroll("http://e", "c") is not None


def test_a_spawned_sub_agent_runs_in_the_slot_its_context_was_warmed_in() -> None:
    pairs = SlotPairs()
    pairs.configure("http://e", 4)
    pair = pairs.enroll("http://e", "a")
    assert pair is not None
    warmed = pairs.slot_for("http://e", RequestTags("a").lookahead("g"))
    live = pairs.slot_for("http://e", RequestTags("a"))
    assert pairs.hand_over("http://e", "a", "a/sub1")
    assert pairs.slot_for("http://e", RequestTags("a/sub1")) == warmed
    assert pairs.slot_for("http://e", RequestTags("a")) == live  # the program keeps its context
    new_branch = pairs.slot_for("http://e", RequestTags("a").lookahead("g2"))
    assert new_branch not in (warmed, live)  # and warms its next lookahead elsewhere
    assert pairs.hand_over("http://e", "a", "a/sub2")  # the fourth slot
    assert not pairs.hand_over("http://e", "a", "a/sub3")  # no free slot left: nothing changes
    assert pairs.slot_for("http://e", RequestTags("a/sub3")) is None
    pairs.release("http://e", "a/sub1")
    assert pairs.hand_over("http://e", "a", "a/sub3")  # its slot is free again


async def test_llamacpp_wire_adds_the_slot(stub_server: RecordingProxy) -> None:
    from lookahead_sdk.client.llamacpp_slots import SLOT_PAIRS

    origin = origin_of(stub_server.url)
    SLOT_PAIRS.configure(origin, 4)
    SLOT_PAIRS.enroll(origin, "prog")
    client = tagged_async_http_client(wire="llamacpp")
    try:
        with use_tags(RequestTags("prog")):
            await client.post(f"{stub_server.url}/v1/chat/completions", json={"messages": []})
        with use_tags(RequestTags("prog").lookahead("g")):
            await client.post(f"{stub_server.url}/completion", json={"prompt": "x"})
    finally:
        SLOT_PAIRS.release(origin, "prog")
        await client.aclose()
    foreground, warmup = (r.body for r in stub_server.requests)
    assert isinstance(foreground["id_slot"], int) and isinstance(warmup["id_slot"], int)
    assert foreground["id_slot"] != warmup["id_slot"]


@pytest.mark.parametrize(("live_share", "swapped"), [(0.5, True), (0.95, False)])
def test_a_commit_runs_in_the_slot_holding_more_of_its_context(
    stub_server: RecordingProxy, live_share: float, swapped: bool
) -> None:
    from lookahead_sdk import LlamaCppWarmer
    from lookahead_sdk.client.llamacpp_slots import SLOT_PAIRS
    from lookahead_sdk.client.warmers import BranchSlot

    warmer = LlamaCppWarmer(stub_server.url)
    SLOT_PAIRS.configure(warmer.origin, 4)
    warmer.attach("p")
    try:
        before = SLOT_PAIRS.pair(warmer.origin, "p")
        warmer._branches["p"] = BranchSlot(ids=[7] * 90, prompt_tokens=100)
        warmer.committed("p", replaced=True, live_prefix_share=live_share)
        after = SLOT_PAIRS.pair(warmer.origin, "p")
        assert before is not None and after is not None
        assert (after.current == before.branch) is swapped
    finally:
        warmer.detach("p")


def test_shared_prefix_share_is_the_cached_part_in_tokens(approx_counter) -> None:
    from lookahead_sdk.core.state import MainState

    live = [{"role": "user", "content": "a " * 300}, {"role": "assistant", "content": "b " * 100}]
    state = MainState(live, token_counter=approx_counter)
    assert state.shared_prefix_share(live) == 1.0
    rewritten = [live[0], {"role": "assistant", "content": "c " * 100}]
    assert 0.6 < state.shared_prefix_share(rewritten) < 0.9
    assert state.shared_prefix_share([{"role": "user", "content": "x"}]) == 0.0

"""Client-side slack admission and llama.cpp slot placement, over real HTTP to a stub server."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest
from openai import AsyncOpenAI

from lookahead_sdk import RequestTags, ServerSession, use_tags
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.protocol import DISCARD_SLOT_PROMPT_FIELD
from lookahead_sdk.base.tags import BackgroundWork, doing
from lookahead_sdk.client.llamacpp_slots import (
    RECENT_CONTEXTS,
    CachedPrefix,
    SlotPair,
    SlotPairs,
    SlotPlacement,
)
from lookahead_sdk.client.session import ServerFacts
from lookahead_sdk.client.slack import BatchSizer, ChunkSizer, ForegroundRegistry, SlackGate

from ..support.clock import VirtualClock
from ..support.recording_proxy import RecordingProxy

if TYPE_CHECKING:
    from lookahead_sdk import LlamaCppWarmer


@pytest.fixture
def stub_server():
    with RecordingProxy() as server:
        yield server


@pytest.fixture
def llamacpp_session(stub_server: RecordingProxy) -> ServerSession:
    """A session on a llama.cpp server with 4 slots (the stub answers nothing asked here)."""
    session = ServerSession(
        stub_server.url, wire="llamacpp", facts=ServerFacts(llamacpp=True, total_slots=4)
    )
    assert session.slots is not None
    return session


async def test_foreground_requests_are_counted_until_their_stream_closes(
    stub_server: RecordingProxy,
) -> None:
    session = ServerSession(stub_server.url)
    foreground = session.foreground
    client = AsyncOpenAI(
        base_url=f"{stub_server.url}/v1", api_key="x", http_client=session.async_http_client()
    )
    with use_tags(RequestTags("p")):
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert (foreground.inflight, foreground.prefilling) == (1, 1)  # no token yet
        chunks = stream.__aiter__()
        await chunks.__anext__()
        assert (foreground.inflight, foreground.prefilling) == (1, 0)  # decoding
        async for _ in chunks:
            pass
    assert (foreground.inflight, foreground.prefilling) == (0, 0)
    with use_tags(RequestTags("p").lookahead("g")):  # best-effort work is never foreground
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert foreground.inflight == 0
    await client.close()


async def test_two_sessions_never_see_each_others_requests(stub_server: RecordingProxy) -> None:
    """No process-wide registry: a session counts only the requests of its own clients."""
    mine, other = ServerSession(stub_server.url), ServerSession(stub_server.url)
    client = mine.async_http_client()
    try:
        with use_tags(RequestTags("p")):
            async with client.stream(
                "POST", f"{stub_server.url}/v1/chat/completions", json={"stream": True}
            ) as response:
                assert (mine.foreground.inflight, other.foreground.inflight) == (1, 0)
                await response.aread()
    finally:
        await client.aclose()
    assert mine.foreground.inflight == 0


async def test_idle_gate_holds_best_effort_work_until_the_foreground_is_done() -> None:
    registry = ForegroundRegistry()
    gate = SlackGate(registry, admit="idle", poll_s=0.005)
    held = registry.begin()
    with use_tags(RequestTags("p").lookahead("g")):
        waiter = asyncio.create_task(gate.wait())
        await asyncio.sleep(0.05)
        held.first_token()  # a decoding request still holds an "idle" gate
        await asyncio.sleep(0.02)
        assert not waiter.done()
        held.end()
        assert await waiter >= 0.06
    with use_tags(RequestTags("p")):  # latency-critical callers never wait
        registry.begin()
        assert await gate.wait() == 0.0


async def test_decode_admission_opens_once_no_foreground_request_waits_for_its_first_token() -> (
    None
):
    registry = ForegroundRegistry()
    gate = SlackGate(registry, admit="decode", poll_s=0.005)
    decoding, prefilling = registry.begin(), registry.begin()
    decoding.first_token()
    with use_tags(RequestTags("p").lookahead("g")):
        waiter = asyncio.create_task(gate.wait())
        await asyncio.sleep(0.03)
        assert not waiter.done()  # one request still waits for its first token
        prefilling.end()  # ended before any token (e.g. an error): no longer waiting either
        await asyncio.wait_for(waiter, 1)
    assert (registry.inflight, registry.prefilling) == (1, 0)
    decoding.first_token(), decoding.end(), decoding.end(), prefilling.first_token()
    assert (registry.inflight, registry.prefilling) == (0, 0)


def test_gate_rejects_an_unknown_admission_rule_and_a_foreign_registry() -> None:
    with pytest.raises(ValueError, match="admit must be one of"):
        SlackGate(ForegroundRegistry(), admit="always")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"session\.gate"):
        SlackGate("http://engine:1")  # type: ignore[arg-type]


async def test_idle_first_admission_keeps_work_that_is_not_due_for_idle_time() -> None:
    """Beside a decoding reply only work whose commit is due (or not forecast) goes; the rest
    waits for a moment with nothing in flight, or for the engine to have been idle less than
    `min_idle_share` of the recent window (several agents keep it busy)."""
    registry = ForegroundRegistry()
    gate = SlackGate(
        registry, admit="idle-first", poll_s=0.005, idle_window_s=1.0, min_idle_share=0.5
    )
    later = BackgroundWork("later", due_at=time.monotonic() + 60)
    soon = BackgroundWork("soon", due_at=time.monotonic() + 1)
    unknown = BackgroundWork("unknown")
    await asyncio.sleep(0.4)  # an idle engine
    assert all(gate.has_slack(work) for work in (later, soon, unknown, None))
    reply = registry.begin()
    assert not any(gate.has_slack(work) for work in (later, soon, unknown))  # prefilling
    reply.first_token()
    assert [gate.has_slack(work) for work in (later, soon, unknown, None)] == [
        False,
        True,
        True,
        False,
    ]
    with use_tags(RequestTags("p").lookahead("later")), doing(later):
        waited = await asyncio.wait_for(gate.wait(), 5)  # opens once busy over half the window
    assert waited > 0 and registry.idle_share(1.0) < 0.5
    reply.end()
    await asyncio.sleep(0.6)  # idle again: over half of the last second
    registry.begin().first_token()
    assert registry.idle_share(1.0) > 0.5
    assert not gate.has_slack(later) and gate.has_slack(soon)


async def test_idle_first_keeps_due_work_to_idle_time_when_the_idle_time_left_suffices() -> None:
    """Due work runs beside a decoding reply only if the idle time expected before its commit
    (the engine's recent idle share of the time left) is too short for the work it has left;
    work that cannot say how much it has left (a summary's decode) goes as before."""
    registry = ForegroundRegistry()
    gate = SlackGate(registry, admit="idle-first", idle_window_s=1.0, min_idle_share=0.25)
    due_at = time.monotonic() + 3
    small = BackgroundWork("small", due_at=due_at, remaining_s=0.1)
    large = BackgroundWork("large", due_at=due_at, remaining_s=30.0)
    unknown = BackgroundWork("unknown", due_at=due_at)
    overdue = BackgroundWork("overdue", due_at=time.monotonic() - 1, remaining_s=0.1)
    await asyncio.sleep(0.4)  # an idle engine
    reply = registry.begin()
    reply.first_token()  # decoding, the engine idle most of the last second
    assert registry.idle_share(1.0) > 0.25
    assert [gate.has_slack(work) for work in (small, large, unknown, overdue)] == [
        False,
        True,
        True,
        True,
    ]
    assert small.outlasts_idle(0.0) and not small.outlasts_idle(1.0)
    reply.end()
    assert gate.has_slack(small)  # idle: everything goes


def test_idle_share_counts_overlapping_requests_once() -> None:
    created = time.monotonic()
    registry = ForegroundRegistry()
    begun = time.monotonic()
    first, second = registry.begin(), registry.begin()
    time.sleep(0.2)
    first.end()
    time.sleep(0.1)
    second.end()  # one busy stretch (both requests), counted once
    ended = time.monotonic()
    time.sleep(0.3)
    now = time.monotonic()
    busy_at_most, busy_at_least = ended - created, ended - begun - 0.01
    share = registry.idle_share(10.0)
    assert 1 - busy_at_most / (now - created) - 0.02 <= share
    assert share <= 1 - busy_at_least / (time.monotonic() - created) + 0.02
    assert registry.idle_share(now - ended - 0.05) == 1.0  # nothing in flight in that window


def test_prefilling_except_leaves_out_only_that_programs_own_announced_call() -> None:
    registry = ForegroundRegistry()
    registry.expect("p")  # the committing program's own model call, announced
    assert registry.prefilling == 1 and registry.prefilling_except("p") == 0
    registry.expect("q")
    assert registry.prefilling_except("p") == 1  # another program's call counts
    other = registry.begin("q")  # sent: in flight, no first token yet
    assert registry.prefilling_except("p") == 1
    other.first_token()  # decoding: best-effort prompt tokens fill its batches again
    assert registry.prefilling_except("p") == 0
    untagged = registry.begin()  # an untagged request takes the oldest announcement, "p"'s
    assert registry.prefilling_except("p") == 1
    untagged.end()
    other.end()
    assert registry.prefilling_except(None) == 0


def test_gate_settings_are_checked_by_name() -> None:
    with pytest.raises(ValueError, match="due_within_s must be positive"):
        SlackGate(ForegroundRegistry(), due_within_s=0)
    with pytest.raises(ValueError, match="idle_window_s must be at most"):
        SlackGate(ForegroundRegistry(), idle_window_s=10_000)
    with pytest.raises(ValueError, match=r"min_idle_share must be a share in \[0, 1\]"):
        SlackGate(ForegroundRegistry(), min_idle_share=1.5)


async def test_promotion_releases_the_waiting_work_of_that_lookahead_only() -> None:
    registry = ForegroundRegistry()
    gate = SlackGate(registry, poll_s=0.005)
    registry.begin()
    first, second = BackgroundWork("g1"), BackgroundWork("g2")

    async def wait_as(work: BackgroundWork) -> float:
        with use_tags(RequestTags("p").lookahead(work.group_id)), doing(work):
            return await gate.wait()

    promoted, other = asyncio.create_task(wait_as(first)), asyncio.create_task(wait_as(second))
    await asyncio.sleep(0.02)
    first.promoted = True
    await asyncio.wait_for(promoted, 1)
    assert not other.done()
    other.cancel()


async def test_a_waiter_that_no_longer_wants_to_send_leaves_a_closed_gate() -> None:
    registry = ForegroundRegistry()
    gate = SlackGate(registry, poll_s=0.005)
    registry.begin()  # a foreground prefill holds the gate closed
    stop = False
    with use_tags(RequestTags("p").lookahead("g")):
        waiter = asyncio.create_task(gate.wait(until=lambda: stop))
        await asyncio.sleep(0.03)
        assert not waiter.done()
        stop = True
        await asyncio.wait_for(waiter, 1)
    assert registry.prefilling == 1  # it left without slack


def test_slot_pairs_pin_foreground_and_lookahead_and_swap_on_commit() -> None:
    pairs = SlotPairs(5)
    first, second = pairs.enroll("a"), pairs.enroll("b")
    assert first is not None and second is not None
    assert pairs.enroll("c") is None  # 5 slots hold two pairs only
    assert {first.current, first.branch}.isdisjoint({second.current, second.branch})
    live, branch = RequestTags("a"), RequestTags("a").lookahead("g")
    current = pairs.slot_for(live)
    assert pairs.slot_for(branch) != current
    # A lookahead request extending the live context (a summary) runs where it is cached.
    assert pairs.slot_for(branch.extending_live_context()) == current
    assert "extends_live_context" not in branch.extending_live_context().to_body()
    pairs.swap("a")
    assert pairs.slot_for(branch) == current
    assert pairs.slot_for(RequestTags("a/sub1")) is None  # not handed over: server's choice
    pairs.release("a")
    assert pairs.enroll("c") is not None


def test_a_spawned_sub_agent_runs_in_the_slot_its_context_was_warmed_in() -> None:
    pairs = SlotPairs(4)
    pair = pairs.enroll("a")
    assert pair is not None
    warmed = pairs.slot_for(RequestTags("a").lookahead("g"))
    live = pairs.slot_for(RequestTags("a"))
    assert pairs.hand_over("a", "a/sub1")
    assert pairs.slot_for(RequestTags("a/sub1")) == warmed
    assert pairs.slot_for(RequestTags("a")) == live  # the program keeps its context
    new_branch = pairs.slot_for(RequestTags("a").lookahead("g2"))
    assert new_branch not in (warmed, live)  # and warms its next lookahead elsewhere
    assert pairs.hand_over("a", "a/sub2")  # the fourth slot
    assert not pairs.hand_over("a", "a/sub3")  # no free slot left: nothing changes
    assert pairs.slot_for(RequestTags("a/sub3")) is None
    pairs.release("a/sub1")
    assert pairs.hand_over("a", "a/sub3")  # its slot is free again


def test_what_a_slot_is_known_to_hold_lasts_while_only_its_program_is_placed_there() -> None:
    pairs = SlotPairs(6)
    a, b = pairs.enroll("a"), pairs.enroll("b")
    assert a is not None and b is not None
    warmed = a.branch
    pairs.note_cached("a", warmed, [1, 2, 3])
    assert pairs.cached_prefixes() == [CachedPrefix(warmed, (1, 2, 3))]
    assert pairs.cached_prefixes(exclude=warmed) == []
    assert pairs.slot_for(RequestTags("a").lookahead("g")) == warmed  # its own work: kept
    assert pairs.cached_prefixes() == [CachedPrefix(warmed, (1, 2, 3))]
    # The sub-agent spawned from it continues the warmed context in that slot.
    assert pairs.hand_over("a", "a/sub")
    assert pairs.slot_for(RequestTags("a/sub")) == warmed
    assert pairs.cached_prefixes() == [CachedPrefix(warmed, (1, 2, 3))]
    pairs.release("a/sub")
    assert pairs.enroll("c") is not None  # takes the freed slot ...
    placed = {pairs.slot_for(RequestTags("c")), pairs.slot_for(RequestTags("c").lookahead("h"))}
    assert warmed in placed
    assert pairs.cached_prefixes() == []  # ... and its requests replace that cache


def test_a_program_handing_over_a_sub_agent_gets_the_free_slot_holding_most_of_its_context() -> (
    None
):
    """The next sub-agent's context starts as the last one's (the same role prompt): the new
    branch is the free slot a finished sub-agent with a like context ran in."""
    pairs = SlotPairs(6)
    a = pairs.enroll("a")
    assert (a.current, a.branch) == (0, 5)  # home at the low end, branch at the high end
    assert pairs.enroll("b") is not None  # slots 1 and 4: 2 and 3 free
    first_branch = a.branch
    pairs.note_cached("a", first_branch, [1, 2, 3, 9])
    assert pairs.hand_over("a", "a/s1")
    assert a.branch == 2  # no free slot held anything known
    pairs.note_cached("a", a.branch, [1, 2, 3, 7])
    pairs.release("a/s1")  # its slot, holding [1, 2, 3, 9], is free again
    assert pairs.hand_over("a", "a/s2")
    assert a.branch == first_branch  # shares [1, 2, 3] with the context just handed over
    assert CachedPrefix(first_branch, (1, 2, 3, 9)) in pairs.cached_prefixes()
    pairs.note_cached("a", a.branch, [5, 6])
    pairs.release("a/s2")  # slot 2, holding [1, 2, 3, 7], is free; so is slot 3, unused
    assert pairs.hand_over("a", "a/s3")
    assert a.branch == 3  # nothing shares [5, 6]: the slot whose cache is worth nothing


def test_a_context_is_recalled_after_its_slot_was_overwritten_until_newer_ones_push_it_out() -> (
    None
):
    """What was noted in a slot is recalled (the server keeps evicted prompts in its RAM cache)
    after other work replaced it there and after a request the server placed itself; a longer
    note of the same context replaces the shorter; only the last RECENT_CONTEXTS are kept."""
    pairs = SlotPairs(4)
    a = pairs.enroll("a")
    assert a is not None
    pairs.note_cached("a", a.branch, [1, 2, 3])
    pairs.note_cached("a", a.branch, [1, 2, 3, 4, 5])  # the next chunk of the same context
    pairs.note_cached("a", a.branch, [9, 9])  # other work replaces it in the slot
    pairs.slot_for(RequestTags("unpaired"))
    assert pairs.cached_prefixes() == []
    assert pairs.recalled_prefix([1, 2, 3, 4, 7]) == 4
    assert pairs.recalled_prefix([9, 9, 9]) == 2
    assert pairs.recalled_prefix([8]) == 0
    assert pairs.recalled_prefix([1, 2]) == 2  # a note that a longer one extends is not lost
    for context in range(RECENT_CONTEXTS - 2):  # with [1, ..., 5] and [9, 9]: RECENT_CONTEXTS
        pairs.note_cached("a", a.branch, [100, context])
    assert pairs.recalled_prefix([1, 2, 3, 4, 5]) == 5
    pairs.note_cached("a", a.branch, [100, -1])
    assert pairs.recalled_prefix([1, 2, 3, 4, 5]) == 0  # the oldest is pushed out


def test_a_request_the_server_places_itself_forgets_what_every_slot_held() -> None:
    pairs = SlotPairs(4)
    a = pairs.enroll("a")
    assert a is not None
    pairs.note_cached("a", a.current, [7, 8])
    assert pairs.slot_for(RequestTags("no-pair")) is None  # llama.cpp picks an idle slot
    assert pairs.cached_prefixes() == []


async def test_llamacpp_wire_adds_the_slot(stub_server: RecordingProxy) -> None:
    session = ServerSession(
        stub_server.url, wire="llamacpp", facts=ServerFacts(llamacpp=True, total_slots=4)
    )
    assert session.slots is not None
    session.slots.enroll("prog")
    client = session.async_http_client()
    try:
        with use_tags(RequestTags("prog")):
            await client.post(f"{stub_server.url}/v1/chat/completions", json={"messages": []})
        with use_tags(RequestTags("prog").lookahead("g")):
            await client.post(f"{stub_server.url}/completion", json={"prompt": "x"})
    finally:
        await client.aclose()
    foreground, warmup = (r.body for r in stub_server.requests)
    assert isinstance(foreground["id_slot"], int) and isinstance(warmup["id_slot"], int)
    assert foreground["id_slot"] != warmup["id_slot"]


def attached_warmer(
    session: ServerSession, program_id: str = "p"
) -> tuple[LlamaCppWarmer, SlotPair]:
    """A llama.cpp warmer of `session` with `program_id` attached, and the program's pair."""
    from lookahead_sdk import LlamaCppWarmer

    warmer = LlamaCppWarmer(session)
    warmer.attach(program_id)
    assert session.slots is not None
    pair = session.slots.pair(program_id)
    assert pair is not None
    return warmer, pair


def warm_nine_tenths(
    warmer: LlamaCppWarmer, program_id: str = "p", *, finishing: bool = False
) -> None:
    """As if the program's last warm-up (100 tokens) left 90 of them in its branch slot."""
    from lookahead_sdk.client.warmers import BranchSlot

    warmer._branches[program_id] = BranchSlot(prompt_ids=[7] * 90 + [8] * 10, finishing=finishing)
    warmer._branch_now_holds(program_id, [7] * 90)


@pytest.mark.parametrize(("live_share", "swapped"), [(0.5, True), (0.95, False)])
def test_a_commit_runs_in_the_slot_holding_more_of_its_context(
    llamacpp_session: ServerSession, live_share: float, swapped: bool
) -> None:
    session = llamacpp_session
    assert session.slots is not None
    warmer, before = attached_warmer(session)
    warm_nine_tenths(warmer)
    warmer.committed("p", replaced=True, live_prefix_share=live_share)
    after = session.slots.pair("p")
    assert after is not None
    assert (after.current == before.branch) is swapped
    warmer.detach("p")
    assert session.slots.pair("p") is None


def test_a_retired_slot_says_so_to_the_next_request_placed_there_only() -> None:
    pairs = SlotPairs(4)
    pair = pairs.enroll("a")
    assert pair is not None
    live, warm_up = RequestTags("a"), RequestTags("a").lookahead("g")
    pairs.retire("a", branch=True)
    assert pairs.place(live) == SlotPlacement(pair.current)  # the live context is not dead
    assert pairs.place(warm_up) == SlotPlacement(pair.branch, discard_held_prompt=True)
    assert pairs.place(warm_up) == SlotPlacement(pair.branch)  # it holds that warm-up now
    pairs.retire("a", current=True, branch=True)
    # A warm-up notes what its next chunk keeps before sending it: the mark stays.
    pairs.note_cached("a", pair.branch, [1, 2, 3])
    assert pairs.place(warm_up) == SlotPlacement(pair.branch, discard_held_prompt=True)
    assert pairs.place(live) == SlotPlacement(pair.current, discard_held_prompt=True)
    assert pairs.place(live) == SlotPlacement(pair.current)
    pairs.retire("b", current=True)  # no pair: nothing to retire, the server places it
    assert pairs.place(RequestTags("b")) is None


def test_live_contexts_start_in_consecutive_slots_and_branches_at_the_other_end() -> None:
    """Without --kv-unified llama.cpp decodes consecutive slots in one micro-batch."""
    pairs = SlotPairs(8)
    enrolled = [pairs.enroll(name) for name in "abcd"]
    assert [(p.current, p.branch) for p in enrolled if p is not None] == [
        (0, 7),
        (1, 6),
        (2, 5),
        (3, 4),
    ]
    assert pairs.enroll("e") is None


def swapped_by_a_commit(pairs: SlotPairs) -> SlotPair:
    """Program "a"'s commit ran where its warm-up was: its live context is in the branch slot,
    the replaced one (retired) in its home slot."""
    pair = pairs.enroll("a")
    assert pair is not None
    pairs.place(RequestTags("a").lookahead("g"))
    pairs.swap("a")
    pairs.retire("a", branch=True)
    pairs.place(RequestTags("a"))  # the committed turn, in the slot it was warmed in
    return pair


def test_a_copy_of_the_live_context_into_its_home_slot_moves_it_back_there() -> None:
    pairs = SlotPairs(4)
    pair = swapped_by_a_commit(pairs)
    home, away = 0, 3
    assert (pair.current, pair.branch, pair.home) == (away, home, home)
    assert pairs.away_from_home("a")
    before_copy = pairs.placements(away)
    pairs.note_cached("a", home, [1, 2, 3])  # the copy (slot restore places no request)
    assert pairs.settle_home("a", live_placements=before_copy)
    assert (pair.current, pair.branch, pair.branch_mirrors_live) == (home, away, True)
    assert not pairs.away_from_home("a")
    assert pairs.holds(away) == (1, 2, 3)  # the copy's source holds it too
    # Home holds the live context; the other slot a copy no request needs kept.
    assert pairs.place(RequestTags("a")) == SlotPlacement(home)
    warm_up = RequestTags("a").lookahead("g2")
    assert pairs.place(warm_up) == SlotPlacement(away, discard_held_prompt=True)
    assert not pairs.settle_home("a", live_placements=pairs.placements(home))  # home already


def test_a_request_placed_in_the_live_slot_during_the_copy_keeps_it_there() -> None:
    """The copy then misses that request's tokens: the live slot holds more than home."""
    pairs = SlotPairs(4)
    pair = swapped_by_a_commit(pairs)
    before_copy = pairs.placements(pair.current)
    pairs.place(RequestTags("a"))  # the model's next turn came first
    assert not pairs.settle_home("a", live_placements=before_copy)
    assert (pair.current, pair.branch) == (3, 0)


def test_a_warm_up_in_the_home_slot_is_no_dead_context_to_copy_over() -> None:
    pairs = SlotPairs(4)
    swapped_by_a_commit(pairs)
    pairs.place(RequestTags("a").lookahead("g2"))  # the next lookahead's warm-up went there
    assert not pairs.away_from_home("a")


def test_a_sub_agent_handed_the_home_slot_moves_its_programs_home() -> None:
    pairs = SlotPairs(4)
    pair = swapped_by_a_commit(pairs)
    assert pairs.hand_over("a", "a/s1")  # the child takes the branch: slot 0, a's home
    assert pairs.pair("a/s1") == SlotPair(current=0, branch=0, home=0)
    assert pair.home == pair.current == 3 and not pairs.away_from_home("a")


async def test_the_warmer_copies_a_live_context_a_commit_moved_back_home(
    stub_server: RecordingProxy,
) -> None:
    from lookahead_sdk.core.warmer import RequestShape

    session = ServerSession(
        stub_server.url, wire="llamacpp", facts=ServerFacts(llamacpp=True, total_slots=4)
    )
    warmer = warmer_of_fixed_tokens(session, session.gate(), 300)
    assert session.slots is not None
    home, away = 0, 3
    assert not warmer.wants_live_copy("p")
    warm_nine_tenths(warmer)
    warmer.committed("p", replaced=True, live_prefix_share=0.5)  # swapped
    assert warmer.wants_live_copy("p")
    history = [{"role": "user", "content": "hi"}]
    try:
        with use_tags(RequestTags("p").best_effort()):
            assert await warmer.fork_live("p", history, shape=RequestShape())
        assert [r.path for r in stub_server.requests] == [f"/slots/{away}", f"/slots/{home}"]
        pair = session.slots.pair("p")
        assert pair is not None and (pair.current, pair.branch) == (home, away)
        assert not warmer.wants_live_copy("p")
        warmer.slot_copies = False  # a server without slot copies is never asked
        session.slots.swap("p")
        session.slots.retire("p", branch=True)
        assert session.slots.away_from_home("p") and not warmer.wants_live_copy("p")
    finally:
        warmer.detach("p")
        await warmer.aclose()


@pytest.mark.parametrize(("live_share", "swapped"), [(0.5, True), (0.95, False)])
def test_after_a_commit_the_next_request_in_the_branch_discards_what_it_held(
    llamacpp_session: ServerSession, live_share: float, swapped: bool
) -> None:
    """Swapped, the branch holds the replaced context; else a copy of what the live slot holds:
    either way no request comes back to it, and the request placed over it says so (the
    embedded engine then skips saving it into its RAM prompt cache)."""
    session = llamacpp_session
    warmer, before = attached_warmer(session)
    warm_nine_tenths(warmer)
    warmer.committed("p", replaced=True, live_prefix_share=live_share)
    warm_up = RequestTags("p").lookahead("g2")
    assert session.placement_fields(RequestTags("p"), "/v1/chat/completions") == {
        "id_slot": before.branch if swapped else before.current
    }
    assert session.placement_fields(warm_up, "/completion") == {
        "id_slot": before.current if swapped else before.branch,
        DISCARD_SLOT_PROMPT_FIELD: True,
    }
    assert DISCARD_SLOT_PROMPT_FIELD not in session.placement_fields(warm_up, "/completion")
    # A commit that keeps the live context (a spawn) retires nothing.
    warmer.committed("p", replaced=False)
    assert DISCARD_SLOT_PROMPT_FIELD not in session.placement_fields(warm_up, "/completion")


def test_after_a_synchronous_transform_both_slots_hold_dead_contexts(
    llamacpp_session: ServerSession,
) -> None:
    session = llamacpp_session
    warmer, pair = attached_warmer(session)
    warmer.committed_synchronously("p", replaced=False)
    assert DISCARD_SLOT_PROMPT_FIELD not in session.placement_fields(
        RequestTags("p"), "/completion"
    )
    warmer.committed_synchronously("p", replaced=True)
    for tags, slot in (
        (RequestTags("p"), pair.current),
        (RequestTags("p").lookahead("g"), pair.branch),
    ):
        assert session.placement_fields(tags, "/completion") == {
            "id_slot": slot,
            DISCARD_SLOT_PROMPT_FIELD: True,
        }
    # Rendering and tokenizing take no slot: they neither carry nor clear the mark.
    warmer.committed_synchronously("p", replaced=True)
    assert session.placement_fields(RequestTags("p"), "/apply-template") == {}
    assert session.placement_fields(RequestTags("p"), "/completion")[DISCARD_SLOT_PROMPT_FIELD]


async def test_a_warmer_connected_to_a_llamacpp_server_learns_its_slots_without_blocking(
    stub_server: RecordingProxy,
) -> None:
    from lookahead_sdk import LlamaCppWarmer

    stub_server.props = {"total_slots": 6, "default_generation_settings": {"n_ctx": 4096}}
    unprobed = LlamaCppWarmer(stub_server.url)  # a constructor makes no request
    assert unprobed.session.slots is None and stub_server.requests == []
    warmer = await LlamaCppWarmer.connect(stub_server.url)
    assert warmer.session.slots is not None and warmer.session.slots.total_slots == 6
    assert warmer.session.facts.window_tokens == 4096
    await warmer.aclose()
    await unprobed.aclose()


def test_shared_prefix_share_is_the_cached_part_in_tokens(approx_counter) -> None:
    from lookahead_sdk.core.state import MainState

    live = [{"role": "user", "content": "a " * 300}, {"role": "assistant", "content": "b " * 100}]
    state = MainState(live, token_counter=approx_counter)
    assert state.shared_prefix_share(live) == 1.0
    rewritten = [live[0], {"role": "assistant", "content": "c " * 100}]
    assert 0.6 < state.shared_prefix_share(rewritten) < 0.9
    assert state.shared_prefix_share([{"role": "user", "content": "x"}]) == 0.0


def test_best_effort_batches_shrink_until_one_takes_the_target_time() -> None:
    sizer = BatchSizer(target_s=0.05, initial_tokens=16, min_tokens=4)
    for _ in range(20):  # an engine whose batch costs 20 ms plus 5 ms a token
        batch = sizer.tokens
        batches = -(-200 // batch)
        sizer.observe(200, batches * (0.020 + 0.005 * batch), batch)
    assert sizer.tokens == 6  # 20 + 6 x 5 = 50 ms
    # The rate in those batches: 200 tokens in 34 of 50 ms.
    assert sizer.tokens_per_s == pytest.approx(200 / (-(-200 // 6) * 0.050), rel=0.01)
    for _ in range(20):  # a context so long that even the smallest batch is slower
        sizer.observe(200, 50 * 0.2, sizer.tokens)
    assert sizer.tokens == sizer.min_tokens


def test_best_effort_batches_grow_back_on_a_fast_engine() -> None:
    sizer = BatchSizer(target_s=0.05, initial_tokens=4, min_tokens=4, max_tokens=128)
    for _ in range(30):
        batch = sizer.tokens
        sizer.observe(512, -(-512 // batch) * 0.0002 * batch, batch)  # 0.2 ms a token
    assert sizer.tokens == 128


def test_batch_sizer_rejects_impossible_settings() -> None:
    with pytest.raises(ValueError, match="target_s"):
        BatchSizer(target_s=0)
    with pytest.raises(ValueError, match="min_tokens <= initial_tokens"):
        BatchSizer(min_tokens=32, initial_tokens=16)


async def test_best_effort_requests_to_llamacpp_carry_their_batch_size(
    stub_server: RecordingProxy,
) -> None:
    session = ServerSession(stub_server.url, wire="llamacpp")
    background = RequestTags("p", priority_class="be", is_lookahead=True, lookahead_group_id="g")
    assert "best_effort_batch_tokens" not in session.placement_fields(
        background, "/completion"
    )  # opt-in
    session.best_effort_batch = BatchSizer()
    client = AsyncOpenAI(
        base_url=f"{stub_server.url}/v1", api_key="x", http_client=session.async_http_client()
    )
    for tags in (RequestTags("p"), background):
        with use_tags(tags):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    foreground_body, background_body = stub_server.bodies("chat/completions")
    assert "best_effort_batch_tokens" not in foreground_body
    assert background_body["best_effort_batch_tokens"] == session.best_effort_batch.tokens
    openai_session = ServerSession(stub_server.url, wire="openai")
    openai_session.best_effort_batch = BatchSizer()
    assert "best_effort_batch_tokens" not in openai_session.placement_fields(
        background, "/completion"
    )


def program_with_summary_tags() -> tuple[SlotPairs, SlotPair, RequestTags, RequestTags]:
    """Program "p" with a slot pair; its lookahead's tags and its summary's."""
    pairs = SlotPairs(4)
    pair = pairs.enroll("p")
    assert pair is not None
    lookahead = RequestTags("p", priority_class="be", is_lookahead=True, lookahead_group_id="g")
    return pairs, pair, lookahead, lookahead.extending_live_context()


def test_the_request_after_a_summary_in_the_branch_discards_what_it_left_there() -> None:
    """The copy of the live context and the summary: the live slot holds that context."""
    pairs, pair, lookahead, summary = program_with_summary_tags()
    assert pairs.place(summary) == SlotPlacement(pair.current)  # in the live slot: kept
    assert pairs.place(RequestTags("p")) == SlotPlacement(pair.current)
    pairs.mirror_live("p", True)
    assert pairs.place(summary) == SlotPlacement(pair.branch)
    assert pairs.place(lookahead) == SlotPlacement(pair.branch, discard_held_prompt=True)
    assert pairs.place(lookahead) == SlotPlacement(pair.branch)  # the warm-up is kept


def test_a_summary_of_the_live_context_runs_in_the_branch_once_it_holds_a_copy() -> None:
    pairs, pair, _, summary = program_with_summary_tags()
    assert pairs.slot_for(summary) == pair.current  # only the live slot holds that context
    pairs.mirror_live("p", True)  # the warmer copied it into the branch
    assert pairs.slot_for(summary) == pair.branch
    assert pairs.slot_for(RequestTags("p")) == pair.current  # the agent stays in its slot
    pairs.mirror_live("p", False)  # a warm-up of another context went there
    assert pairs.slot_for(summary) == pair.current
    pairs.mirror_live("p", True)
    pairs.swap("p")  # a commit: the branch is the live slot now, the new branch holds nothing
    assert pairs.slot_for(summary) == pairs.pair("p").current  # type: ignore[union-attr]


def warmer_of_fixed_tokens(session: ServerSession, gate: SlackGate, tokens: int) -> LlamaCppWarmer:
    """A gated llama.cpp warmer with program "p" attached, whose every prompt renders to
    `tokens` token ids without asking the server."""
    from lookahead_sdk import LlamaCppWarmer

    warmer = LlamaCppWarmer(session, gate=gate)
    warmer.attach("p")

    async def render(*_: object, **__: object) -> str:
        return "rendered"

    warmer.render = render  # type: ignore[method-assign]
    prompts_render_to(warmer, tokens)
    return warmer


def prompts_render_to(warmer: LlamaCppWarmer, tokens: int) -> None:
    """From now on every prompt of `warmer_of_fixed_tokens`'s warmer renders to `tokens` ids."""

    async def tokenize(_: str) -> list[int]:
        return list(range(tokens))

    warmer._tokenize = tokenize  # type: ignore[method-assign]


async def test_a_copy_of_the_live_slot_waits_while_a_foreground_prompt_is_prefilled(
    stub_server: RecordingProxy,
) -> None:
    """A slot copy occupies the engine; sent while a foreground prompt waits for its first token
    it could be served first. It goes out once that prompt decodes."""
    from lookahead_sdk.core.warmer import RequestShape

    session = ServerSession(
        stub_server.url, wire="llamacpp", facts=ServerFacts(llamacpp=True, total_slots=4)
    )
    warmer = warmer_of_fixed_tokens(session, session.gate(), 300)
    prefilling = session.foreground.begin()  # another agent's prompt
    history = [{"role": "user", "content": "hi"}]
    try:
        with use_tags(RequestTags("p").best_effort()):
            copy = asyncio.create_task(warmer.fork_live("p", history, shape=RequestShape()))
            await asyncio.sleep(0.2)
            assert not copy.done()
            assert not [r for r in stub_server.requests if r.path.startswith("/slots/")]
            prefilling.first_token()
            assert await copy
        pair = session.slots.pair("p")  # type: ignore[union-attr]
        assert pair is not None
        assert [r.path for r in stub_server.requests] == [
            f"/slots/{pair.current}",  # save
            f"/slots/{pair.branch}",  # restore
        ]
    finally:
        prefilling.end()
        warmer.detach("p")
        await warmer.aclose()


def idle_gaps(
    registry: ForegroundRegistry, clock: VirtualClock, program_id: str, gaps: list[float]
) -> None:
    """`program_id` makes a request after each gap (its tool calls)."""
    for gap in gaps:
        clock.now += gap
        request = registry.begin(program_id)
        request.first_token()
        request.end()


def test_the_next_foreground_request_is_forecast_from_each_programs_own_gaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = VirtualClock(1000.0)
    monkeypatch.setattr("lookahead_sdk.client.slack.time.monotonic", clock)
    registry = ForegroundRegistry()
    registry.begin("agent").end()
    idle_gaps(registry, clock, "agent", [2.0, 2.0, 2.0])
    assert registry.forecast_requests() == []  # three gaps: too few to forecast
    idle_gaps(registry, clock, "agent", [2.5, 3.0, 2.2, 1.5])
    clock.now += 0.5
    assert registry.forecast_requests() == pytest.approx([1.0])  # shortest gap 1.5 s
    clock.now += 1.5
    assert registry.forecast_requests() == [0.0]  # due: the tool may return any moment
    clock.now += 5.0  # idle over twice its longest gap: no forecast, it is unlike the others
    assert registry.forecast_requests() == []

    in_flight = registry.begin("agent")  # a program with a request in flight forecasts nothing
    assert registry.forecast_requests() == []
    registry.begin("other").end()
    idle_gaps(registry, clock, "other", [4.0] * 4)
    clock.now += 1.0
    assert registry.forecast_requests() == pytest.approx([3.0])
    in_flight.end()
    # every idle program's, soonest first
    assert registry.forecast_requests() == pytest.approx([1.5, 3.0])
    assert registry.inflight == registry.prefilling == 0


def test_forecasts_forget_the_programs_idle_longest(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock(1000.0)
    monkeypatch.setattr("lookahead_sdk.client.slack.time.monotonic", clock)
    monkeypatch.setattr("lookahead_sdk.client.slack.PROGRAMS_FORECAST", 3)
    registry = ForegroundRegistry()
    for number in range(5):
        registry.begin(f"agent-{number}").end()
        idle_gaps(registry, clock, f"agent-{number}", [1.0] * 4)
    assert list(registry._idle_since) == ["agent-2", "agent-3", "agent-4"]
    assert set(registry._gaps) == {"agent-2", "agent-3", "agent-4"}


def test_a_program_that_ended_is_no_longer_forecast(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sub-agent's short gaps would forecast a request that never comes once it returned
    (`LookaheadRuntime.subagent_ended` detaches it from the warmer), shrinking every chunk and
    sending them in small batches for nothing."""
    from lookahead_sdk import LlamaCppWarmer

    clock = VirtualClock(1000.0)
    monkeypatch.setattr("lookahead_sdk.client.slack.time.monotonic", clock)
    session = ServerSession("http://127.0.0.1:9", wire="llamacpp")
    warmer = LlamaCppWarmer(session, gate=session.gate())
    registry = session.foreground
    for program_id, gap in (("main", 6.0), ("main/sub3", 0.5)):
        registry.begin(program_id).end()
        idle_gaps(registry, clock, program_id, [gap] * 4)
    # "main" has been idle through the sub-agent's 2 s.
    assert registry.forecast_requests() == pytest.approx([0.5, 4.0])
    warmer.detach("main/sub3")
    assert registry.forecast_requests() == pytest.approx([4.0])
    warmer.detach("main/sub3")  # idempotent
    assert registry.forecast_requests() == pytest.approx([4.0])


def test_a_chunk_forecast_to_meet_a_foreground_request_is_cut_to_end_before_it() -> None:
    sizer = ChunkSizer(target_s=0.4, min_tokens=128, initial_tokens_per_s=1000)
    assert sizer.next_tokens() == sizer.next_tokens(None) == sizer.next_tokens(5.0) == 400
    assert sizer.next_tokens(0.25) == 250
    assert sizer.next_tokens(0.0) == 128  # never below the smallest worth a forward pass


def test_a_released_program_resumes_its_pair_while_no_other_program_used_it() -> None:
    pairs = SlotPairs(4)
    pair = pairs.enroll("a")
    assert pair is not None
    pairs.slot_for(RequestTags("a").lookahead("g"))
    pairs.release("a", keep="branch record")
    # A program that enrolls and releases without sending anything leaves the slots as they were.
    pairs.enroll("fresh")
    pairs.release("fresh")
    kept = pairs.resume("a")
    resumed = pairs.pair("a")
    assert resumed is not None and (resumed.current, resumed.branch) == (pair.current, pair.branch)
    assert kept == "branch record"
    # Once another program's request was placed in one of them, the record is worthless.
    pairs.release("a", keep="branch record")
    other = pairs.enroll("b")
    assert other is not None and pair.current in (other.current, other.branch)
    pairs.slot_for(RequestTags("b"))
    pairs.slot_for(RequestTags("b").lookahead("h"))
    pairs.release("b")
    assert pairs.resume("a") is None
    # Parked pairs are bounded by the slots there are.
    for n in range(10):
        pairs.enroll(f"p{n}")
        pairs.release(f"p{n}", keep=n)
    assert pairs.resume("p9") == 9
    pairs.release("p9")
    assert pairs.resume("p0") is None


def test_a_warmer_gives_a_returning_program_its_branch_slot_and_what_it_holds(
    llamacpp_session: ServerSession,
) -> None:
    """The next run of a framework agent (a new model context, a new warmer from the same
    endpoint) loads the last run's ready lookahead: it must commit in the slot it was warmed in."""
    from lookahead_sdk import LlamaCppWarmer

    session = llamacpp_session
    assert session.slots is not None
    first, pair = attached_warmer(session)
    session.slots.slot_for(RequestTags("p"))
    warm_nine_tenths(first, finishing=True)
    first.detach("p")

    second = LlamaCppWarmer(session)
    second.attach("p")
    assert session.slots.pair("p") == pair
    second.committed("p", replaced=True, live_prefix_share=0.1)
    after = session.slots.pair("p")
    assert after is not None and after.current == pair.branch  # the warmed slot serves it


def test_what_a_warmer_finds_in_its_branch_is_the_sessions_slot_record(
    llamacpp_session: ServerSession,
) -> None:
    """One record per slot: a paired program's warmer reads the session's, which a request the
    server places itself invalidates; an unpaired one keeps its own until its commit."""
    from lookahead_sdk import LlamaCppWarmer

    session = llamacpp_session
    assert session.slots is not None
    warmer, pair = attached_warmer(session)
    warmer._branch_now_holds("p", [1, 2, 3])
    assert session.slots.holds(pair.branch) == (1, 2, 3)
    assert list(warmer._branch_holds("p")) == [1, 2, 3]
    session.slots.slot_for(RequestTags("unpaired"))  # the server chooses its slot
    assert list(warmer._branch_holds("p")) == []

    unpaired = LlamaCppWarmer(session)  # no attach: no slot pair
    unpaired._branch_now_holds("q", [4, 5])
    assert list(unpaired._branch_holds("q")) == [4, 5]
    assert all(cached.ids != (4, 5) for cached in session.slots.cached_prefixes())
    unpaired.committed("q", replaced=True)
    assert list(unpaired._branch_holds("q")) == []


async def test_best_effort_requests_go_out_after_the_model_call_their_program_announced(
    stub_server: RecordingProxy,
) -> None:
    """Without a gate (a server with its own admission), a warm-up started at the boundary that
    announced the agent's next model call reaches the server after that call, over real HTTP,
    so the server's admission sees the turn first; another program's work is not held, and an
    announced call that never comes holds it only `SEND_FIRST_WITHIN_S`."""
    from lookahead_sdk import SGLangWarmer
    from lookahead_sdk.client.slack import SEND_FIRST_WITHIN_S

    session = ServerSession(stub_server.url, wire="sglang")
    warmer = SGLangWarmer(session)
    client = session.async_http_client()
    url = f"{stub_server.url}/generate"
    try:
        warmer.model_call_next("p")
        assert session.foreground.announced("p")
        with use_tags(RequestTags("p").lookahead("g")):
            warm_up = asyncio.create_task(client.post(url, json={"text": "warm-up"}))
        with use_tags(RequestTags("q").lookahead("h")):
            await client.post(url, json={"text": "other program"})  # not held
        await asyncio.sleep(0.01)
        assert not warm_up.done()
        with use_tags(RequestTags("p")):
            await client.post(url, json={"text": "turn"})
        await warm_up
        assert [b["text"] for b in stub_server.bodies("/generate")] == [
            "other program",
            "turn",
            "warm-up",
        ]
        assert not session.foreground.announced("p")

        warmer.model_call_next("p")  # announced, never sent: the hold ends by itself
        started = time.perf_counter()
        with use_tags(RequestTags("p").lookahead("g")):
            await client.post(url, json={"text": "late"})
        assert SEND_FIRST_WITHIN_S <= time.perf_counter() - started < 1.0
        with use_tags(RequestTags("p").lookahead("g")):  # not a generation request: not held
            await client.post(f"{stub_server.url}/v1/tokenize", json={"text": "ids"})
    finally:
        await client.aclose()
        await warmer.aclose()


def test_a_sync_client_holds_best_effort_requests_the_same_way(
    stub_server: RecordingProxy,
) -> None:
    session = ServerSession(stub_server.url, wire="sglang")
    session.foreground.expect("p")
    with session.http_client() as client, use_tags(RequestTags("p").lookahead("g")):
        started = time.perf_counter()
        client.post(f"{stub_server.url}/generate", json={"text": "warm-up"})
        assert time.perf_counter() - started >= 0.04


@pytest.mark.parametrize(
    ("forecasts", "foreground_decoding", "small_batches"),
    [
        (
            [0.1],
            False,
            True,
        ),  # idle, a 128-token chunk (0.13 s) would meet the request due in 0.1 s
        ([5.0], False, False),  # idle, the request is forecast long after the chunk ends
        ([], False, False),  # nothing forecast
        ([0.1], True, False),  # a reply decodes: the engine is busy, batches stay the engine's
        # Another request forecast after that one: small batches (0.256 s at 500 tokens/s) only
        # when the chunk ends before it, so they slow one request's turn, not several.
        ([0.1, 5.0], False, True),
        ([0.1, 0.2], False, False),
    ],
)
async def test_a_chunk_that_may_meet_the_next_request_goes_in_small_batches(
    stub_server: RecordingProxy,
    forecasts: list[float],
    foreground_decoding: bool,
    small_batches: bool,
) -> None:
    """An idle engine's warm-up chunk still running when the next foreground request is forecast
    asks the embedded engine for small batches, so that request waits for one of them, not for a
    128-token batch (0.2-0.95 s on the CPU engine); unless, in them, it would still run when the
    request after that one comes."""
    from lookahead_sdk.core.warmer import RequestShape

    session = ServerSession(
        stub_server.url, wire="llamacpp", facts=ServerFacts(llamacpp=True, total_slots=4)
    )
    warmer = warmer_of_fixed_tokens(session, SlackGate(session.foreground, admit="decode"), 128)
    warmer.chunks.tokens_per_s = 1000.0
    assert warmer.yield_batches is not None
    warmer.yield_batches.tokens_per_s = 500.0
    session.foreground.forecast_requests = lambda: forecasts  # type: ignore[method-assign]
    reply = session.foreground.begin("other")
    reply.first_token()
    if not foreground_decoding:
        reply.end()
    try:
        with use_tags(RequestTags("p").best_effort()):
            await warmer.warm([{"role": "user", "content": "hi"}], shape=RequestShape())
        (chunk,) = stub_server.bodies("completion")
        assert chunk["prompt"] == list(range(128))
        assert ("best_effort_batch_tokens" in chunk) is small_batches
        if small_batches:
            assert warmer.yield_batches is not None
            assert chunk["best_effort_batch_tokens"] == warmer.yield_batches.tokens == 16
    finally:
        reply.end()
        warmer.detach("p")
        await warmer.aclose()


async def test_chunks_past_a_long_cached_context_go_in_the_warm_up_batches(
    stub_server: RecordingProxy,
) -> None:
    """With `warm_up_batch_tokens` set, a chunk extending 1K or more cached tokens asks for
    those batches; one from a short context keeps the engine's; a chunk near the next request
    keeps the small ones; without it (the default) every other chunk keeps the engine's."""
    from lookahead_sdk import LlamaCppWarmer
    from lookahead_sdk.client.warmers import LONG_CONTEXT_TOKENS
    from lookahead_sdk.core.warmer import RequestShape

    session = ServerSession(
        stub_server.url, wire="llamacpp", facts=ServerFacts(llamacpp=True, total_slots=4)
    )
    warmer = warmer_of_fixed_tokens(session, SlackGate(session.foreground, admit="decode"), 1600)
    warmer.chunks.tokens_per_s = 1000.0  # 0.4 s: 400-token chunks
    warmer.warm_up_batch_tokens = 32
    messages: list[Message] = [{"role": "user", "content": "hi"}]
    try:
        with use_tags(RequestTags("p").best_effort()):
            await warmer.warm(messages, shape=RequestShape())
        chunks = stub_server.bodies("completion")
        starts = [0, *(len(chunk["prompt"]) for chunk in chunks[:-1])]
        assert len(chunks) == 4
        for start, chunk in zip(starts, chunks, strict=True):
            expected = 32 if start >= LONG_CONTEXT_TOKENS else None
            assert chunk.get("best_effort_batch_tokens") == expected
        assert any(start < LONG_CONTEXT_TOKENS for start in starts)
        assert any(start >= LONG_CONTEXT_TOKENS for start in starts)

        # Near the next request (idle engine), the small batches win.
        session.foreground.forecast_requests = lambda: [0.01]  # type: ignore[method-assign]
        prompts_render_to(warmer, 1728)
        with use_tags(RequestTags("p").best_effort()):
            await warmer.warm(messages, shape=RequestShape())
        near = stub_server.bodies("completion")[-1]
        assert warmer.yield_batches is not None
        assert near["best_effort_batch_tokens"] == warmer.yield_batches.tokens == 16
    finally:
        warmer.detach("p")
        await warmer.aclose()

    off = LlamaCppWarmer(session, gate=session.gate())
    off.attach("q")
    off.render = warmer.render  # type: ignore[method-assign]
    prompts_render_to(off, 1600)
    off.chunks.tokens_per_s = 1000.0
    before = len(stub_server.bodies("completion"))
    try:
        with use_tags(RequestTags("q").best_effort()):
            await off.warm(messages, shape=RequestShape())
        assert all(
            "best_effort_batch_tokens" not in chunk
            for chunk in stub_server.bodies("completion")[before:]
        )
    finally:
        off.detach("q")
        await off.aclose()


@pytest.mark.parametrize("bad", [0, -32, 1.5, True, "32"])
def test_a_warm_up_batch_that_is_not_a_positive_count_is_refused(bad: object) -> None:
    from lookahead_sdk import LlamaCppWarmer

    session = ServerSession("http://127.0.0.1:9", wire="llamacpp")
    with pytest.raises(ValueError, match="warm_up_batch_tokens must be a positive number"):
        LlamaCppWarmer(session, warm_up_batch_tokens=bad)  # type: ignore[arg-type]


def test_a_warmer_can_keep_the_engines_batches_for_every_chunk() -> None:
    from lookahead_sdk import LlamaCppWarmer

    session = ServerSession("http://127.0.0.1:9", wire="llamacpp")
    warmer = LlamaCppWarmer(session, gate=session.gate(), yield_batches=False)
    assert not warmer._may_meet_next_request(4096, [0.0])
    assert LlamaCppWarmer(session, gate=session.gate())._may_meet_next_request(4096, [0.0])


async def test_a_commits_finish_also_stops_a_warm_up_of_its_lookahead_that_starts_later(
    stub_server: RecordingProxy,
    llamacpp_session: ServerSession,
) -> None:
    """A boundary just before a commit starts a warm-up of the suffix it appended; the commit
    asks the warmer to finish before that task has run. That warm-up must send nothing (the
    commit request prefills the suffix), or the commit waits for its chunks; a warm-up for the
    next lookahead, after the commit, warms as usual."""
    from lookahead_sdk.core.warmer import RequestShape

    session = llamacpp_session
    warmer = warmer_of_fixed_tokens(session, SlackGate(session.foreground, admit="decode"), 64)
    messages: list[Message] = [{"role": "user", "content": "hi"}]
    try:
        with use_tags(RequestTags("p").lookahead("g1")):
            await warmer.warm(messages, shape=RequestShape())  # the lookahead's first warm-up
        assert len(stub_server.bodies("completion")) == 1
        prompts_render_to(warmer, 96)  # the boundary appended a suffix
        assert warmer.finish_warm_up("p")  # the commit waits for g1's warm-up
        with use_tags(RequestTags("p").lookahead("g1")):
            late = await asyncio.wait_for(warmer.warm(messages, shape=RequestShape()), 5)
        assert not late.complete and len(stub_server.bodies("completion")) == 1
        warmer.committed("p", replaced=True)
        prompts_render_to(warmer, 128)
        with use_tags(RequestTags("p").lookahead("g2")):
            after = await warmer.warm(messages, shape=RequestShape())
        assert after.complete and len(stub_server.bodies("completion")) == 2
    finally:
        warmer.detach("p")
        await warmer.aclose()


async def test_a_commit_does_not_wait_for_a_chunk_that_other_programs_prompts_starve(
    stub_server: RecordingProxy,
    llamacpp_session: ServerSession,
) -> None:
    """While another program's latency-critical prompt waits for its first token the embedded
    engine gives best-effort prompts no batch: the chunk in flight is not worth the commit's
    wait (False: cancel it). Either way the warm-up sends no further chunk."""
    from lookahead_sdk.core.warmer import RequestShape

    session = llamacpp_session
    warmer = warmer_of_fixed_tokens(session, SlackGate(session.foreground, admit="decode"), 64)
    messages: list[Message] = [{"role": "user", "content": "hi"}]
    try:
        with use_tags(RequestTags("p").lookahead("g1")):
            await warmer.warm(messages, shape=RequestShape())
        session.foreground.expect("p")  # the commit's own model call does not count
        assert warmer.finish_warm_up("p")
        other = session.foreground.begin("q")  # another agent's prompt, prefilling
        assert not warmer.finish_warm_up("p")
        prompts_render_to(warmer, 96)
        with use_tags(RequestTags("p").lookahead("g1")):
            late = await asyncio.wait_for(warmer.warm(messages, shape=RequestShape()), 5)
        assert not late.complete and len(stub_server.bodies("completion")) == 1
        other.first_token()  # decoding: a chunk runs beside it again
        assert warmer.finish_warm_up("p")
        other.end()
    finally:
        warmer.detach("p")
        await warmer.aclose()


async def test_a_warm_up_for_another_lookahead_is_not_held_by_an_earlier_finish(
    stub_server: RecordingProxy,
    llamacpp_session: ServerSession,
) -> None:
    from lookahead_sdk.core.warmer import RequestShape

    session = llamacpp_session
    warmer = warmer_of_fixed_tokens(session, SlackGate(session.foreground, admit="decode"), 64)
    try:
        with use_tags(RequestTags("p").lookahead("g1")):
            await warmer.warm([{"role": "user", "content": "hi"}], shape=RequestShape())
        warmer.finish_warm_up("p")  # a commit that ends without `committed` (a fallback)
        prompts_render_to(warmer, 96)
        with use_tags(RequestTags("p").lookahead("g2")):
            result = await warmer.warm([{"role": "user", "content": "hi"}], shape=RequestShape())
        assert result.complete and len(stub_server.bodies("completion")) == 2
    finally:
        warmer.detach("p")
        await warmer.aclose()

"""The request timeline: what a session's transports record, and how a wait is split by cause."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai import AsyncOpenAI

from lookahead_sdk import RequestTags, ServerSession, use_tags
from lookahead_sdk.client.timeline import (
    TURN_WAIT_CAUSES,
    WAIT_CAUSES,
    RequestTimeline,
    TimelineEntry,
    background_overlap,
    engine_idle_gaps,
    engine_idle_s,
    first_output_after,
    mean_background,
    reply_decode_s,
    request_answered_at,
    request_kind,
    summed_turn_waits,
    turn_wait,
    turn_waits_by_kind,
    wait_behind,
)

from ..support.recording_proxy import RecordingProxy


def entry(kind, program, sent, first, ended) -> TimelineEntry:
    return TimelineEntry(kind, program, "/x", sent, first, ended)


def test_each_kind_of_request_is_told_apart_by_path_and_priority() -> None:
    assert request_kind("/v1/chat/completions", foreground=True, generation=True) == "foreground"
    assert request_kind("/completion", foreground=False, generation=True) == "warm_up"
    assert request_kind("/generate", foreground=False, generation=True) == "warm_up"
    assert request_kind("/v1/chat/completions", foreground=False, generation=True) == (
        "background_llm"
    )
    assert request_kind("/slots/3", foreground=False, generation=False) == "slot_copy"
    assert request_kind("/apply-template", foreground=False, generation=False) == "other"


def test_a_wait_goes_to_the_background_work_beside_it_first_then_other_programs() -> None:
    entries = [
        entry("foreground", "me", 0.0, 1.0, 2.0),  # the request itself
        entry("warm_up", "other", -1.0, 0.2, 0.2),  # 0.0-0.2
        entry("background_llm", "me", 0.1, 0.5, 0.5),  # 0.2-0.5 (0.1-0.2 is the warm-up's)
        entry("foreground", "you", 0.4, 0.45, 0.7),  # 0.5-0.7 (decoding still counts)
        entry("slot_copy", "me", 0.9, 0.95, 0.95),  # 0.9-0.95
        entry("warm_up", "late", 1.5, 1.6, 1.6),  # after the first token: not counted
    ]
    split = wait_behind((0.0, 1.0), "me", entries, now=3.0)
    assert split == pytest.approx(
        {
            "warm_up": 0.2,
            "background_llm": 0.3,
            "slot_copy": 0.05,
            "other_foreground": 0.2,
            "alone": 0.25,
        }
    )


def test_a_framework_turn_is_placed_on_the_request_its_first_token_answered() -> None:
    """A framework loop stamps its hook and first token only: the request between them is the
    last foreground one sent before that token; the time before it is the commit's."""
    entries = [
        entry("foreground", "me", 0.0, 0.4, 0.9),  # the turn before
        entry("background_llm", "me", 1.0, 1.3, 1.6),  # a synchronous summary (best-effort)
        entry("foreground", "me", 1.7, 2.4, 2.9),  # this turn's request
        entry("warm_up", "me", 1.5, 1.9, 1.9),
    ]
    request = request_answered_at(2.4, entries)
    assert request is entries[2]
    split = turn_wait(1.0, request.sent_at, 2.4, "me", entries, now=3.0)
    assert split == pytest.approx(
        {
            "before_request": 0.7,
            "warm_up": 0.2,
            "background_llm": 0.0,
            "slot_copy": 0.0,
            "other_foreground": 0.0,
            "alone": 0.5,
        }
    )
    assert sum(split.values()) == pytest.approx(2.4 - 1.0)
    assert request_answered_at(-1.0, entries) is None


def test_a_model_calls_first_token_is_its_requests_first_output() -> None:
    """AutoGen hands a streamed tool call over once complete: the first token is when the
    engine's reply to the call's request began, not a background request's or an earlier one's."""
    entries = [
        entry("foreground", "me", 0.2, 0.9, 1.4),  # the turn before
        entry("warm_up", "me", 1.05, 1.2, 1.3),  # the commit's warm-up, sent after the call
        entry("foreground", "me", 1.1, 1.6, 2.8),  # the call's request: streams from 1.6
        entry("foreground", "me", 3.0, None, None),  # the next call, not begun
    ]
    assert first_output_after(1.0, entries) == 1.6
    assert first_output_after(2.9, entries) is None
    assert first_output_after(5.0, entries) is None


def test_runs_pool_into_per_turn_sums_and_per_run_background() -> None:
    waits = [
        {"normal": {"alone": 1.0}},
        {"normal": {"alone": 2.0, "warm_up": 0.5}, "transform": {"alone": 3.0}},
    ]
    assert summed_turn_waits(waits) == {
        "normal": {"alone": 3.0, "warm_up": 0.5},
        "transform": {"alone": 3.0},
    }
    loads = [
        {"warm_up": {"requests": 4, "seconds": 2.0}},
        {"warm_up": {"requests": 6, "seconds": 4.0}},
    ]
    assert mean_background(loads) == {"warm_up": {"requests": 5.0, "seconds": 3.0}}


def test_turn_splits_sum_per_kind_and_cause_and_unsent_turns_count_nowhere() -> None:
    splits = [
        ("normal", {"before_request": 0.0, "alone": 1.0}),
        ("transform", {}),  # its request never went out
        ("normal", {"before_request": 0.5, "alone": 2.0, "warm_up": 0.25}),
    ]
    sums = turn_waits_by_kind(splits)
    assert set(sums) == {"normal"}
    assert set(sums["normal"]) == set(TURN_WAIT_CAUSES)
    assert sums["normal"]["before_request"] == 0.5
    assert sums["normal"]["alone"] == 3.0
    assert sums["normal"]["warm_up"] == 0.25
    assert sum(sums["normal"].values()) == 3.75
    assert turn_waits_by_kind([]) == {}


def test_an_unfinished_request_counts_until_now() -> None:
    entries = [entry("warm_up", "p", 0.0, None, None)]
    assert wait_behind((0.5, 2.0), "q", entries, now=1.0)["warm_up"] == pytest.approx(0.5)


intervals = st.tuples(
    st.sampled_from(["warm_up", "background_llm", "slot_copy", "foreground", "other"]),
    st.sampled_from(["me", "you"]),
    st.floats(0, 10),
    st.floats(0, 5),
)


@given(st.lists(intervals, max_size=12), st.floats(0, 10), st.floats(0.001, 5))
def test_the_causes_always_add_up_to_the_wait(raw, start, length) -> None:
    entries = [entry(kind, p, s, s + d / 2, s + d) for kind, p, s, d in raw]
    split = wait_behind((start, start + length), "me", entries, now=100.0)
    assert set(split) == set(WAIT_CAUSES)
    assert sum(split.values()) == pytest.approx(length)
    assert all(seconds >= 0 for seconds in split.values())


def test_background_time_during_a_foreground_wait_is_measured() -> None:
    entries = [
        entry("foreground", "a", 0.0, 1.0, 3.0),
        entry("foreground", "b", 0.5, 1.5, 3.0),  # waits are 0.0-1.5 together
        entry("warm_up", "c", 1.0, 2.0, 2.0),  # 0.5 of its 1.0 during a wait
        entry("warm_up", "c", 2.0, 2.5, 2.5),  # none
        entry("slot_copy", "c", 0.0, 0.1, 0.1),
    ]
    loads = background_overlap(entries, now=5.0)
    assert loads["warm_up"].requests == 2
    assert loads["warm_up"].seconds == pytest.approx(1.5)
    assert loads["warm_up"].during_foreground_wait_s == pytest.approx(0.5)
    assert loads["slot_copy"].during_foreground_wait_s == pytest.approx(0.1)
    assert loads["background_llm"].requests == 0
    # The first warm-up's other half ran while both replies decoded (1.5-3.0), as did the
    # second one all along; the copy ran only during a wait.
    assert loads["warm_up"].during_foreground_decode_s == pytest.approx(1.0)
    assert loads["slot_copy"].during_foreground_decode_s == pytest.approx(0.0)


def test_background_time_is_split_between_waits_decodes_and_idle_time() -> None:
    entries = [
        entry("foreground", "a", 0.0, 1.0, 2.0),
        entry("warm_up", "c", 0.5, 3.0, 3.0),  # 0.5 wait, 1.0 decode, 1.0 idle
    ]
    [warm_up] = [background_overlap(entries, now=5.0)["warm_up"]]
    assert warm_up.during_foreground_wait_s == pytest.approx(0.5)
    assert warm_up.during_foreground_decode_s == pytest.approx(1.0)
    unfinished = [entry("foreground", "a", 0.0, None, None), entry("warm_up", "c", 0.0, 1.0, 1.0)]
    [still_waiting] = [background_overlap(unfinished, now=5.0)["warm_up"]]
    assert still_waiting.during_foreground_decode_s == pytest.approx(0.0)


def test_background_time_in_small_batches_is_counted_apart() -> None:
    small = entry("warm_up", "c", 0.5, 3.0, 3.0)  # 0.5 wait, 1.0 decode, 1.0 idle
    small.batch_tokens = 16
    entries = [
        entry("foreground", "a", 0.0, 1.0, 2.0),
        small,
        entry("warm_up", "c", 4.0, 4.5, 4.5),  # the engine's batches, idle
    ]
    warm_up = background_overlap(entries, now=5.0)["warm_up"]
    assert (warm_up.requests, warm_up.small_batch_requests) == (2, 1)
    assert warm_up.seconds == pytest.approx(3.0)
    assert warm_up.small_batch_seconds == pytest.approx(2.5)
    assert warm_up.small_batch_during_foreground_decode_s == pytest.approx(1.0)


def test_reply_decoding_is_summed_from_first_output_to_end() -> None:
    entries = [
        entry("foreground", "a", 0.0, 1.0, 3.0),  # 2.0
        entry("foreground", "b", 0.0, 4.0, None),  # still decoding at 5.0: 1.0
        entry("foreground", "b", 0.0, None, None),  # still waiting: none
        entry("warm_up", "c", 0.0, 0.5, 4.0),  # not a reply
    ]
    assert reply_decode_s(entries, now=5.0) == pytest.approx(3.0)


def test_engine_idle_time_is_the_run_with_no_engine_request_in_flight() -> None:
    entries = [
        entry("foreground", "a", 1.0, 1.5, 3.0),
        entry("warm_up", "b", 2.5, 4.0, 4.0),  # overlaps the reply: busy 1.0-4.0
        entry("other", "b", 5.0, 5.1, 5.1),  # a tokenize call does not occupy the engine
        entry("slot_copy", "a", 6.0, 6.2, 6.2),
        entry("foreground", "a", 9.0, 9.5, None),  # still running at the end: busy 9-10
        entry("warm_up", "c", -2.0, -1.0, -1.0),  # before the run
    ]
    idle = engine_idle_s(entries, started_at=0.0, ended_at=10.0)
    assert idle == pytest.approx(10.0 - 3.0 - 0.2 - 1.0)
    gaps = engine_idle_gaps(entries, started_at=0.0, ended_at=10.0)
    assert [edge for gap in gaps for edge in gap] == pytest.approx([0.0, 1.0, 4.0, 6.0, 6.2, 9.0])
    assert engine_idle_s([], started_at=0.0, ended_at=10.0) == pytest.approx(10.0)


@given(st.lists(intervals, max_size=12), st.floats(0, 50), st.floats(0, 60))
def test_engine_idle_time_stays_within_the_run(raw, start, length) -> None:
    entries = [entry(kind, p, s, s + d / 2, s + d) for kind, p, s, d in raw]
    idle = engine_idle_s(entries, started_at=start, ended_at=start + length)
    assert 0.0 <= idle <= length + 1e-9
    engine = [e for e in entries if e.kind != "other"]
    if not any(e.sent_at < start + length and e.ended_at > start for e in engine):
        assert idle == pytest.approx(length)


@given(st.lists(intervals, max_size=12))
def test_background_time_during_waits_and_decodes_never_exceeds_its_run(raw) -> None:
    entries = [entry(kind, p, s, s + d / 2, s + d) for kind, p, s, d in raw]
    for load in background_overlap(entries, now=100.0).values():
        assert 0 <= load.during_foreground_decode_s
        assert load.during_foreground_wait_s + load.during_foreground_decode_s <= (
            load.seconds + 1e-9
        )


async def test_the_sessions_transports_record_every_request_with_its_kind_and_times() -> None:
    with RecordingProxy() as server:
        session = ServerSession(server.url, wire="llamacpp")  # its warm-ups may cap batches
        session.timeline = RequestTimeline()
        http = session.async_http_client()
        client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", http_client=http)
        with use_tags(RequestTags("p")):
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            [foreground] = session.timeline.entries
            assert foreground.kind == "foreground" and foreground.first_output_at is None
            async for _ in stream:
                pass
        with use_tags(
            RequestTags("p", priority_class="be", is_lookahead=True, lookahead_group_id="g")
        ):
            await http.post(f"{server.url}/completion", json={"prompt": "x", "n_predict": 0})
            await http.post(
                f"{server.url}/completion",
                json={"prompt": "x", "n_predict": 0, "best_effort_batch_tokens": 16},
            )
            await http.post(f"{server.url}/slots/1?action=save", json={"filename": "f"})
        outside = httpx.AsyncClient()
        await outside.get(f"{server.url}/health")  # another client: not this session's
        await outside.aclose()
        await http.aclose()

        kinds = [(e.kind, e.program_id) for e in session.timeline.entries]
        assert kinds == [
            ("foreground", "p"),
            ("warm_up", "p"),
            ("warm_up", "p"),
            ("slot_copy", "p"),
        ]
        # The batch cap a best-effort prompt asked for is recorded with it.
        assert [e.batch_tokens for e in session.timeline.entries] == [None, None, 16, None]
        for recorded in session.timeline.entries:
            assert recorded.ended_at is not None and recorded.first_output_at is not None
            assert recorded.sent_at <= recorded.first_output_at <= recorded.ended_at
        assert session.foreground.inflight == 0  # the foreground count still ends

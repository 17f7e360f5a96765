"""`RunTrace`: one run's turns and requests on one clock, each turn's TTFT split by cause."""

from __future__ import annotations

import json

import pytest

from lookahead_sdk.agent.loop import TurnRecord
from lookahead_sdk.agent.run_trace import RunTrace
from lookahead_sdk.client.timeline import TURN_WAIT_CAUSES, TimelineEntry
from lookahead_sdk.core.runtime import CommitKind

START = 1000.0  # a perf_counter reading: the trace counts from it


def turn(
    program: str, step: int, started: float, sent: float, first: float, commit: CommitKind
) -> TurnRecord:
    return TurnRecord(
        agent="main",
        step=step,
        ttft_s=first - started,
        commit=commit,
        context_tokens=1000,
        prompt_tokens=1000,
        cached_tokens=800,
        new_tokens=200,
        started_at=START + started,
        sent_at=START + sent,
        first_token_at=START + first,
        program_id=program,
    )


def request(
    kind: str, program: str, sent: float, first: float | None, ended: float | None
) -> TimelineEntry:
    return TimelineEntry(
        kind,  # type: ignore[arg-type]
        program,
        "/completion" if kind == "warm_up" else "/v1/chat/completions",
        START + sent,
        None if first is None else START + first,
        None if ended is None else START + ended,
    )


def test_a_commit_turn_shows_its_wait_before_the_request_and_what_ran_beside_it() -> None:
    turns = [
        # Listed out of order: the trace sorts turns by start and requests by sending.
        turn("a", 1, started=5.0, sent=7.0, first=8.0, commit=CommitKind.HIT),
        turn("a", 0, started=0.0, sent=0.0, first=0.5, commit=CommitKind.NONE),
    ]
    requests = [
        request("foreground", "a", 7.0, 8.0, 9.0),
        request("foreground", "a", 0.0, 0.5, 2.0),
        # Another program's reply decoding while "a"'s commit request waits for its first token,
        # and a warm-up still running when the run ends.
        request("foreground", "b", 6.5, 6.8, 7.6),
        request("warm_up", "b", 7.6, None, None),
    ]
    requests[-1].batch_tokens = 16  # sent in small batches
    document = RunTrace(turns, requests, START, START + 10.0).to_json()
    json.dumps(document, allow_nan=False)

    assert document["duration_s"] == 10.0
    assert [t["step"] for t in document["turns"]] == [0, 1]
    assert [r["sent_s"] for r in document["requests"]] == [0.0, 6.5, 7.0, 7.6]
    assert document["requests"][-1]["ended_s"] is None
    assert [r["batch_tokens"] for r in document["requests"]] == [None, None, None, 16]
    first, commit = document["turns"]
    assert commit["commit"] == "hit" and commit["ttft_s"] == 3.0
    assert (commit["started_s"], commit["sent_s"], commit["first_token_s"]) == (5.0, 7.0, 8.0)
    wait = commit["wait_s"]
    assert set(wait) == set(TURN_WAIT_CAUSES)
    assert wait["before_request"] == 2.0
    # 7.0-7.6 beside b's reply, then 7.6-8.0 beside b's warm-up.
    assert wait["other_foreground"] == pytest.approx(0.6)
    assert wait["warm_up"] == pytest.approx(0.4)
    for traced in (first, commit):
        assert sum(traced["wait_s"].values()) == pytest.approx(traced["ttft_s"])


def test_a_trace_whose_end_precedes_its_start_is_refused() -> None:
    with pytest.raises(ValueError, match="ended_at"):
        RunTrace([], [], START, START - 1.0)

from __future__ import annotations

import json
import threading
import time

import pytest

from lookahead_sdk import CommitKind, LookaheadRuntime, LookaheadStatus, RequestTags, use_tags
from lookahead_sdk.core.sync_runtime import SyncLookaheadRuntime

from .policies import CountingPolicy, drop_middle, user


def test_sync_runtime_runs_lookaheads_between_blocking_calls(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9, delays=[0.05])
    with use_tags(RequestTags("sync-agent")):
        runtime = SyncLookaheadRuntime(policy, messages=[user("t")], token_counter=approx_counter)
    assert runtime.runtime.tags.program_id == "sync-agent"
    for i in range(5):
        runtime.append(user(f"a{i}"))
    runtime.boundary()
    time.sleep(0.2)  # the transform runs on the runtime's thread while the caller is busy
    assert runtime.lookahead.status is LookaheadStatus.READY
    for i in range(3):
        runtime.append(user(f"b{i}"))
    before = list(runtime.main.messages)
    outcome = runtime.commit()
    assert outcome.kind is CommitKind.HIT
    assert (
        outcome.messages
        == drop_middle(before[: outcome.covered_end]) + before[outcome.covered_end :]
    )
    runtime.close()
    assert not any(t.name == "lookahead-runtime" and t.is_alive() for t in threading.enumerate())


def test_sync_runtime_surfaces_construction_errors() -> None:
    with pytest.raises(ValueError, match="mode"):
        SyncLookaheadRuntime(CountingPolicy(), mode="eager")


async def test_state_round_trip_keeps_a_ready_lookahead_committable(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9)
    first = LookaheadRuntime(
        policy, messages=[user("t")], token_counter=approx_counter, tags=RequestTags("p")
    )
    first.append(*[user(f"a{i}") for i in range(5)])
    await first.boundary()
    await first.settle()
    saved = json.loads(json.dumps(first.save_state()))  # JSON-safe
    await first.aclose()

    second = LookaheadRuntime(policy, token_counter=approx_counter, tags=RequestTags("p"))
    second.load_state(saved)
    assert second.lookahead.status is LookaheadStatus.READY and second.main.turn == first.main.turn
    second.append(*[user(f"b{i}") for i in range(3)])
    before = list(second.main.messages)
    outcome = await second.commit()
    assert outcome.kind is CommitKind.HIT
    assert outcome.messages == drop_middle(before[:6]) + before[6:]
    await second.aclose()


async def test_restored_result_is_not_committed_onto_a_different_history(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9)
    first = LookaheadRuntime(policy, messages=[user("t")], token_counter=approx_counter)
    first.append(*[user(f"a{i}") for i in range(5)])
    await first.boundary()
    await first.settle()
    saved = first.save_state()
    await first.aclose()
    saved["messages"][2] = user("tampered")
    second = LookaheadRuntime(policy, token_counter=approx_counter)
    second.load_state(saved)
    second.append(*[user(f"b{i}") for i in range(3)])
    outcome = await second.commit()
    assert outcome.kind is CommitKind.FALLBACK and outcome.reason == "stale"
    await second.aclose()


async def test_load_state_rejects_foreign_state(approx_counter) -> None:
    runtime = LookaheadRuntime(CountingPolicy(), token_counter=approx_counter)
    with pytest.raises(ValueError, match="save_state"):
        runtime.load_state({"messages": []})
    await runtime.aclose()

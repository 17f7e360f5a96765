from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from typing import Any

import pytest

from lookahead_sdk import (
    CommitKind,
    LookaheadRuntime,
    LookaheadStatus,
    RequestTags,
    StateError,
    use_tags,
)
from lookahead_sdk.base.tokens import count_message
from lookahead_sdk.core.state import LookaheadState, MainState
from lookahead_sdk.core.sync_runtime import SyncLookaheadRuntime
from lookahead_sdk.strategies import KeepRecent, Summarize

from ..support.clock import VirtualClock
from .policies import CountingPolicy, FakeSummarizer, RecordingWarmer, drop_middle, user
from .test_commit_ahead import START, model_turn, tool_output


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


async def ready_state(approx_counter, policy: CountingPolicy, **runtime_kwargs) -> dict:
    """The JSON-safe saved state of a runtime whose lookahead is ready (six messages)."""
    first = LookaheadRuntime(
        policy, messages=[user("t")], token_counter=approx_counter, **runtime_kwargs
    )
    first.append(*[user(f"a{i}") for i in range(5)])
    await first.boundary()
    await first.settle()
    saved = json.loads(json.dumps(first.save_state()))
    await first.aclose()
    return saved


async def test_state_round_trip_keeps_a_ready_lookahead_committable(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9)
    saved = await ready_state(approx_counter, policy, tags=RequestTags("p"))

    second = LookaheadRuntime(policy, token_counter=approx_counter, tags=RequestTags("p"))
    second.load_state(saved)
    assert second.lookahead.status is LookaheadStatus.READY and second.main.turn == saved["turn"]
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


class _AttachLog:
    """A warmer that records the programs attached and detached."""

    def __init__(self) -> None:
        from lookahead_sdk.core.warmer import Warmer

        self.events: list[tuple[str, str]] = []
        log = self.events

        class Recorder(Warmer):
            def attach(self, program_id: str) -> None:
                log.append(("attach", program_id))

            def detach(self, program_id: str) -> None:
                log.append(("detach", program_id))

        self.warmer = Recorder()


async def test_a_fresh_runtime_continues_the_saved_program_under_its_id(approx_counter) -> None:
    policy = CountingPolicy(soft=5, hard=9)
    saved = await ready_state(approx_counter, policy, tags=RequestTags("run-1"))
    assert saved["program_id"] == "run-1"

    recorder = _AttachLog()
    second = LookaheadRuntime(
        policy, token_counter=approx_counter, tags=RequestTags("gen-2"), warmer=recorder.warmer
    )
    second.load_state(saved, adopt_program_id=True)
    assert second.program_id == "run-1"
    assert recorder.events == [("attach", "gen-2"), ("detach", "gen-2"), ("attach", "run-1")]
    assert second.lookahead.status is LookaheadStatus.READY
    await second.aclose()
    assert recorder.events[-1] == ("detach", "run-1")

    # Not asked to (the user named the program), or no longer fresh: the id stays.
    kept = LookaheadRuntime(policy, token_counter=approx_counter, tags=RequestTags("mine"))
    kept.load_state(saved)
    assert kept.program_id == "mine"
    await kept.aclose()
    busy = LookaheadRuntime(policy, token_counter=approx_counter, tags=RequestTags("busy"))
    busy.append(user("x"))
    await busy.boundary()
    busy.load_state(saved, adopt_program_id=True)
    assert busy.program_id == "busy"
    await busy.aclose()


async def test_a_saved_program_id_that_is_not_an_id_leaves_the_runtime_as_it_was(
    approx_counter,
) -> None:
    policy = CountingPolicy(soft=5, hard=9)
    first = LookaheadRuntime(policy, messages=[user("t")], token_counter=approx_counter)
    saved = first.save_state()
    await first.aclose()
    saved["program_id"] = "bad\nid"
    second = LookaheadRuntime(
        policy, messages=[user("s")], token_counter=approx_counter, tags=RequestTags("gen")
    )
    before = list(second.main.messages)
    with pytest.raises(ValueError, match=r"state\.program_id"):
        second.load_state(saved, adopt_program_id=True)
    assert second.program_id == "gen" and list(second.main.messages) == before
    await second.aclose()


async def test_a_restored_result_warms_the_suffix_that_arrives_after_it(approx_counter) -> None:
    """The next run of an agent loads a result warmed in the last one: the turns that come
    before its commit are warmed onto it, as in one run (otherwise the commit prefills them)."""
    policy = CountingPolicy(soft=5, hard=20)
    saved = await ready_state(approx_counter, policy, warmer=RecordingWarmer())
    assert saved["lookahead"]["warmed_end"] == 6

    warmer = RecordingWarmer()
    second = LookaheadRuntime(policy, token_counter=approx_counter, warmer=warmer)
    second.load_state(saved)
    second.append(user("b0"))
    await second.boundary()
    await second.settle()
    assert len(warmer.warmed) == 1 and warmer.warmed[0][-1] == user("b0")
    assert second.lookahead.warmed_end == 7
    await second.aclose()

    saved["lookahead"]["warmed_end"] = 99  # past the saved history: refused, nothing changed
    third = LookaheadRuntime(policy, token_counter=approx_counter)
    with pytest.raises(ValueError, match="warmed_end"):
        third.load_state(saved)
    assert third.lookahead.status is LookaheadStatus.IDLE
    await third.aclose()


def test_a_standby_result_takes_over_only_from_a_running_or_failed_redo() -> None:
    main = MainState(
        [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        window_tokens=1000,
    )
    standby = LookaheadState()
    standby.start(main.snapshot(), "g:0", kept_from=2)
    standby.ready([{"role": "user", "content": "summary"}], {"summary": "x"})
    standby.warmed(2)
    redo = LookaheadState()
    redo.start(main.snapshot(), "g:1", kept_from=2)
    redo.take_over(standby)
    assert redo.status is LookaheadStatus.READY and redo.group_id == "g:0"
    assert redo.messages == standby.messages and redo.kept_from == 2
    assert redo.warmed_end is None  # the redo may have overwritten what its warm-up left
    with pytest.raises(StateError, match="running or failed"):
        redo.take_over(standby)  # a ready result is not a redo
    idle = LookaheadState()
    idle.start(main.snapshot(), "g:2")
    with pytest.raises(StateError, match="must be ready"):
        idle.take_over(LookaheadState())
    assert idle.status is LookaheadStatus.RUNNING and idle.group_id == "g:2"


@pytest.mark.parametrize(
    ("name", "seed", "save_at"), [("keep_recent", 2, 12), ("summarize", 5, 40)]
)
def test_a_restored_runtime_commits_where_the_original_does(
    name: str, seed: int, save_at: int, approx_counter
) -> None:
    """What the runtime learned of the agent's pace (growth per turn, how long lookaheads take,
    tokens per second) travels in the saved state: fed the same turns at the same times, a
    runtime restored mid-run from JSON makes the original's commits, turn for turn and size for
    size. (Before, it learned afresh: these runs made 9 commits where the original made 10,
    and 3 where it made 2.)"""

    async def scenario() -> tuple[list[tuple[int, str, int]], list[tuple[int, str, int]]]:
        draw = random.Random(seed)
        outputs = [draw.choice((60, 120, 400, 900)) for _ in range(60)]
        clock = VirtualClock()

        def runtime(**kwargs: Any) -> LookaheadRuntime:
            policy = (
                KeepRecent(budget=2000, hard_limit=4000, lookahead_at=2400)
                if name == "keep_recent"
                else Summarize(recent_budget=1200, hard_limit=4000, lookahead_at=2400)
            )
            made = LookaheadRuntime(
                policy,
                window_tokens=8192,
                token_counter=approx_counter,
                summarizer=FakeSummarizer(),
                **kwargs,
            )
            made.clock = clock
            return made

        original, restored = runtime(messages=START), None
        logs: tuple[list[tuple[int, str, int]], list[tuple[int, str, int]]] = ([], [])
        for step, size in enumerate(outputs):
            if step == save_at:
                restored = runtime(tags=original.tags)
                restored.load_state(json.loads(json.dumps(original.save_state())))
            for log, live in zip(logs, (original, restored), strict=True):
                outcome = await live.commit() if live is not None else None
                if outcome is not None and outcome.committed and step >= save_at:
                    tokens = sum(count_message(approx_counter, m) for m in outcome.messages)
                    log.append((step, outcome.kind.value, tokens))
            for message in (model_turn(step), tool_output(step, size)):
                clock.now += 1.0
                for live in (original, restored):
                    if live is not None:
                        live.append(message)
                        await live.boundary()
                        await live.settle()
        assert restored is not None
        await original.aclose()
        await restored.aclose()
        return logs

    original, restored = asyncio.run(scenario())
    assert len(original) >= 2
    assert restored == original


def test_a_closed_sync_runtime_says_so_and_still_saves_its_state() -> None:
    runtime = SyncLookaheadRuntime(CountingPolicy(), messages=[user("task")])
    runtime.close()
    for call in (lambda: runtime.append(user("x")), runtime.boundary, runtime.prepare):
        with pytest.raises(StateError, match="closed"):
            call()
    assert runtime.save_state()["messages"] == [user("task")]


def test_the_sync_runtime_offers_what_the_async_one_does() -> None:
    public = {name for name in dir(LookaheadRuntime) if not name.startswith("_")}
    asynchronous_only = {"aclose", "clock"}  # the sync runtime closes with close()
    assert public - asynchronous_only <= set(dir(SyncLookaheadRuntime))

"""An Offload hit commits what a synchronous Offload commits, even when its warm-up spanned the
boundary that brought the next large output (four agents on a CPU engine: a redo queued behind a
long warm-up, so the hit kept that output whole, 183 tokens over the synchronous commit, and the
history crossed the limit a turn early: one commit more than the synchronous run)."""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk import CommitKind, OffloadStore, TransformContext
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tokens import count_message
from lookahead_sdk.core.policy import Pipeline, TransformResult
from lookahead_sdk.core.warmer import RequestShape, WarmupResult, WarmupSpend
from lookahead_sdk.strategies import KeepRecent, Offload

from .policies import RecordingWarmer
from .test_commit_ahead import (
    COUNTER,
    HARD,
    WINDOW,
    model_turn,
    tool_output,
    workload_runtime,
)

THRESHOLD = 300
# Ordinary reads and outputs large enough to be offloaded.
OUTPUT_SIZES = (60, 120, 400, 900)


class GatedWarmer(RecordingWarmer):
    """A warm-up runs until the test opens the gate: closed, it spans the next boundaries."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        await self.gate.wait()
        return await super().warm(messages, shape=shape, open_last=open_last, spend=spend)


@dataclass
class Run:
    commits: int = 0
    hits: int = 0
    resized: int = 0
    kinds: list[CommitKind] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)  # (committed, synchronous)


def tokens(messages: Sequence[Message]) -> int:
    return sum(count_message(COUNTER, message) for message in messages)


async def run(mode: str, outputs: list[int], settles: list[bool], store_dir: Path) -> Run:
    """The reference loop's boundaries; after each, the warm-up in flight either finishes
    (`settles`) or keeps running into the next boundary, which then queues behind it."""
    store = OffloadStore(store_dir)
    policy = Offload(threshold=THRESHOLD, hard_limit=HARD, lookahead_at=2400)
    warmer = GatedWarmer()
    result = Run()
    boundaries = iter(settles)
    async with workload_runtime(policy, mode, warmer=warmer, offload_store=store) as runtime:
        for step, size in enumerate(outputs):
            live = list(runtime.main.messages)
            outcome = await runtime.commit()  # a warm-up still in flight is cancelled
            if outcome.committed:
                result.kinds.append(outcome.kind)
                ctx = TransformContext(
                    token_counter=COUNTER,
                    window_tokens=WINDOW,
                    is_lookahead=False,
                    offload_store=store,
                )
                synchronous = (await policy.transform(live, ctx)).messages
                result.sizes.append((tokens(outcome.messages), tokens(synchronous)))
            for message in (model_turn(step), tool_output(step, size)):
                runtime.append(message)
                await runtime.boundary()
                if next(boundaries, True):
                    warmer.gate.set()
                    await runtime.settle()
                    warmer.gate.clear()
        warmer.gate.set()
        result.commits = runtime.stats.commits
        result.hits = runtime.stats.hits
        result.resized = runtime.stats.resized_commits
    return result


def run_both(outputs: list[int], settles: list[bool]) -> tuple[Run, Run]:
    with tempfile.TemporaryDirectory() as looked_dir, tempfile.TemporaryDirectory() as synced_dir:
        looked = asyncio.run(run("lookahead", outputs, settles, Path(looked_dir)))
        synced = asyncio.run(run("sync", outputs, settles, Path(synced_dir)))
    return looked, synced


@settings(max_examples=60, deadline=None)
@given(
    outputs=st.lists(st.sampled_from(OUTPUT_SIZES), min_size=10, max_size=60),
    settles=st.lists(st.booleans(), min_size=20, max_size=120),
)
def test_an_offload_hit_is_never_larger_than_the_synchronous_commit(
    outputs: list[int], settles: list[bool]
) -> None:
    """At every commit the lookahead leaves at most what the synchronous transform of the same
    history leaves, and the run makes as many commits as the synchronous one."""
    looked, synced = run_both(outputs, settles)
    for committed, synchronous in looked.sizes:
        assert committed <= synchronous, looked.sizes
    assert looked.commits == synced.commits, (looked.commits, synced.commits)


def test_a_hit_whose_warm_up_spanned_a_large_output_offloads_it_at_the_commit() -> None:
    """The four-agent case, in a drawn run where it happens: large outputs arrive while a ready
    result's warm-up runs, and the commit comes before a redo. Before, the first commit kept a
    900-token output whole (820 tokens over the synchronous commit)."""
    draw = random.Random(7)
    outputs = [draw.choice(OUTPUT_SIZES) for _ in range(40)]
    settles = [draw.random() < 0.5 for _ in range(80)]
    looked, synced = run_both(outputs, settles)
    assert looked.resized >= 1  # the suffix was offloaded at a commit
    assert looked.hits == looked.commits == synced.commits == 4
    assert [committed - synchronous for committed, synchronous in looked.sizes] == [0] * 4


@pytest.mark.parametrize("in_pipeline", [False, True], ids=["alone", "pipeline"])
def test_a_hit_with_no_newer_output_keeps_the_newest_output_whole(
    tmp_path: Path, in_pipeline: bool
) -> None:
    """A lookahead offloads the newest output expecting a newer one before the commit. When the
    commit comes after the model's answer and a user message instead, that output is still the
    newest: the hit keeps it in full, as the synchronous commit does (before, the model got a
    placeholder for the output the user was asking about; in a Pipeline too, until each stage got its own put-back)."""

    async def commit_after_a_question(mode: str) -> list[Message]:
        store = OffloadStore(tmp_path / mode)
        offload = Offload(threshold=THRESHOLD, hard_limit=HARD, lookahead_at=2000)
        policy = Pipeline(offload) if in_pipeline else offload
        async with workload_runtime(policy, mode, offload_store=store) as runtime:
            for step, size in enumerate([500, 500, 500, 500, 1000]):
                assert not (await runtime.commit()).committed
                for message in (model_turn(step), tool_output(step, size)):
                    runtime.append(message)
                    await runtime.boundary()
                    await runtime.settle()
            assert not (await runtime.commit()).committed
            for message in (
                {"role": "assistant", "content": "I read it."},
                {"role": "user", "content": "What does it say? " + "y" * 4000},
            ):
                runtime.append(message)
                await runtime.boundary()
                await runtime.settle()
            outcome = await runtime.commit()
            assert outcome.kind is (CommitKind.HIT if mode == "lookahead" else CommitKind.SYNC)
            return outcome.messages

    looked = asyncio.run(commit_after_a_question("lookahead"))
    synced = asyncio.run(commit_after_a_question("sync"))
    newest = [m for m in looked if m["role"] == "tool"][-1]
    assert newest["content"] == tool_output(4, 1000)["content"]
    assert looked == synced


def test_a_pipeline_puts_back_the_newest_output_where_a_later_stage_moved_it(
    tmp_path: Path,
) -> None:
    """Offload finds its newest output by placeholder, not index: a later stage (KeepRecent
    dropping older turns) moves it, and the put-back must land on it, not on its old index."""
    messages: list[Message] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for step, size in enumerate([400, 400, 900]):
        messages += [model_turn(step), tool_output(step, size)]
    policy = Pipeline(
        Offload(threshold=THRESHOLD, hard_limit=HARD, store=OffloadStore(tmp_path)),
        KeepRecent(budget=700, max_turns=1, hard_limit=HARD),
    )
    ctx = TransformContext(window_tokens=WINDOW, token_counter=COUNTER, is_lookahead=True)
    result = asyncio.run(policy.transform(messages, ctx))
    assert len(result.messages) < len(messages)  # KeepRecent dropped turns: indices moved
    suffix: list[Message] = [{"role": "assistant", "content": "I read it."}]
    committed = policy.finish_hit(policy.assemble(result, suffix), result, suffix)
    tools = [m for m in committed if m["role"] == "tool"]
    assert tools[-1]["content"] == messages[-1]["content"]  # the newest, whole again
    assert all(m["role"] == "tool" or m in result.messages + suffix for m in committed)
    assert committed[-1] == suffix[-1]
    # Saved before placeholders were recorded: put back by index, on the stage's own output.
    alone = Offload(threshold=THRESHOLD, hard_limit=HARD, store=OffloadStore(tmp_path / "old"))
    old = asyncio.run(alone.transform(messages, ctx))
    del old.data["newest_offloaded"]["placeholder"]
    restored = alone.finish_hit(
        alone.assemble(old, suffix), TransformResult(old.messages, old.data), suffix
    )
    assert restored[len(messages) - 1]["content"] == messages[-1]["content"]

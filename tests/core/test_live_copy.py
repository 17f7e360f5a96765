"""`keeps_live_prefix`: while a model turn's tools run, the live context is copied to where the
next lookahead is warmed, when that lookahead will keep it as its prefix (Offload)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk import CommitKind, LookaheadRuntime, OffloadStore
from lookahead_sdk.base.messages import Message, calls_tools
from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.base.tags import current_tags
from lookahead_sdk.core.state import LookaheadState, LookaheadStatus, MainState
from lookahead_sdk.core.warmer import RequestShape, Warmer
from lookahead_sdk.strategies import KeepRecent, Offload, Summarize

from .policies import FakeSummarizer, RecordingWarmer, misbehave
from .test_commit_ahead import COUNTER, HARD, START, model_turn, tool_output

SOFT = 2400
LARGE = 400  # offloaded: the threshold is 300


class CopyingWarmer(RecordingWarmer):
    """Records each live-context copy, and in `events` the order of copies and warm-ups."""

    copies_live_context = True

    def __init__(self, *, fail_copy: bool = False, hang_copy: bool = False) -> None:
        super().__init__()
        self.fail_copy, self.hang_copy = fail_copy, hang_copy
        self.copies: list[list[Message]] = []
        self.events: list[tuple[str, list[Message]]] = []
        self.copy_tags: list[RequestTags | None] = []

    async def fork_live(
        self, program_id: str, messages: Sequence[Message], *, shape: RequestShape
    ) -> bool:
        await misbehave(hang=self.hang_copy, fail=self.fail_copy)
        self.copies.append(list(messages))
        self.copy_tags.append(current_tags())
        self.events.append(("copy", list(messages)))
        return True

    async def warm(self, messages: Sequence[Message], **kwargs: object):  # type: ignore[override]
        self.events.append(("warm", list(messages)))
        return await super().warm(messages, **kwargs)  # type: ignore[arg-type]


def offload(store: Path) -> Offload:
    return Offload(store=OffloadStore(store), threshold=300, hard_limit=HARD, lookahead_at=SOFT)


def history(outputs: Sequence[int]) -> list[Message]:
    messages = [*START]
    for step, size in enumerate(outputs):
        messages += [model_turn(step), tool_output(step, size)]
    return messages


def test_offload_keeps_the_live_prefix_only_past_its_trigger_with_nothing_left_to_offload(
    tmp_path: Path,
) -> None:
    policy = offload(tmp_path)

    def keeps(outputs: list[int], status: LookaheadStatus = LookaheadStatus.IDLE) -> bool:
        main = MainState(
            [*history(outputs), model_turn(len(outputs))],
            window_tokens=8192,
            token_counter=COUNTER,
        )
        lookahead = LookaheadState()
        lookahead.status = status
        return policy.keeps_live_prefix(main, lookahead)

    assert not keeps([120] * 10)  # below the trigger: no lookahead will start next
    assert keeps([120] * 25)  # past it, all small: the next large output starts one
    assert not keeps([120] * 20 + [LARGE] + [120] * 4)  # the next one rewrites that output
    assert not keeps([120] * 25, LookaheadStatus.READY)  # its branch holds a warm-up
    assert not KeepRecent(budget=2000, hard_limit=HARD).keeps_live_prefix(
        MainState(history([120] * 25), window_tokens=8192, token_counter=COUNTER),
        LookaheadState(),
    )


async def drive(
    runtime: LookaheadRuntime, outputs: Sequence[int], commits: list[CommitKind] | None = None
) -> None:
    """The reference loop's boundary sequence; background jobs finish before the next segment
    (a fast engine)."""

    async def segment(message: Message) -> None:
        runtime.append(message)
        await runtime.boundary()
        await runtime.settle()

    for step, size in enumerate(outputs):
        outcome = await runtime.commit()
        if commits is not None and outcome.committed:
            commits.append(outcome.kind)
        await segment(model_turn(step))
        await segment(tool_output(step, size))


def test_copies_are_made_at_model_turn_boundaries_only(tmp_path: Path) -> None:
    async def run(mode: str) -> tuple[CopyingWarmer, LookaheadRuntime]:
        warmer = CopyingWarmer()
        async with offload_runtime(tmp_path, warmer, mode=mode) as runtime:
            await drive(runtime, [120] * 30)
        return warmer, runtime

    warmer, runtime = asyncio.run(run("lookahead"))
    assert warmer.copies, "no copy past the trigger"
    assert all(calls_tools(copy[-1]) for copy in warmer.copies)  # the model's turn just ended
    assert runtime.stats.live_copies == len(warmer.copies)
    # Best-effort: a gated warmer holds the copy while a foreground prompt is prefilled.
    assert all(tags is not None and tags.is_best_effort for tags in warmer.copy_tags)
    assert all(
        MainState(copy, window_tokens=8192, token_counter=COUNTER).tokens >= SOFT
        for copy in warmer.copies
    )
    warmer, _ = asyncio.run(run("sync"))
    assert not warmer.copies


@settings(max_examples=80, deadline=None)
@given(outputs=st.lists(st.sampled_from((60, 120, LARGE)), min_size=10, max_size=60))
def test_the_warm_up_after_a_copy_keeps_the_copied_context_as_its_prefix(
    tmp_path_factory: pytest.TempPathFactory, outputs: list[int]
) -> None:
    """What makes the copy worth its cost: whatever outputs come, the first warm-up after a copy
    rewrites nothing the copy holds. It fails if the policy claims the prefix while an older
    output is still to be offloaded."""
    warmer = CopyingWarmer()

    async def run() -> None:
        async with LookaheadRuntime(
            offload(tmp_path_factory.mktemp("store")),
            messages=START,
            window_tokens=8192,
            token_counter=COUNTER,
            warmer=warmer,
        ) as runtime:
            await drive(runtime, outputs)

    asyncio.run(run())
    for (kind, copied), (next_kind, warmed) in zip(warmer.events, warmer.events[1:], strict=False):
        if kind == "copy" and next_kind == "warm":
            assert warmed[: len(copied)] == copied


def offload_runtime(tmp_path: Path, warmer: Warmer, *, mode: str = "lookahead") -> LookaheadRuntime:
    """An Offload runtime over START with `warmer`, for the warmer's hooks to be driven."""
    return LookaheadRuntime(
        offload(tmp_path),
        mode=mode,  # type: ignore[arg-type]
        messages=START,
        window_tokens=8192,
        token_counter=COUNTER,
        warmer=warmer,
    )


def test_a_failing_copy_costs_nothing_but_the_copy(tmp_path: Path) -> None:
    async def run() -> list[CommitKind]:
        commits: list[CommitKind] = []
        warmer = CopyingWarmer(fail_copy=True)
        async with offload_runtime(tmp_path, warmer) as runtime:
            await drive(runtime, ([120] * 3 + [LARGE]) * 10, commits)
            assert runtime.stats.live_copies == 0
        return commits

    commits = asyncio.run(run())
    assert commits and all(kind is CommitKind.HIT for kind in commits)


def test_a_commit_does_not_wait_for_a_copy_in_flight(tmp_path: Path) -> None:
    async def run() -> CommitKind:
        warmer = CopyingWarmer(hang_copy=True)
        async with LookaheadRuntime(
            offload(tmp_path),
            messages=history([120] * 20),
            window_tokens=8192,
            token_counter=COUNTER,
            warmer=warmer,
        ) as runtime:
            assert SOFT <= runtime.main.tokens < HARD
            for message in (model_turn(20), tool_output(20, 1500), model_turn(21)):
                runtime.append(message)
                await runtime.boundary()  # the first starts the copy; the others wait for it
            runtime.append(tool_output(21, 120))
            await runtime.boundary()
            assert runtime.busy and runtime.main.tokens >= HARD
            outcome = await asyncio.wait_for(runtime.commit(), timeout=5)
            assert not runtime.busy
            return outcome.kind

    # No lookahead could start behind the hanging copy: the commit falls back at once.
    assert asyncio.run(run()) is CommitKind.FALLBACK


async def summarize_run(warmer: RecordingWarmer, summarizer: FakeSummarizer) -> LookaheadRuntime:
    """A Summarize runtime driven through 30 steps; its stats stay readable after it closes."""
    async with LookaheadRuntime(
        Summarize(hard_limit=HARD, lookahead_at=2400, recent_budget=800),
        messages=START,
        window_tokens=8192,
        token_counter=COUNTER,
        warmer=warmer,
        summarizer=summarizer,
    ) as runtime:
        await drive(runtime, [150] * 30)
    return runtime


def copies_and_summaries(warmer: CopyingWarmer, summarizer: FakeSummarizer) -> list[str]:
    """The order in which the warmer copies the live context ("copy") and the summarizer is
    called ("summary"), filled in as the run goes."""
    order: list[str] = []
    original_complete = summarizer.complete

    async def complete(messages, **kwargs):  # type: ignore[no-untyped-def]
        order.append("summary")
        return await original_complete(messages, **kwargs)

    summarizer.complete = complete  # type: ignore[method-assign]
    original_fork = warmer.fork_live

    async def fork_live(program_id, messages, *, shape):  # type: ignore[no-untyped-def]
        order.append("copy")
        return await original_fork(program_id, messages, shape=shape)

    warmer.fork_live = fork_live  # type: ignore[method-assign]
    return order


def test_a_summary_lookahead_copies_the_live_context_before_its_llm_call() -> None:
    """Summarize's request starts with the live context: the branch gets a copy of what the
    live slot holds (through the last reply) before the summary goes out, so the request can
    run there and leave the agent's slot alone; except a redo's."""
    warmer = CopyingWarmer()
    summarizer = FakeSummarizer()
    order = copies_and_summaries(warmer, summarizer)

    runtime = asyncio.run(summarize_run(warmer, summarizer))
    assert summarizer.requests, "no summary ran"
    preceded = [
        order[index - 1] == "copy" for index, event in enumerate(order) if event == "summary"
    ]
    assert preceded[0]
    # A redo's summary runs in the live slot: the branch holds its standby's warm-up (below).
    assert preceded.count(False) == runtime.stats.regrown_lookaheads
    assert all(copy[-1]["role"] == "assistant" for copy in warmer.copies)
    assert runtime.stats.live_copies == len(warmer.copies)


def test_without_live_copies_a_summary_lookahead_copies_nothing() -> None:
    runtime = asyncio.run(summarize_run(RecordingWarmer(), FakeSummarizer()))  # no copies
    assert runtime.stats.live_copies == 0
    assert runtime.stats.hits >= 1


def test_a_summary_redo_leaves_the_standby_results_warm_up_in_the_branch() -> None:
    """A ready summary redone as the history grew stays on standby until the redo is ready, and
    its warm-up is in the branch: the redo's summary request must not copy the live context over
    it, or a commit that takes the standby prefills it whole (traced in the demo: 61 of 1,044
    tokens cached). The first summary is preceded by a copy, the redo by none."""
    from .test_commit_size import HangingSummarizer, policy_named, run

    warmer = CopyingWarmer()
    summarizer = HangingSummarizer(hang_call=2)  # the redo is still decoding at the commit
    order = copies_and_summaries(warmer, summarizer)
    looked = asyncio.run(
        run(
            policy_named("summarize", True),
            "lookahead",
            [60] * 15 + [400] * 10,
            summarizer=summarizer,
            commit_wait_timeout_s=0.05,
            warmer=warmer,
        )
    )
    assert looked.regrown >= 1 and looked.standby == 1
    summaries = [index for index, event in enumerate(order) if event == "summary"]
    first, redo = summaries[0], summaries[1]
    assert first > 0 and order[first - 1] == "copy"
    assert "copy" not in order[first + 1 : redo + 1]


class HomingWarmer(CopyingWarmer):
    """Wants a copy of the live context after each commit of a lookahead that replaced it (as
    `LlamaCppWarmer` does when the commit left it out of its home slot), until one is made."""

    def __init__(self) -> None:
        super().__init__()
        self.away = False
        self.hits = 0

    def committed(self, program_id: str, *, replaced: bool, **kwargs: object) -> None:
        self.hits += 1
        self.away = self.away or replaced

    def wants_live_copy(self, program_id: str) -> bool:
        return self.away

    async def fork_live(
        self, program_id: str, messages: Sequence[Message], *, shape: RequestShape
    ) -> bool:
        self.away = False
        return await super().fork_live(program_id, messages, shape=shape)


@pytest.mark.parametrize("homing", [True, False])
def test_a_warmer_wanting_the_live_context_copied_gets_it_while_the_tools_run(
    homing: bool,
) -> None:
    """Whatever the policy's next lookahead keeps (KeepRecent keeps no live prefix)."""

    async def run() -> tuple[CopyingWarmer, list[CommitKind]]:
        warmer = HomingWarmer() if homing else CopyingWarmer()
        commits: list[CommitKind] = []
        runtime = LookaheadRuntime(
            KeepRecent(budget=2000, hard_limit=HARD),
            messages=START,
            window_tokens=8192,
            token_counter=COUNTER,
            warmer=warmer,
        )
        async with runtime:
            await drive(runtime, [120] * 60, commits)
            assert runtime.stats.live_copies == len(warmer.copies)
        return warmer, commits

    warmer, commits = asyncio.run(run())
    assert commits and all(kind is CommitKind.HIT for kind in commits)
    if not homing:
        assert not warmer.copies  # nothing asks for one
        return
    assert isinstance(warmer, HomingWarmer)
    assert 0 < len(warmer.copies) <= warmer.hits and not warmer.away
    assert all(calls_tools(copy[-1]) for copy in warmer.copies)  # the model's turn just ended
    assert all(tags is not None and tags.priority_class == "be" for tags in warmer.copy_tags)

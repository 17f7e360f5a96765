"""When a ready lookahead's new suffix is warmed: in the tool wait after a model turn, never
beside the model call its tool outputs make due (where the loop marks turn ends), and still
before the commit it serves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from lookahead_sdk import CommitKind, LookaheadRuntime, LookaheadStatus, OffloadStore
from lookahead_sdk.base.messages import Message
from lookahead_sdk.client.session import ServerSession
from lookahead_sdk.client.warmers import LlamaCppWarmer, SGLangWarmer
from lookahead_sdk.core.warmer import (
    DelegatingWarmer,
    RequestShape,
    WarmupResult,
    WarmupSpend,
)
from lookahead_sdk.strategies import Offload

from .policies import CountingPolicy, RecordingWarmer, user
from .test_commit_ahead import HARD, model_turn, workload_runtime
from .test_commit_ahead import tool_output as sized_output


def reply_calling_tool(step: int) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{step}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        ],
    }


def tool_output(step: int) -> Message:
    return {"role": "tool", "tool_call_id": f"c{step}", "content": f"out {step}"}


def warm_context(runtime: LookaheadRuntime, *, through: int | None = None) -> list[Message]:
    """What a warm-up of the ready result sends: it, then the history since it was made (up to
    `through`)."""
    lookahead = runtime.lookahead
    assert lookahead.messages is not None
    return [*lookahead.messages, *runtime.main.messages[lookahead.last_segment_end : through]]


async def model_call(runtime: LookaheadRuntime) -> list[Message]:
    """What the loop sends: the context after any commit (background work settled first, so
    what started at the last boundary has run)."""
    await runtime.settle()
    return await runtime.prepare()


async def turn(runtime: LookaheadRuntime, step: int, *, mark_reply: bool) -> None:
    """The model calls a tool: the reply (a boundary where the loop marks it), then its output."""
    await model_call(runtime)
    runtime.append(reply_calling_tool(step))
    if mark_reply:
        await runtime.boundary()
        await runtime.settle()
    runtime.append(tool_output(step))
    await runtime.boundary()


async def driven(
    counter: object,
    *,
    hard: int,
    below: int,
    mark_reply: bool,
    warmer: RecordingWarmer | None = None,
) -> tuple[LookaheadRuntime, RecordingWarmer, int]:
    """A runtime that starts a lookahead at 4 messages and commits at `hard`, driven by whole
    turns while its history is below `below` messages; with its warmer and the next step."""
    warmer = warmer or RecordingWarmer()
    runtime = LookaheadRuntime(
        CountingPolicy(soft=4, hard=hard),
        messages=[{"role": "system", "content": "s"}, user("task")],
        token_counter=counter,
        warmer=warmer,
    )
    step = 0
    while len(runtime.main) < below:
        await turn(runtime, step, mark_reply=mark_reply)
        step += 1
    return runtime, warmer, step


async def test_a_turns_tool_outputs_are_warmed_with_its_next_reply_not_beside_the_call(
    approx_counter,
) -> None:
    runtime, warmer, step = await driven(approx_counter, hard=14, below=12, mark_reply=True)
    await runtime.settle()
    assert runtime.lookahead.status is LookaheadStatus.READY
    suffix_warm_ups = warmer.warmed[1:]  # the first warms the lookahead's own result
    assert len(suffix_warm_ups) >= 2
    # None went out at a boundary that makes a model call due (it ends with a tool output):
    # each ended at a reply, covering the tool output before it as well.
    assert all(warmed[-1]["role"] == "assistant" for warmed in suffix_warm_ups)
    await turn(runtime, step, mark_reply=True)
    await runtime.settle()
    # The commit prefills only the tool output that just came; everything before it is warm.
    assert warmer.warmed[-1] == warm_context(runtime, through=-1)
    await model_call(runtime)
    assert runtime.stats.hits == 1
    await runtime.aclose()


async def test_a_loop_marking_only_tool_outputs_still_warms_each_suffix(approx_counter) -> None:
    runtime, warmer, _ = await driven(approx_counter, hard=14, below=14, mark_reply=False)
    await runtime.settle()
    # With no boundary at a turn's end, the one before a model call is the only one there is:
    # each turn was warmed there but the last, which reached the limit (its call commits).
    assert warmer.warmed[-1] == warm_context(runtime, through=-2)
    assert warmer.warmed[-1][-1]["role"] == "tool"
    await model_call(runtime)
    assert runtime.stats.hits == 1
    await runtime.aclose()


@pytest.mark.parametrize("restored", [False, True])
async def test_the_suffix_is_warmed_during_the_tools_of_the_turn_that_reaches_the_limit(
    approx_counter, restored: bool
) -> None:
    """Also for a runtime restored from a state saved where the warm-up was held back."""
    runtime, warmer, step = await driven(approx_counter, hard=11, below=10, mark_reply=True)
    if restored:
        state = json.loads(json.dumps(runtime.save_state()))
        await runtime.aclose()
        runtime = LookaheadRuntime(
            CountingPolicy(soft=4, hard=11), token_counter=approx_counter, warmer=warmer
        )
        runtime.load_state(state)
        assert runtime.lookahead.status is LookaheadStatus.READY
    await model_call(runtime)
    runtime.append(reply_calling_tool(step))  # the history reaches the limit with this reply
    await runtime.boundary()
    await runtime.settle()
    assert runtime.policy.should_commit(runtime.main, runtime.lookahead)
    runtime.append(tool_output(step))
    await runtime.boundary()
    # Warmed while the tools ran: the commit prefills only their output.
    assert warmer.warmed[-1] == warm_context(runtime, through=-1)
    outcome = await runtime.commit()
    assert outcome.kind is CommitKind.HIT
    await runtime.aclose()


async def test_offloads_redo_of_each_new_output_runs_in_the_tool_wait_after_the_call(
    tmp_path: Path,
) -> None:
    """Offload redoes a ready result at each new tool output: not at the boundary that brings
    it (the model call it makes due goes alone), but at the reply after it; every commit hits
    with only the newest output left whole, as the synchronous transform leaves it."""
    warmer = RecordingWarmer()
    policy = Offload(store=OffloadStore(tmp_path), threshold=300, hard_limit=HARD)
    held = redone_after_reply = 0
    async with workload_runtime(policy, "lookahead", warmer=warmer) as runtime:
        for step in range(40):
            await runtime.prepare()
            runtime.append(model_turn(step))
            started = runtime.stats.lookaheads_started
            await runtime.boundary()
            redone_after_reply += runtime.stats.lookaheads_started > started
            await runtime.settle()
            ready = runtime.lookahead.status is LookaheadStatus.READY
            runtime.append(sized_output(step, 400))
            started = runtime.stats.lookaheads_started
            await runtime.boundary()
            if ready and not runtime.policy.should_commit(runtime.main, runtime.lookahead):
                # Nothing went to the engine beside the model call this output makes due.
                assert not runtime.busy and runtime.stats.lookaheads_started == started
                held += 1
            await runtime.settle()
        assert runtime.stats.commits >= 3 and runtime.stats.hits == runtime.stats.commits
    assert held >= 3 and redone_after_reply >= held


class GatedRecordingWarmer(RecordingWarmer):
    """Holds its chunks for slack itself, as `LlamaCppWarmer` with a `SlackGate` does."""

    @property
    def waits_for_slack(self) -> bool:
        return True


async def test_a_warmer_that_waits_for_slack_itself_warms_at_the_boundary_before_the_call(
    approx_counter,
) -> None:
    runtime, warmer, _ = await driven(
        approx_counter, hard=14, below=12, mark_reply=True, warmer=GatedRecordingWarmer()
    )
    await runtime.settle()
    # Its chunks go after the call anyway: held, the warm-up at the reply would be larger and
    # nearer the commit (what the CPU engine's four-agent run measured).
    assert any(warmed[-1]["role"] == "tool" for warmed in warmer.warmed[1:])
    assert warmer.warmed[-1] == warm_context(runtime)
    await runtime.aclose()


def test_waiting_for_slack_is_the_gate_of_the_llamacpp_warmer_through_any_wrapper() -> None:
    session = ServerSession("http://engine.test", wire="llamacpp")
    gated = LlamaCppWarmer(session, gate=session.gate())
    assert gated.waits_for_slack and DelegatingWarmer(gated).waits_for_slack
    assert not LlamaCppWarmer(session).waits_for_slack
    assert not SGLangWarmer("http://engine.test").waits_for_slack
    assert not DelegatingWarmer(SGLangWarmer("http://engine.test")).waits_for_slack


class HeldLlamaCppWarmer(LlamaCppWarmer):
    """The llama.cpp warmer with its gate, announcing model calls to its session as it does;
    each warm-up (counted) runs until `release` is set, with no engine behind it."""

    def __init__(self, session: ServerSession) -> None:
        super().__init__(session, gate=session.gate())
        self.release = asyncio.Event()
        self.warm_ups = 0

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        self.warm_ups += 1
        await self.release.wait()
        return WarmupResult(prompt_tokens=10 * len(messages), cached_tokens=0, seconds=0.0)


async def test_a_boundary_deferred_behind_a_warm_up_does_not_announce_its_sent_call_again(
    approx_counter,
) -> None:
    """A boundary reached while a warm-up runs is scheduled once that warm-up ends; the model
    call it announced may have gone out by then, and announcing it again would close the gate
    to every program's best-effort work behind a call already sent."""
    session = ServerSession("http://engine.test", wire="llamacpp")
    foreground = session.foreground
    warmer = HeldLlamaCppWarmer(session)
    runtime = LookaheadRuntime(
        CountingPolicy(soft=4, hard=40),
        messages=[{"role": "system", "content": "s"}, user("task")],
        token_counter=approx_counter,
        warmer=warmer,
    )
    program_id = runtime.program_id
    runtime.append(reply_calling_tool(0), tool_output(0))
    await runtime.boundary()  # the lookahead starts; its warm-up is held
    assert runtime.busy and foreground.announced(program_id)
    foreground.begin(program_id).end()  # the model call that boundary announced
    runtime.append(reply_calling_tool(1))
    await runtime.boundary()
    runtime.append(tool_output(1))
    await runtime.boundary()  # deferred behind the warm-up; its model call is announced
    assert runtime.busy and foreground.announced(program_id)
    call = foreground.begin(program_id)
    call.first_token()  # the call went out and decodes: best-effort work may run beside it
    warm_ups = warmer.warm_ups
    warmer.release.set()
    await runtime.settle()
    # The deferred boundary was scheduled: the new suffix was warmed into the ready result ...
    assert runtime.lookahead.status is LookaheadStatus.READY
    assert warmer.warm_ups > warm_ups
    # ... and announced nothing: that call is sent.
    assert not foreground.announced(program_id) and foreground.prefilling == 0
    call.end()
    await runtime.aclose()

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_sdk import CommitKind, LookaheadRuntime, OffloadStore, TransformContext
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tokens import ApproxTokenCounter, CachedTokenCounter
from lookahead_sdk.core.state import LookaheadState, MainState
from lookahead_sdk.strategies import Isolate, KeepRecent, Offload, Summarize, read_offloaded_tool
from lookahead_sdk.strategies.isolate import instruction_from_arguments
from lookahead_sdk.strategies.summarize import SUMMARY_PREFIX

from ..core.histories import agent_history, assert_tool_pairs_intact
from ..core.policies import FakeSummarizer

COUNTER = CachedTokenCounter(ApproxTokenCounter())
KEY = re.compile(r'key="([0-9a-f]{64})"')
PROPERTY = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def context(window: int = 8192, **kwargs) -> TransformContext:
    return TransformContext(
        token_counter=COUNTER, window_tokens=window, is_lookahead=False, **kwargs
    )


# -- Offload -------------------------------------------------------------------------------------
@PROPERTY
@given(history=agent_history())
def test_offload_never_loses_anything(history: list[Message], tmp_path_factory) -> None:
    store = OffloadStore(tmp_path_factory.mktemp("offload"))
    policy = Offload(threshold=200, store=store)
    result = asyncio.run(policy.transform(history, context())).messages
    assert len(result) == len(history)
    tool_indices = [i for i, m in enumerate(history) if m["role"] == "tool"]
    for index, (before, after) in enumerate(zip(history, result, strict=True)):
        if after["content"] == before["content"]:
            continue
        assert before["role"] == "tool" and index != tool_indices[-1], (
            "only older tool outputs are offloaded"
        )
        assert COUNTER.count_text(before["content"]) >= 200
        key = KEY.search(after["content"]).group(1)
        assert store.get(key) == before["content"]
        assert {k: v for k, v in after.items() if k != "content"} == {
            k: v for k, v in before.items() if k != "content"
        }
    again = asyncio.run(policy.transform(result, context())).messages
    assert again == result  # placeholders are never offloaded again


@PROPERTY
@given(history=agent_history())
def test_offload_commits_exactly_when_its_transform_rewrites_something(
    history: list[Message], tmp_path_factory
) -> None:
    policy = Offload(threshold=200, hard_limit=1, store=OffloadStore(tmp_path_factory.mktemp("o")))
    main = MainState(history, window_tokens=8192, token_counter=COUNTER)
    rewritten = asyncio.run(policy.transform(history, context())).messages
    assert policy.should_commit(main, LookaheadState()) == (rewritten != history)
    after = MainState(rewritten, window_tokens=8192, token_counter=COUNTER)
    assert not policy.should_commit(after, LookaheadState())  # nothing left: no empty commits


def test_read_offloaded_tool_reads_back_in_windows(tmp_path: Path) -> None:
    store = OffloadStore(tmp_path)
    text = "x" * 9000
    key = store.put(text).key
    tool = read_offloaded_tool(store, max_chars=4000)
    first = asyncio.run(tool.call({"key": key}))
    assert first.startswith("x" * 4000) and "offset=4000" in first
    rest = asyncio.run(tool.call({"key": key, "offset": 8000}))
    assert rest == "x" * 1000
    assert "64 lowercase hex" in asyncio.run(tool.call({"key": "../secret"}))


def test_offload_threshold_scales_with_the_window(tmp_path: Path) -> None:
    store = OffloadStore(tmp_path)
    history = [{"role": "user", "content": "t"}]
    for i in range(2):
        history += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "r", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": "word " * 400},
        ]
    small = asyncio.run(Offload(store=store).transform(history, context(window=8192))).data[
        "offloaded"
    ]
    large = asyncio.run(Offload(store=store).transform(history, context(window=131072))).data[
        "offloaded"
    ]
    assert len(small) == 1 and large == []  # 1/32 of 8K = 256 tokens; of 128K = 4096 tokens


# -- KeepRecent ----------------------------------------------------------------------------------
@PROPERTY
@given(history=agent_history())
def test_keep_recent_keeps_system_task_and_an_intact_recent_suffix(history: list[Message]) -> None:
    policy = KeepRecent(budget=600)
    result = asyncio.run(policy.transform(history, context())).messages
    assert result[:2] == history[:2]
    suffix = result[2:]
    assert suffix == history[len(history) - len(suffix) :]
    assert_tool_pairs_intact(result)
    tokens = sum(COUNTER.count_text(m.get("content") or "") for m in result)
    newest_group_only = len(suffix) <= 3
    assert tokens <= 600 + 40 or newest_group_only


@PROPERTY
@given(history=agent_history())
def test_keep_recent_turn_budget(history: list[Message]) -> None:
    result = asyncio.run(KeepRecent(budget=0.4, max_turns=2).transform(history, context())).messages
    assert sum(m["role"] == "assistant" for m in result[2:]) <= 2 or len(result) <= 4
    assert_tool_pairs_intact(result)


# -- Summarize -----------------------------------------------------------------------------------
@PROPERTY
@given(history=agent_history())
def test_summarize_commits_system_summary_and_recent(history: list[Message]) -> None:
    llm = FakeSummarizer()
    policy = Summarize(recent_budget=500, summary_tokens=64)
    result = asyncio.run(policy.transform(history, context(summarizer=llm))).messages
    assert_tool_pairs_intact(result)
    if not llm.requests:
        assert result == history
        return
    request, max_tokens, temperature = llm.requests[0]
    assert (max_tokens, temperature) == (64, 0.0)
    recent = result[2:]
    assert result[0] == history[0]
    assert result[1]["content"].startswith(SUMMARY_PREFIX)
    assert recent == history[len(history) - len(recent) :]
    # The summary request is the live context itself (up to its last unanswered tool call),
    # so it extends what the server has cached for the agent's next turn.
    from lookahead_sdk.base.messages import answered_prefix_end

    assert request[:-1] == history[: answered_prefix_end(history)]
    assert len(request) - 1 >= len(history) - len(recent)
    assert request[-1] == {"role": "user", "content": policy.instruction}


def test_summarize_on_the_runtime_goes_best_effort_then_commits(approx_counter) -> None:
    from lookahead_sdk import RequestTags, current_tags

    seen_tags = []

    class TagRecordingLLM(FakeSummarizer):
        async def complete(self, messages, *, max_tokens, temperature):
            seen_tags.append(current_tags())
            return await super().complete(messages, max_tokens=max_tokens, temperature=temperature)

    async def scenario() -> None:
        runtime = LookaheadRuntime(
            Summarize(),
            window_tokens=4096,
            summarizer=TagRecordingLLM(),
            token_counter=approx_counter,
            tags=RequestTags("agent-1"),
            messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "t"}],
        )
        outcomes = []
        for _step in range(16):
            outcomes.append(await runtime.commit())
            runtime.append(
                {"role": "assistant", "content": "reading"},
                {"role": "user", "content": "code " * 300},
            )
            await runtime.boundary()
            await runtime.settle()
        await runtime.aclose()
        assert any(o.kind is CommitKind.HIT for o in outcomes)
        assert runtime.stats.fallbacks == 0

    asyncio.run(scenario())
    assert seen_tags and all(
        t.priority_class == "be" and t.is_lookahead and t.program_id == "agent-1" for t in seen_tags
    )


# -- Isolate -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"instruction": "Review the parser', "Review the parser"),
        ('{"instruction": "Say \\"hi\\" now', 'Say "hi" now'),
        ('{"instruction": "done"}', "done"),
        ('{"instr', ""),
        ('{"instruction": "trailing \\', "trailing "),
    ],
)
def test_partial_instruction_parsing(arguments: str, expected: str) -> None:
    assert instruction_from_arguments(arguments) == expected


def test_isolate_prefills_progressively_and_spawns_the_final_context(approx_counter) -> None:
    from ..core.policies import RecordingWarmer

    instruction = "Review module json/decoder.py for error handling and report risky spots clearly."
    warmer = RecordingWarmer()
    opened: list[bool] = []
    original = warmer.warm

    async def warm(messages, *, shape, open_last=False, **kwargs):
        opened.append(open_last)
        return await original(messages, shape=shape, open_last=open_last, **kwargs)

    warmer.warm = warm  # type: ignore[method-assign]

    async def scenario() -> None:
        policy = Isolate(
            subagent_system=lambda history: f"handover for {len(history)} messages", chunk_chars=16
        )
        history = [
            {"role": "system", "content": "main"},
            {"role": "user", "content": "delegate json"},
        ]
        async with LookaheadRuntime(
            policy, messages=history, token_counter=approx_counter, warmer=warmer
        ) as runtime:
            for end in range(8, len(instruction) + 1, 8):
                arguments = '{"instruction": "' + instruction[:end]
                await runtime.stream_boundary(arguments, tool_name="delegate")
                await asyncio.sleep(0.002)
            call = {
                "id": "d1",
                "type": "function",
                "function": {
                    "name": "delegate",
                    "arguments": f'{{"instruction": "{instruction}"}}',
                },
            }
            runtime.append({"role": "assistant", "content": None, "tool_calls": [call]})
            outcome = await runtime.commit()
            assert outcome.kind is CommitKind.HIT
            assert outcome.messages == [
                {"role": "system", "content": "handover for 2 messages"},
                {"role": "user", "content": instruction},
            ]
            assert len(runtime.main) == 3  # spawning leaves the main history alone
            assert (await runtime.commit()).kind is CommitKind.NONE  # one delegation spawns once
        assert runtime.stats.warmups >= 3 and all(opened)
        warmed_instructions = [m[1]["content"] for m in warmer.warmed]
        assert all(instruction.startswith(w) for w in warmed_instructions)
        assert warmed_instructions == sorted(warmed_instructions, key=len)

    asyncio.run(scenario())


def test_isolate_sync_mode_builds_the_same_context(approx_counter) -> None:
    async def scenario() -> list[Message]:
        policy = Isolate(subagent_system="You review code.")
        call = {
            "id": "d1",
            "type": "function",
            "function": {"name": "delegate", "arguments": '{"instruction": "check x"}'},
        }
        runtime = LookaheadRuntime(
            policy,
            mode="sync",
            token_counter=approx_counter,
            messages=[
                {"role": "user", "content": "t"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
            ],
        )
        outcome = await runtime.commit()
        await runtime.aclose()
        assert outcome.kind is CommitKind.SYNC
        return outcome.messages

    assert asyncio.run(scenario()) == [
        {"role": "system", "content": "You review code."},
        {"role": "user", "content": "check x"},
    ]


@PROPERTY
@given(history=agent_history(), cut=st.integers(min_value=0, max_value=200))
def test_answered_prefix_end_stops_before_a_pending_tool_call(
    history: list[Message], cut: int
) -> None:
    from lookahead_sdk.base.messages import answered_prefix_end

    truncated = history[: min(cut, len(history))]
    end = answered_prefix_end(truncated)
    assert_tool_pairs_intact(truncated[:end])
    # Longest such prefix: the dropped tail is one assistant turn still waiting for tool results.
    if end < len(truncated):
        assert truncated[end]["role"] == "assistant" and truncated[end].get("tool_calls")
        assert all(m["role"] == "tool" for m in truncated[end + 1 :])


@pytest.mark.parametrize("growth", [50, 400, 1500])
def test_soft_trigger_fires_lead_turns_ahead_when_lookahead_at_is_too_late(growth: int) -> None:
    from lookahead_sdk import MainState

    main = MainState(
        [{"role": "system", "content": "s"}], window_tokens=8192, token_counter=COUNTER
    )
    main.tokens_per_turn = float(growth)
    policy = KeepRecent(lookahead_at=2816, hard_limit=3840, lead_turns=2.0, min_lead_turns=None)
    # The configured trigger, or lead_turns x growth ahead of the commit, whichever is earlier.
    assert policy.soft_tokens(main) == min(2816, 3840 - 2 * growth)
    main.tokens_per_turn = None
    assert policy.soft_tokens(main) == 2816


@PROPERTY
@given(history=agent_history())
def test_a_lookahead_expecting_growth_leaves_the_newest_group_to_the_suffix(
    history: list[Message],
) -> None:
    policy = KeepRecent(budget=300)
    sync = asyncio.run(policy.transform(history, context())).messages
    ctx = TransformContext(
        token_counter=COUNTER, window_tokens=8192, is_lookahead=True, expected_growth_tokens=300
    )
    ahead = asyncio.run(policy.transform(history, ctx)).messages
    assert_tool_pairs_intact(ahead)
    # Nothing of the recent window is left once the expected growth fills the budget; the
    # synchronous transform always keeps the newest group.
    assert ahead == history[:2]
    assert len(sync) > 2 or len(history) <= 2

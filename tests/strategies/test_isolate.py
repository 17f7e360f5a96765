"""Isolate's delegation arguments: an instruction written so far (streaming) and the final one
(commit), whatever form the arguments come in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk import CommitKind, LookaheadRuntime, RuntimeConfig
from lookahead_sdk.agent.loop import ReferenceAgent
from lookahead_sdk.agent.workload import Delegation
from lookahead_sdk.base.completion import ChatResult, Completion
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tools import ToolRegistry
from lookahead_sdk.core.config import RuntimeMode
from lookahead_sdk.errors import InvalidInputError
from lookahead_sdk.strategies import Isolate
from lookahead_sdk.strategies.isolate import instruction_from_arguments

from ..core.policies import RecordingWarmer

HISTORY: list[Message] = [
    {"role": "system", "content": "main"},
    {"role": "user", "content": "delegate the review of m.py"},
]
NO_ARGUMENTS = object()  # the call's function has no "arguments" key at all


def delegation(arguments: Any) -> Message:
    function: dict[str, Any] = {"name": "delegate"}
    if arguments is not NO_ARGUMENTS:
        function["arguments"] = arguments
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "d1", "type": "function", "function": function}],
    }


async def commit_delegation(
    arguments: Any, *, mode: RuntimeMode, streamed: str | None, counter: Any
) -> tuple[LookaheadRuntime, list[Message]]:
    """Delegate with `arguments` (after streaming `streamed`, if given); the runtime, still open,
    and the main history before the commit."""
    runtime = LookaheadRuntime(
        Isolate(subagent_system="You review code."),
        RuntimeConfig(mode=mode, token_counter=counter, warmer=RecordingWarmer()),
        messages=HISTORY,
    )
    if streamed is not None:
        await runtime.stream_boundary(streamed, tool_name="delegate")
        await runtime.settle(5)
    runtime.append(delegation(arguments))
    return runtime, list(runtime.main.messages)


MODES: list[tuple[RuntimeMode, str | None]] = [
    ("sync", None),
    ("lookahead", None),
    ("lookahead", '{"instruction": "check m'),
]


@pytest.mark.parametrize(("mode", "streamed"), MODES)
def test_arguments_given_as_a_dict_are_used_as_is(
    approx_counter, mode: RuntimeMode, streamed: str | None
) -> None:
    async def scenario() -> list[Message]:
        runtime, _ = await commit_delegation(
            {"instruction": "check m.py"}, mode=mode, streamed=streamed, counter=approx_counter
        )
        async with runtime:
            return (await runtime.commit()).messages

    assert asyncio.run(scenario()) == [
        {"role": "system", "content": "You review code."},
        {"role": "user", "content": "check m.py"},
    ]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (None, "must be a JSON object"),
        (NO_ARGUMENTS, "must be a JSON object"),
        ("", "not valid JSON"),
        ('{"instruction": "unfinished', "not valid JSON"),
        ("review m.py", "not valid JSON"),
        ('["review m.py"]', "must be a JSON object"),
        ("{}", "'instruction' must be a non-empty string"),
        ('{"instruction": ""}', "'instruction' must be a non-empty string"),
        ('{"instruction": "  "}', "'instruction' must be a non-empty string"),
        ({"instruction": 7}, "'instruction' must be a non-empty string"),
    ],
)
@pytest.mark.parametrize(("mode", "streamed"), MODES)
def test_a_delegation_without_an_instruction_is_rejected_and_spawns_nothing(
    approx_counter, arguments: Any, problem: str, mode: RuntimeMode, streamed: str | None
) -> None:
    async def scenario() -> None:
        runtime, before = await commit_delegation(
            arguments, mode=mode, streamed=streamed, counter=approx_counter
        )
        async with runtime:
            with pytest.raises(InvalidInputError, match=problem) as error:
                await runtime.commit()
            assert "'delegate' call 'd1'" in str(error.value)
            assert "function.arguments" in str(error.value)
            assert list(runtime.main.messages) == before  # rejected: the history is as it was
            assert runtime.stats.hits == runtime.stats.fallbacks == 0
            # The call answered and delegated again with an instruction: that one spawns.
            runtime.append({"role": "tool", "tool_call_id": "d1", "content": "error: ..."})
            runtime.append(delegation('{"instruction": "check m.py"}'))
            outcome = await runtime.commit()
            assert outcome.kind is not CommitKind.NONE
            assert outcome.messages[-1] == {"role": "user", "content": "check m.py"}

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"instruction": "as a dict"}, "as a dict"),
        ({"instruction": 7}, ""),
        (None, ""),
        ("", ""),
        ('{"instruction": "caf\\u00', "caf"),  # an escape cut short is not text yet
        ('{"instruction": "caf\\u00e9', "café"),
        ('{"instruction": "smile \\ud83d', "smile "),  # half a surrogate pair
        ('{"instruction": "smile \\ud83d\\ude00"}', "smile \U0001f600"),
        ('{"instruction": "a\\\\', "a\\"),
        ('{"instruction": "line\nbreak', "line\nbreak"),  # a raw newline, as some models write
        ('{"instruction": "bad \\x escape', "bad "),
        ('{"task": "old name", "instruction": "new', "new"),
    ],
)
def test_the_partial_instruction_parser_reads_what_is_written_so_far(
    arguments: Any, expected: str
) -> None:
    assert instruction_from_arguments(arguments) == expected


@settings(max_examples=150, deadline=None)
@given(instruction=st.text(max_size=40), ascii_only=st.booleans())
def test_every_partial_instruction_is_a_prefix_of_the_final_one(
    instruction: str, ascii_only: bool
) -> None:
    arguments = json.dumps({"instruction": instruction}, ensure_ascii=ascii_only)
    for end in range(len(arguments) + 1):
        assert instruction.startswith(instruction_from_arguments(arguments[:end]))
    assert instruction_from_arguments(arguments) == instruction


class SilentLLM:
    """Writes nothing on every turn; records the prompts it was sent."""

    model = "silent"

    def __init__(self) -> None:
        self.prompts: list[list[Message]] = []

    async def complete(self, messages: Sequence[Message], **_: Any) -> Completion:
        return Completion("")

    async def chat(self, messages: Sequence[Message], **_: Any) -> ChatResult:
        self.prompts.append(list(messages))
        return ChatResult({"role": "assistant", "content": None}, 0.0, 0.0, 0, 0, 0)


@pytest.mark.parametrize("mode", ["sync", "lookahead"])
async def test_the_reference_loop_delegates_the_request_when_the_model_writes_no_instruction(
    approx_counter, mode: RuntimeMode
) -> None:
    llm = SilentLLM()
    agent = ReferenceAgent(
        llm,  # type: ignore[arg-type]
        ToolRegistry([]),
        policy=Isolate(subagent_system="You review one module."),
        config=RuntimeConfig(
            mode=mode,
            warmer=RecordingWarmer(),
            token_counter=approx_counter,
            window_tokens=4096,
        ),
    )
    prompt = "Delegate the review of m.py."
    await agent.run("system", "task", plan=[Delegation("m.py", prompt, "handover", ())])
    subagent_first_prompt = llm.prompts[1]
    assert subagent_first_prompt[-1] == {"role": "user", "content": prompt}


def test_a_saved_state_spawns_as_the_runtime_it_came_from_would(approx_counter) -> None:
    """The record of the last spawn travels with the state: a state saved before the delegation
    spawns again, loaded into the runtime that spawned since or into a fresh one; a state saved
    after it spawns in neither."""

    async def scenario() -> None:
        def runtime() -> LookaheadRuntime:
            return LookaheadRuntime(
                Isolate(subagent_system="You review code."),
                RuntimeConfig(mode="sync", token_counter=approx_counter),
                messages=HISTORY,
            )

        first = runtime()
        first.append(delegation(json.dumps({"instruction": "review m.py"})))
        before = json.loads(json.dumps(first.save_state()))
        assert (await first.commit()).kind is CommitKind.SYNC
        after = json.loads(json.dumps(first.save_state()))
        fresh = runtime()
        for target, state, kind in (
            (first, before, CommitKind.SYNC),
            (fresh, before, CommitKind.SYNC),
            (first, after, CommitKind.NONE),
            (fresh, after, CommitKind.NONE),
        ):
            target.load_state(state)
            assert (await target.commit()).kind is kind
        await first.aclose()
        await fresh.aclose()

    asyncio.run(scenario())

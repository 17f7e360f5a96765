"""LookaheadLLM and LookaheadMemory with real LlamaIndex agents and LlamaIndex's own mock LLM."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike

from lookahead_sdk import RequestTags, context_policy
from lookahead_sdk.adapters.llamaindex import LookaheadLLM, LookaheadMemory
from lookahead_sdk.base.tokens import ApproxTokenCounter, CachedTokenCounter
from lookahead_sdk.core.runtime import CommitKind
from lookahead_sdk.strategies import KeepRecent, Offload, Summarize

from ..support.recording_proxy import RecordingProxy

CHUNK_WORDS = 150


def read(n: int) -> str:
    """read chunk n"""
    return f"chunk {n}: " + " ".join(f"w{n}_{k}" for k in range(CHUNK_WORDS))


Responder = Callable[[int], ChatMessage]


def function_calls(count: int) -> Responder:
    def respond(i: int) -> ChatMessage:
        if i % (count + 1) == count:
            return ChatMessage(role="assistant", content="done")
        return ChatMessage(
            role="assistant",
            blocks=[ToolCallBlock(tool_call_id=f"c{i}", tool_name="read", tool_kwargs={"n": i})],
        )

    return respond


def react_steps(count: int) -> Responder:
    def respond(i: int) -> ChatMessage:
        if i % (count + 1) == count:
            return ChatMessage(role="assistant", content="Thought: I can answer.\nAnswer: done")
        return ChatMessage(
            role="assistant",
            content=f'Thought: read more.\nAction: read\nAction Input: {{"n": {i}}}',
        )

    return respond


class Recorder:
    """LlamaIndex's mock LLM answers; this remembers what each call received."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.received: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.received.append(list(messages))
        return self.respond(len(self.received) - 1)


def wrapped(recorder: Recorder, policy: Any = None, **overrides: Any) -> LookaheadLLM:
    mock = MockFunctionCallingLLM(response_generator=recorder, is_chat_model=True)
    return LookaheadLLM(
        mock,
        policy or KeepRecent(budget=400, lookahead_at=600, hard_limit=900),
        window_tokens=8192,
        token_counter=CachedTokenCounter(ApproxTokenCounter()),
        **overrides,
    )


def commits(llm: LookaheadLLM) -> list[int]:
    return [i for i, call in enumerate(llm.calls) if call.commit is not CommitKind.NONE]


@pytest.mark.parametrize("streaming", [True, False])
def test_mid_run_tool_outputs_are_managed_and_the_commit_replaces_the_context(
    streaming: bool,
) -> None:
    recorder = Recorder(function_calls(9))
    llm = wrapped(recorder)
    agent = FunctionAgent(tools=[read], llm=llm, system_prompt="analyze", streaming=streaming)

    async def go() -> None:
        try:
            await agent.run("go", memory=llm.memory(), max_iterations=20)
        finally:
            await llm.aclose()

    asyncio.run(go())
    assert commits(llm), "the run never reached the hard limit"
    assert llm.session.runtime.stats.stale == 0
    for i in commits(llm):
        sent = recorder.received[i]
        assert sent[0].content == "analyze" and sent[1].content == "go"
        assert len(sent) < len(recorder.received[i - 1]) + 2  # fewer than the scratchpad would hold
    # Every call after the first commit got the runtime's (bounded) view, not the growing scratchpad.
    assert max(len(r) for r in recorder.received) < 2 + 2 * 9


def test_memory_carries_the_committed_history_into_the_next_run() -> None:
    recorder = Recorder(function_calls(6))
    llm = wrapped(recorder)
    agent = FunctionAgent(tools=[read], llm=llm, system_prompt="analyze")
    memory = llm.memory()

    async def go() -> None:
        try:
            await agent.run("first", memory=memory, max_iterations=20)
            await agent.run("second", memory=memory, max_iterations=20)
        finally:
            await llm.aclose()

    asyncio.run(go())
    first_run_calls = 7
    assert commits(llm) and commits(llm)[0] < first_run_calls
    second_start = recorder.received[first_run_calls]
    assert second_start[-1].content == "second"
    # The second run starts from the committed history, not from every message of the first run.
    assert len(second_start) < 2 + 2 * 6 + 2
    assert [m.content for m in second_start[:-1]][-1] == "done"  # the first run's answer was kept
    history = asyncio.run(memory.aget()) if False else memory.get()
    assert history[-1].role.value == "assistant" and history[-1].content == "done"


def test_messages_already_mirrored_are_not_stored_twice() -> None:
    recorder = Recorder(function_calls(2))
    llm = wrapped(recorder, Summarize())
    agent = FunctionAgent(tools=[read], llm=llm, system_prompt="analyze")
    memory = llm.memory()

    async def go() -> None:
        try:
            await agent.run("go", memory=memory)
        finally:
            await llm.aclose()

    asyncio.run(go())
    roles = [m.role.value for m in memory.get()]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m.get("role") for m in llm.session.runtime.main.messages] == ["system", *roles]


def test_react_agent_context_is_managed_too() -> None:
    recorder = Recorder(react_steps(9))
    llm = wrapped(recorder)
    agent = ReActAgent(tools=[read], llm=llm, system_prompt="analyze", streaming=False)

    async def go() -> None:
        try:
            await agent.run("go", memory=llm.memory(), max_iterations=20)
        finally:
            await llm.aclose()

    asyncio.run(go())
    assert commits(llm)
    assert max(len(r) for r in recorder.received) < 2 + 2 * 9


def test_react_agent_memory_holds_what_llamaindex_memory_holds() -> None:
    """ReActAgent sends its reasoning formatted as messages, then stores it as one joined message:
    the history carried into the next run is LlamaIndex's own, with nothing twice."""
    from llama_index.core.memory import Memory

    def two_runs(llm: Any, memory: Any) -> list[ChatMessage]:
        agent = ReActAgent(tools=[read], llm=llm, system_prompt="analyze", streaming=False)

        async def go() -> None:
            await agent.run("first", memory=memory, max_iterations=20)
            await agent.run("second", memory=memory, max_iterations=20)

        asyncio.run(go())
        return memory.get()

    plain_recorder = Recorder(react_steps(2))
    plain = MockFunctionCallingLLM(response_generator=plain_recorder, is_chat_model=True)
    expected = two_runs(plain, Memory.from_defaults(token_limit=100_000))

    recorder = Recorder(react_steps(2))
    llm = wrapped(recorder, KeepRecent(budget=4000, lookahead_at=6000, hard_limit=8000))
    try:
        got = two_runs(llm, llm.memory())
    finally:
        llm.close()
    assert [(m.role, m.content) for m in got] == [(m.role, m.content) for m in expected]
    joined = next(m.content for m in expected if m.role.value == "assistant")
    calls_per_run = 3  # two reasoning steps with an action, then the answer
    second_run_start = recorder.received[calls_per_run]
    assert sum(joined in (m.content or "") for m in second_run_start) == 1
    assert [(m.role, m.content) for m in second_run_start] == [
        (m.role, m.content) for m in plain_recorder.received[calls_per_run]
    ]


def test_agent_workflow_runs_through_the_wrapper() -> None:
    recorder = Recorder(function_calls(9))
    llm = wrapped(recorder)
    workflow = AgentWorkflow(
        agents=[
            FunctionAgent(
                name="analyst",
                description="reads code",
                tools=[read],
                llm=llm,
                system_prompt="analyze",
            )
        ]
    )

    async def go() -> None:
        try:
            await workflow.run("go", memory=llm.memory(), max_iterations=20)
        finally:
            await llm.aclose()

    asyncio.run(go())
    assert commits(llm) and max(len(r) for r in recorder.received) < 2 + 2 * 9


def test_decorator_swaps_the_policy_in_one_line() -> None:
    llm = wrapped(Recorder(function_calls(1)), Summarize())
    swapped = context_policy(Offload())(llm)
    # In place: an agent already built with this LLM runs the new policy.
    assert swapped is llm and isinstance(llm.policy, Offload)


def test_memory_needs_a_lookahead_llm() -> None:
    with pytest.raises(TypeError, match="LookaheadLLM"):
        LookaheadMemory(llm=MockFunctionCallingLLM())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="LlamaIndex LLM"):
        LookaheadLLM("not an llm", Summarize())  # type: ignore[arg-type]


def test_tags_reach_the_server_merged_with_the_llms_extra_body() -> None:
    with RecordingProxy() as proxy:
        model = OpenAILike(
            model="m",
            api_base=f"{proxy.url}/v1",
            api_key="x",
            is_chat_model=True,
            is_function_calling_model=True,
            additional_kwargs={"extra_body": {"own": 1}},
            context_window=8192,
            max_retries=0,
        )
        built = LookaheadLLM(
            model,
            Offload(),
            tags=RequestTags(program_id="li-agent"),
            token_counter=ApproxTokenCounter(),
            send_tags=True,  # the stub server is not one known to take tag fields
        )
        llm = context_policy(Summarize())(built)  # a swapped adapter keeps everything else

        async def go() -> Any:
            try:
                history = [ChatMessage(role="system", content="s")]
                await llm.achat_with_tools(
                    [FunctionTool.from_defaults(fn=read)], user_msg="q", chat_history=history
                )
                return llm.session.runtime.shape
            finally:
                await llm.aclose()

        shape = asyncio.run(go())
        (body,) = proxy.bodies("/chat/completions")
    assert body["program_id"] == "li-agent" and body["priority_class"] == "lc" and body["own"] == 1
    # Warm-ups render with what the request carried besides messages: the same tools and model.
    assert list(shape.tools) == body["tools"] and shape.model == body["model"]


def test_the_llm_is_usable_after_it_was_closed() -> None:
    """Like LangChain's middleware: after aclose() the memory still saves, and the next run
    starts a runtime that resumes the closed one's history."""
    recorder = Recorder(function_calls(2))
    llm = wrapped(recorder)
    agent = FunctionAgent(tools=[read], llm=llm, system_prompt="analyze")
    memory = llm.memory()

    async def go() -> tuple[dict[str, Any], str]:
        await agent.run("first", memory=memory, max_iterations=20)
        await llm.aclose()
        saved = memory.to_dict()
        try:
            answer = await agent.run("second", memory=memory, max_iterations=20)
        finally:
            await llm.aclose()
        return saved, str(answer)

    saved, answer = asyncio.run(go())
    state = saved["lookahead_state"]
    assert state is not None and read(0) in str(state)  # the first run's history
    assert answer == "done"
    second = recorder.received[3]  # the second run's first call: the first run, then the task
    assert read(0) in [m.content for m in second] and second[-1].content == "second"
    assert llm.saved_state() is not None  # closed again: its state kept for the next use

"""A multimodal message (text and an image) that a commit keeps reaches the model unchanged:
AutoGen holds it as a `UserMessage` with content parts, and the committed history the context
adopts must not flatten it to text."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import MultiModalMessage
from autogen_core import FunctionCall, Image
from autogen_core.models import CreateResult, LLMMessage, ModelFamily, RequestUsage, UserMessage
from autogen_ext.models.replay import ReplayChatCompletionClient
from PIL import Image as PILImage

from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext, LookaheadModelClient
from lookahead_sdk.base.tokens import ApproxTokenCounter, CachedTokenCounter
from lookahead_sdk.core.runtime import CommitKind
from lookahead_sdk.strategies import KeepRecent

INFO = {
    "vision": True,
    "function_calling": True,
    "json_output": False,
    "structured_output": False,
    "family": ModelFamily.UNKNOWN,
}
USAGE = RequestUsage(prompt_tokens=0, completion_tokens=0)


def read(n: int) -> str:
    """read chunk n"""
    return f"chunk {n}: " + " ".join(f"w{n}_{k}" for k in range(150))


class RecordingReplay(ReplayChatCompletionClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received: list[list[LLMMessage]] = []

    async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
        self.received.append(list(messages))
        return await super().create(messages, **kwargs)


def replay(calls: int) -> RecordingReplay:
    results: list[Any] = [
        CreateResult(
            finish_reason="function_calls",
            content=[FunctionCall(id=f"c{i}", name="read", arguments=json.dumps({"n": i}))],
            usage=USAGE,
            cached=False,
        )
        for i in range(calls)
    ]
    results.append(CreateResult(finish_reason="stop", content="done", usage=USAGE, cached=False))
    return RecordingReplay(results, model_info=INFO)


def test_a_kept_multimodal_task_reaches_the_model_with_its_image_after_a_commit() -> None:
    image = Image(PILImage.new("RGB", (4, 4), "red"))
    client = replay(10)
    ctx = LookaheadChatCompletionContext(
        KeepRecent(budget=400, lookahead_at=600, hard_limit=900),  # keeps the task
        system_message="analyze",
        token_counter=CachedTokenCounter(ApproxTokenCounter()),
        window_tokens=8192,
    )
    agent = AssistantAgent(
        "analyst",
        LookaheadModelClient(client, context=ctx),
        tools=[read],
        system_message="analyze",
        model_context=ctx,
        max_tool_iterations=20,
    )

    async def go() -> None:
        try:
            await agent.run(task=MultiModalMessage(content=["what is this", image], source="user"))
        finally:
            await ctx.aclose()

    asyncio.run(go())
    committed = [i for i, call in enumerate(ctx.calls) if call.commit is not CommitKind.NONE]
    assert committed, "the history never reached the hard limit"
    for sent in client.received[committed[0] :]:
        task = next(m for m in sent if isinstance(m, UserMessage))
        assert isinstance(task.content, list), task
        assert task.content[0] == "what is this"
        assert isinstance(task.content[1], Image)
        assert task.content[1].data_uri == image.data_uri

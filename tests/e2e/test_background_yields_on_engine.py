"""A best-effort LLM call (a lookahead summary) on the real engine stops at its next token when a
foreground request arrives, and continues afterwards into one reply; the session's timeline
sees both."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from lookahead_sdk import RequestTags, use_tags
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.client.timeline import RequestTimeline, wait_behind

pytestmark = pytest.mark.engine

BACKGROUND = RequestTags(
    "summarizing", priority_class="be", is_lookahead=True, lookahead_group_id="g"
)
STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper, in detail."}]


async def test_a_background_reply_yields_to_a_foreground_request_and_continues(
    embedded_engine,
) -> None:
    endpoint = await Endpoint.aconnect(embedded_engine.base_url)
    gate = endpoint.slack_gate()
    assert gate is not None  # llama.cpp: client-side slack admission
    llm = endpoint.chat_client(gate)
    endpoint.session.timeline = RequestTimeline()
    try:

        async def summary():
            with use_tags(BACKGROUND):
                return await llm.chat(STORY, max_tokens=120)

        background = asyncio.create_task(summary())
        entries = endpoint.session.timeline
        # Polling the timeline, which the transports fill from another task.
        while not background.done() and not any(  # noqa: ASYNC110
            e.kind == "background_llm" and e.first_output_at for e in entries.entries
        ):
            await asyncio.sleep(0.01)  # until the summary decodes
        question = f"{uuid.uuid4().hex} Say hello in five words."
        with use_tags(RequestTags("asking")):
            answer = await llm.chat([{"role": "user", "content": question}], max_tokens=6)
        reply = await background

        assert llm.yields >= 1
        text = reply.message["content"] or ""
        assert reply.completion_tokens >= 100  # one reply, continued to (about) its length
        opening = text[:40]
        assert text.count(opening) == 1  # the continued part did not start the story again
        asked = next(e for e in entries.entries if e.kind == "foreground")
        # The summary stopped within a token or so of the question's arrival: most of the
        # question's wait was its own prefill, not the summary's decode.
        split = wait_behind(
            (asked.sent_at, asked.first_output_at or asked.sent_at), "asking", entries.entries
        )
        assert split["background_llm"] < 0.5 * answer.ttft_s
        summaries = [e for e in entries.entries if e.kind == "background_llm"]
        assert len(summaries) == llm.yields + 1
    finally:
        await llm.aclose()

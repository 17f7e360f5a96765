"""The embedded engine aborts a batch of best-effort prompt tokens when a latency-critical
request arrives (engine.patches, "abort a best-effort batch"), and the best-effort request then
goes on from where its last computed batch left it: the same reply, nothing computed twice
beyond the aborted batch, nothing lost."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.engine.server import EngineHandle

pytestmark = pytest.mark.engine

ABORT_LINE = "best-effort batch aborted"
PROMPT_UNITS = 300  # ~900 tokens: seven or more of the engine's 128-token batches
URGENT_REQUESTS = 3


def prompt_of(units: int) -> str:
    # A fresh prefix, so no slot or host cache holds any of it.
    return f"{uuid.uuid4().hex} " + " ".join(f"item{i % 97} is next" for i in range(units))


def aborts_logged(log_path: str | Path) -> int:
    return Path(log_path).read_text(errors="replace").count(ABORT_LINE)


async def complete(
    client: httpx.AsyncClient, handle: EngineHandle, prompt: str, **fields: object
) -> dict[str, Any]:
    response = await client.post(f"{handle.base_url}/completion", json={"prompt": prompt, **fields})
    response.raise_for_status()
    return response.json()


async def test_an_urgent_request_aborts_a_best_effort_batch_and_the_reply_is_unchanged(
    embedded_engine: EngineHandle,
) -> None:
    prompt = prompt_of(PROMPT_UNITS)
    # Greedy, and no prompt reuse: both runs compute the whole prompt in slot 0.
    reply_fields = {"n_predict": 12, "temperature": 0.0, "cache_prompt": False, "id_slot": 0}
    best_effort = RequestTags(program_id="abort-be", priority_class="be").to_body()
    async with httpx.AsyncClient(timeout=180) as client:
        undisturbed = await complete(client, embedded_engine, prompt, **reply_fields)
        aborts_before = aborts_logged(embedded_engine.log_path)

        disturbed = asyncio.create_task(
            complete(client, embedded_engine, prompt, **reply_fields, **best_effort)
        )
        urgent_replies = []
        for _ in range(URGENT_REQUESTS):
            await asyncio.sleep(0.4)  # into the best-effort prompt's next batches
            assert not disturbed.done(), "the best-effort prompt ended early (make it longer)"
            urgent_replies.append(
                await complete(client, embedded_engine, prompt_of(2), n_predict=1, id_slot=1)
            )
        reply = await disturbed

    assert aborts_logged(embedded_engine.log_path) > aborts_before
    assert all(urgent["tokens_predicted"] == 1 for urgent in urgent_replies)
    # The aborted batches' tokens went back to the prompt and were computed once more: the same
    # prompt, the same greedy reply, as if nothing had come between.
    assert reply["tokens_evaluated"] == undisturbed["tokens_evaluated"]
    assert reply["content"] == undisturbed["content"], (reply["content"], undisturbed["content"])


async def test_an_urgent_request_does_not_abort_a_latency_critical_batch(
    embedded_engine: EngineHandle,
) -> None:
    async with httpx.AsyncClient(timeout=180) as client:
        aborts_before = aborts_logged(embedded_engine.log_path)
        running = asyncio.create_task(
            complete(client, embedded_engine, prompt_of(PROMPT_UNITS), n_predict=1, id_slot=0)
        )
        await asyncio.sleep(0.4)
        assert not running.done(), "the first prompt ended early (make it longer)"
        await complete(client, embedded_engine, prompt_of(2), n_predict=1, id_slot=1)
        await running
    assert aborts_logged(embedded_engine.log_path) == aborts_before

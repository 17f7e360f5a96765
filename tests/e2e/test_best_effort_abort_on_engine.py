"""The embedded engine aborts a batch holding best-effort prompt tokens when a latency-critical
request arrives (engine.patches, "abort a best-effort batch"): the best-effort request then goes
on from where its last computed batch left it and a reply decoding in the same batches adds its
last token again; the same replies, nothing lost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.engine.abort_log import batch_aborts
from lookahead_sdk.engine.server import EngineHandle
from tests.support.engine import fresh_prompt

pytestmark = pytest.mark.engine

PROMPT_UNITS = 300  # ~900 tokens: seven or more of the engine's 128-token batches
URGENT_REQUESTS = 3


def aborts_logged(log_path: str | Path) -> int:
    return batch_aborts(Path(log_path).read_text(errors="replace")).aborts


async def complete(
    client: httpx.AsyncClient, handle: EngineHandle, prompt: str, **fields: object
) -> dict[str, Any]:
    response = await client.post(f"{handle.base_url}/completion", json={"prompt": prompt, **fields})
    response.raise_for_status()
    return response.json()


async def test_an_urgent_request_aborts_a_best_effort_batch_and_the_replies_are_unchanged(
    embedded_engine: EngineHandle,
) -> None:
    # A best-effort prompt in slot 0 and a latency-critical reply decoding in slot 2 share the
    # engine's batches; urgent requests for slot 1 abort those batches.
    prompt, decoded_prompt = fresh_prompt(PROMPT_UNITS), fresh_prompt(20)
    # Greedy, and no prompt reuse: every run computes its whole prompt.
    greedy = {"temperature": 0.0, "cache_prompt": False}
    best_effort = RequestTags(program_id="abort-be", priority_class="be").to_body()

    async def both_replies(client: httpx.AsyncClient, *, urgent: int) -> tuple[dict, dict, list]:
        warm_up = asyncio.create_task(
            complete(
                client, embedded_engine, prompt, n_predict=12, id_slot=0, **greedy, **best_effort
            )
        )
        await asyncio.sleep(0.3)
        decoding = asyncio.create_task(
            complete(client, embedded_engine, decoded_prompt, n_predict=48, id_slot=2, **greedy)
        )
        urgent_replies = []
        for _ in range(urgent):
            await asyncio.sleep(0.4)  # into the next batches of both
            assert not warm_up.done(), "the best-effort prompt ended early (make it longer)"
            urgent_replies.append(
                await complete(client, embedded_engine, fresh_prompt(2), n_predict=1, id_slot=1)
            )
        return await warm_up, await decoding, urgent_replies

    async with httpx.AsyncClient(timeout=180) as client:
        undisturbed_warm_up, undisturbed_decoding, _ = await both_replies(client, urgent=0)
        aborts_before = aborts_logged(embedded_engine.log_path)
        warm_up, decoding, urgent_replies = await both_replies(client, urgent=URGENT_REQUESTS)

    assert aborts_logged(embedded_engine.log_path) > aborts_before
    assert all(urgent["tokens_predicted"] == 1 for urgent in urgent_replies)
    # The aborted batches' tokens were undone and computed once more: the same prompts, the
    # same greedy replies, as if nothing had come between.
    assert warm_up["tokens_evaluated"] == undisturbed_warm_up["tokens_evaluated"]
    assert warm_up["content"] == undisturbed_warm_up["content"]
    assert decoding["tokens_predicted"] == undisturbed_decoding["tokens_predicted"]
    assert decoding["content"] == undisturbed_decoding["content"]


async def test_an_urgent_request_does_not_abort_a_latency_critical_batch(
    embedded_engine: EngineHandle,
) -> None:
    async with httpx.AsyncClient(timeout=180) as client:
        aborts_before = aborts_logged(embedded_engine.log_path)
        running = asyncio.create_task(
            complete(client, embedded_engine, fresh_prompt(PROMPT_UNITS), n_predict=1, id_slot=0)
        )
        await asyncio.sleep(0.4)
        assert not running.done(), "the first prompt ended early (make it longer)"
        await complete(client, embedded_engine, fresh_prompt(2), n_predict=1, id_slot=1)
        await running
    assert aborts_logged(embedded_engine.log_path) == aborts_before

"""llama-server's own counters (`client.engine_counters`): parsed from its `/metrics`, a run's
share is the difference of two reads."""

from __future__ import annotations

import uuid

import httpx
import pytest

from lookahead_sdk.client.engine_counters import (
    EngineCounters,
    parse_llamacpp_metrics,
    read_engine_counters,
)
from lookahead_sdk.engine.server import EngineHandle

# The shape llama-server writes (HELP / TYPE lines, one sample per counter).
METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 42744
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 214.262
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3362
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 1275
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 2.5
"""


def test_the_counters_are_read_from_llama_servers_metrics_text() -> None:
    counters = parse_llamacpp_metrics(METRICS)
    assert counters == EngineCounters(
        prompt_tokens=42744, generated_tokens=3362, decode_calls=1275, busy_slot_calls=3187.5
    )


def test_a_server_without_the_counters_has_none() -> None:
    assert parse_llamacpp_metrics("") is None
    assert parse_llamacpp_metrics("# a simulator\nsim_requests_total 4\n") is None
    partial = "\n".join(line for line in METRICS.splitlines() if "n_decode_total" not in line)
    assert parse_llamacpp_metrics(partial) is None


def test_a_runs_share_is_the_difference_with_busy_slots_per_call_over_its_own_calls() -> None:
    before = EngineCounters(
        prompt_tokens=100, generated_tokens=10, decode_calls=10, busy_slot_calls=10
    )
    after = EngineCounters(
        prompt_tokens=600, generated_tokens=50, decode_calls=30, busy_slot_calls=70
    )
    assert after.since(before) == {
        "prompt_tokens": 500,
        "generated_tokens": 40,
        "decode_calls": 20,
        "busy_slots_per_call": 3.0,  # 60 busy slot-calls in the run's 20 calls, not 70 / 30
    }
    assert before.since(before)["busy_slots_per_call"] == 0.0


async def test_an_unreachable_server_reads_as_no_counters() -> None:
    assert await read_engine_counters("http://127.0.0.1:9") is None


@pytest.mark.engine
async def test_a_request_to_the_embedded_engine_shows_in_its_counters(
    embedded_engine: EngineHandle,
) -> None:
    before = await read_engine_counters(embedded_engine.base_url)
    assert before is not None  # the embedded engine runs with --metrics
    prompt = f"{uuid.uuid4().hex} " + " ".join(f"item{i} is next" for i in range(60))
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            f"{embedded_engine.base_url}/completion", json={"prompt": prompt, "n_predict": 4}
        )
    response.raise_for_status()
    computed = response.json()["timings"]["prompt_n"]
    after = await read_engine_counters(embedded_engine.base_url)
    assert after is not None
    share = after.since(before)
    assert share["prompt_tokens"] == computed and share["generated_tokens"] == 4
    assert share["decode_calls"] >= 4
    # One request, so one busy slot in each of its calls. llama-server exports its lifetime
    # mean of busy slots per call rounded, so on an engine that has served many calls a short
    # run's figure is close, not exact (0.996 seen on the shared test engine).
    assert share["busy_slots_per_call"] == pytest.approx(1.0, abs=0.05)

"""Batch measurements on the real embedded llama.cpp engine (tiny plan)."""

import asyncio

import pytest

from lookahead_sdk.bench.embedded_batches import (
    EmbeddedMeasurementPlan,
    fastest_per_shape,
    measure_embedded_batches,
)
from lookahead_sdk.scheduling import BatchShape, PrefillChunk
from lookahead_sdk.scheduling.measurements import BatchMeasurement
from tests.support.engine import embedded_engine  # noqa: F401  (session fixture)


def test_fastest_repeat_is_kept_per_batch_shape() -> None:
    a, b = BatchShape((100,), ()), BatchShape((), (PrefillChunk(8, 0),))
    samples = [BatchMeasurement(a, 3.0), BatchMeasurement(b, 9.0), BatchMeasurement(a, 2.0)]
    assert fastest_per_shape(samples) == (BatchMeasurement(a, 2.0), BatchMeasurement(b, 9.0))


@pytest.mark.engine
def test_measured_batches_carry_the_controlled_cached_prefix(embedded_engine) -> None:  # noqa: F811
    plan = EmbeddedMeasurementPlan(
        prefix_levels=(0, 512),
        new_tokens=(16, 64),
        concurrent_prefix_levels=(256,),
        concurrent_new_tokens=(32,),
        decode_tokens=4,
        passes=1,
        seed=7,
    )
    measured = asyncio.run(measure_embedded_batches(embedded_engine.base_url, plan))
    prefills = [m for m in measured.batches if m.batch.prefill_chunks]
    decodes = [
        m for m in measured.batches if m.batch.decode_contexts and not m.batch.prefill_chunks
    ]
    assert all(m.latency_ms > 0 for m in measured.batches)
    single = [m.batch.prefill_chunks[0] for m in prefills if len(m.batch.prefill_chunks) == 1]
    # Level 0 computes everything; a request of exactly the 512 prefix tokens brings the slot to
    # level 512 (nothing shared with what it held), whose requests then reuse all of it. Slot 1's
    # warm-up to the pair level is a single sample too.
    assert single == [
        PrefillChunk(16, 0),
        PrefillChunk(64, 0),
        PrefillChunk(512, 0),
        PrefillChunk(16, 512),
        PrefillChunk(64, 512),
        PrefillChunk(256, 0),
    ]
    pairs = [m for m in prefills if len(m.batch.prefill_chunks) == 2]
    # One request with both prompts: each lands on the slot caching its prefix, in one batch.
    assert [m.batch.prefill_chunks for m in pairs] == [(PrefillChunk(32, 256),) * 2]
    assert any(len(m.batch.decode_contexts) == 2 for m in decodes)

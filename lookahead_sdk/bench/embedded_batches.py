"""Measure batch latencies on the real embedded llama.cpp engine, for calibrating Eq. 1.

llama-server reports per-request timings: `prompt_n` tokens computed after `cache_n` tokens reused
from the slot's cache took `prompt_ms`; `predicted_n` generated tokens took `predicted_ms`. Each
request sends token ids to a known slot, so the cached prefix is exactly controlled: a request
that brings the slot to the next prefix level computes only the tokens in between (itself a
sample), and the requests at that level reuse all of it.

Samples recorded per request:
- prefill: one chunk (new_tokens=prompt_n, prefix_tokens=cache_n), latency prompt_ms;
- decode: one decode step at the mean context of the generation, latency predicted_ms/predicted_n.
Pairs go as one request with two best-effort prompts, so llama-server queues both tasks at once
and computes them in the same batches (sent as two requests, the first often started alone and
the pair measured one chunk's time); each prompt lands on the slot that caches its prefix. A pair
gives a two-chunk prefill sample and a two-context decode sample.
The plan runs `passes` times and the fastest sample per batch shape is kept (see
`fastest_per_shape`): on a shared CPU, other processes only ever add time. The engine measured
must run without a host-memory prompt cache (`cache_ram_mib=0`): restoring a prompt from it
would be timed as prefill.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from lookahead_sdk.scheduling.latency_model import BatchShape, PrefillChunk
from lookahead_sdk.scheduling.measurements import BatchMeasurement, MeasurementSet

# Token ids drawn from the middle of SmolLM2's 49152-token vocabulary (no special tokens).
_TOKEN_ID_RANGE = (1000, 45000)
_PAIR_TOLERANCE = 0.1


@dataclass(frozen=True, slots=True)
class EmbeddedMeasurementPlan:
    """Cached prefixes 0..6K tokens x new-token counts, single and two-at-once requests."""

    prefix_levels: tuple[int, ...] = (0, 1536, 3072, 4608, 6144)
    new_tokens: tuple[int, ...] = (16, 128, 512)
    concurrent_prefix_levels: tuple[int, ...] = (1536, 4608)
    concurrent_new_tokens: tuple[int, ...] = (64, 256)
    decode_tokens: int = 16
    passes: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.passes, bool) or not isinstance(self.passes, int) or self.passes < 1:
            raise ValueError(
                f"EmbeddedMeasurementPlan.passes must be an int >= 1, got {self.passes!r}"
            )

    @property
    def request_count(self) -> int:
        """Measured requests (for progress), a pair counted as two; slot 1's warm-ups not included."""
        reach = sum(1 for level in self.prefix_levels if level > 0)
        single = reach + len(self.prefix_levels) * len(self.new_tokens)
        pairs = 2 * len(self.concurrent_prefix_levels) * len(self.concurrent_new_tokens)
        return self.passes * (single + pairs)


@dataclass(frozen=True, slots=True)
class _Timings:
    prompt_n: int
    cache_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float

    @classmethod
    def from_response(cls, body: dict[str, Any]) -> _Timings:
        timings = body.get("timings")
        if not isinstance(timings, dict):
            raise ValueError(f"llama-server answered without 'timings': {sorted(body)}")
        return cls(
            prompt_n=int(timings["prompt_n"]),
            cache_n=int(timings.get("cache_n", 0)),
            prompt_ms=float(timings["prompt_ms"]),
            predicted_n=int(timings["predicted_n"]),
            predicted_ms=float(timings["predicted_ms"]),
        )


async def measure_embedded_batches(
    base_url: str,
    plan: EmbeddedMeasurementPlan | None = None,
    *,
    on_request: Callable[[], None] | None = None,
    timeout_s: float = 300.0,
) -> MeasurementSet:
    """Run `plan` against a llama-server at `base_url` (two slots or more) and return samples.

    Prefixes are nested (level L is the first L tokens of one random sequence), so reaching the
    next level costs only the tokens in between, and that request is itself a sample. Singles
    run on slot 0 in ascending levels; pairs run in descending levels once slot 1 holds the
    longest pair prefix, so both slots always have exactly the level cached.
    """
    plan = plan or EmbeddedMeasurementPlan()
    rng = random.Random(plan.seed)
    levels = sorted(plan.prefix_levels)
    pair_levels = sorted(plan.concurrent_prefix_levels, reverse=True)
    slot_prefixes = (
        random_token_ids(rng, max([*levels, *pair_levels], default=0)),
        random_token_ids(rng, max(pair_levels, default=0)),
    )
    samples: list[BatchMeasurement] = []

    def done(count: int = 1) -> None:
        for _ in range(count):
            if on_request:
                on_request()

    load_before = os.getloadavg()
    async with httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout_s) as client:

        async def complete(prompts: list[list[int]], slot: int | None) -> list[_Timings]:
            return await _complete(client, prompts, slot, plan)

        for _ in range(plan.passes):  # whole passes, so a burst of CPU contention spoils one
            for level in levels:
                if level > 0:  # cache exactly the level's prefix
                    (reach,) = await complete([slot_prefixes[0][:level]], 0)
                    samples.extend(_single_samples(reach))
                    done()
                for new_tokens in plan.new_tokens:  # fresh new tokens: only the prefix is cached
                    prompt = slot_prefixes[0][:level] + random_token_ids(rng, new_tokens)
                    (single,) = await complete([prompt], 0)
                    samples.extend(_single_samples(single))
                    done()
            if pair_levels:
                (warm,) = await complete([slot_prefixes[1]], 1)
                samples.extend(_single_samples(warm))
            for level in pair_levels:
                for new_tokens in plan.concurrent_new_tokens:
                    prompts = [
                        prefix[:level] + random_token_ids(rng, new_tokens)
                        for prefix in slot_prefixes
                    ]
                    samples.extend(_pair_samples(await complete(prompts, None)))
                    done(2)
    return MeasurementSet(
        fastest_per_shape(samples),
        {
            "engine": "llama.cpp llama-server (embedded)",
            "aggregation": f"fastest per batch shape over {plan.passes} passes",
            "loadavg_1m_before_after": [load_before[0], os.getloadavg()[0]],
            "base_url": base_url,
            "plan": {
                "prefix_levels": list(plan.prefix_levels),
                "new_tokens": list(plan.new_tokens),
                "concurrent_prefix_levels": list(plan.concurrent_prefix_levels),
                "concurrent_new_tokens": list(plan.concurrent_new_tokens),
                "decode_tokens": plan.decode_tokens,
                "passes": plan.passes,
                "seed": plan.seed,
            },
        },
    )


async def _complete(
    client: httpx.AsyncClient,
    prompts: list[list[int]],
    slot: int | None,
    plan: EmbeddedMeasurementPlan,
) -> list[_Timings]:
    """One request: a single prompt pinned to `slot`, or several prompts (`slot=None`) that
    llama-server queues together and places by cached-prefix similarity."""
    body: dict[str, Any] = {
        "prompt": prompts[0] if len(prompts) == 1 else prompts,
        "cache_prompt": True,
        "n_predict": plan.decode_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if slot is not None:
        body["id_slot"] = slot
    if len(prompts) > 1:
        # The engine closes a batch after a latency-critical prompt's last chunk
        # (engine.patches); best-effort prompts share one, as a measured pair must.
        body["priority_class"] = "be"
    response = await client.post("/completion", json=body)
    response.raise_for_status()
    answer = response.json()
    results = answer if isinstance(answer, list) else [answer]
    if len(results) != len(prompts):
        raise ValueError(f"llama-server answered {len(results)} results for {len(prompts)} prompts")
    return [_Timings.from_response(result) for result in results]


def _single_samples(t: _Timings) -> list[BatchMeasurement]:
    samples = []
    if t.prompt_n > 0 and t.prompt_ms > 0:
        samples.append(
            BatchMeasurement(BatchShape((), (PrefillChunk(t.prompt_n, t.cache_n),)), t.prompt_ms)
        )
    if t.predicted_n > 1 and t.predicted_ms > 0:
        context = t.cache_n + t.prompt_n + t.predicted_n // 2
        samples.append(BatchMeasurement(BatchShape((context,), ()), t.predicted_ms / t.predicted_n))
    return samples


def _pair_samples(pair: Sequence[_Timings]) -> list[BatchMeasurement]:
    samples = []
    # Computed in the same batches, both prompts finish together; if not, the pair was split.
    batched = max(t.prompt_ms for t in pair) <= (1 + _PAIR_TOLERANCE) * min(
        t.prompt_ms for t in pair
    )
    if batched and all(t.prompt_n > 0 and t.prompt_ms > 0 for t in pair):
        chunks = tuple(PrefillChunk(t.prompt_n, t.cache_n) for t in pair)
        samples.append(BatchMeasurement(BatchShape((), chunks), max(t.prompt_ms for t in pair)))
    if all(t.predicted_n > 1 and t.predicted_ms > 0 for t in pair):
        contexts = tuple(t.cache_n + t.prompt_n + t.predicted_n // 2 for t in pair)
        step_ms = max(t.predicted_ms / t.predicted_n for t in pair)
        samples.append(BatchMeasurement(BatchShape(contexts, ()), step_ms))
    return samples


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def fastest_per_shape(samples: Sequence[BatchMeasurement]) -> tuple[BatchMeasurement, ...]:
    """One sample per batch shape, the fastest: on a shared CPU other processes only ever add
    time, so the minimum over passes is the best estimate of the engine's own cost."""
    fastest: dict[BatchShape, BatchMeasurement] = {}
    for sample in samples:
        best = fastest.get(sample.batch)
        if best is None or sample.latency_ms < best.latency_ms:
            fastest[sample.batch] = sample
    return tuple(fastest.values())


def random_token_ids(rng: random.Random, count: int) -> list[int]:
    """`count` token ids no cache holds, none of them special: a prompt for timing the engine."""
    low, high = _TOKEN_ID_RANGE
    return [rng.randrange(low, high) for _ in range(count)]


DEFAULT_MEASURE_PORT = 18231


def measure_on_embedded_engine(
    plan: EmbeddedMeasurementPlan | None = None,
    *,
    port: int = DEFAULT_MEASURE_PORT,
    threads: int = 1,
    show_progress: bool = True,
) -> MeasurementSet:
    """Start (or reuse) the embedded engine with two slots on `port`, measure, and stop the
    engine again if this call started it.

    One thread by default: on a shared CPU, two multi-threaded ggml processes spin-wait at
    barriers and slow each other down by orders of magnitude (we saw 3 s per decoded token);
    a single-threaded engine is only time-sliced. The fit describes that engine configuration.
    """
    from rich.progress import Progress

    from lookahead_sdk.engine.config import LLAMA_CPP_BATCH_TOKENS
    from lookahead_sdk.engine.server import EngineConfig, ensure_engine, stop_engine

    plan = plan or EmbeddedMeasurementPlan()
    # One request's prompt must be one batch, so that its prompt_ms is that batch's latency.
    handle = ensure_engine(
        EngineConfig(
            port=port,
            slots=2,
            threads=threads,
            cache_ram_mib=0,
            batch_tokens=LLAMA_CPP_BATCH_TOKENS,
        ),
        show_progress=show_progress,
    )
    # A SIGTERM (e.g. from `timeout`) would skip `finally` and leave the engine running.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        with Progress(disable=not show_progress, transient=True) as progress:
            task = progress.add_task("measuring embedded engine batches", total=plan.request_count)
            measured = asyncio.run(
                measure_embedded_batches(
                    handle.base_url, plan, on_request=lambda: progress.advance(task)
                )
            )
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not handle.reused:
            stop_engine(port)
    return MeasurementSet(
        measured.batches,
        {
            **measured.metadata,
            "model": handle.model,
            "quantization": handle.config.quantization,
            "threads": handle.config.threads,
            "flash_attn": handle.config.flash_attn,
            "batch_tokens": handle.config.batch_tokens,
        },
    )

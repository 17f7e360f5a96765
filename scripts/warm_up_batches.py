#!/usr/bin/env python3
"""What a warm-up's engine batch size costs on the embedded engine, the measurement behind
`LlamaCppWarmer(warm_up_batch_tokens=32)`.

1. Alone: 512 new tokens extending a cached context of 1K-4K tokens, in batches of 128 (the
   engine's), 64 or 32 (`best_effort_batch_tokens`); prefill rate (tokens/s) per sample.
2. Beside decoding replies, an agent's usual warm-up: three slots decode 48 tokens each on
   ~2.4K-token contexts while 1,024 best-effort tokens extend a ~2.7K-token context in another
   slot, in 128-token chunks (the warmer's) with the engine's batches or 32-token ones; and the
   same work one after the other (decodes, then the prefill alone). Seconds until all is done.

The arms alternate within each sample, so a machine whose speed drifts slows all alike; read the
medians side by side in one run.

    python scripts/warm_up_batches.py --json docs/results/diagnostics/warm_up_batches.json
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import httpx
from rich.progress import Progress

from lookahead_sdk.bench.common import write_json
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.server import ensure_engine

PORT = 18152
CONTEXTS = (1024, 2048, 3072, 4096)
BATCHES = (128, 64, 32)
MIXED_ARMS = ("one_after_the_other", "chunks_engine_batches", "chunks_batches_32")
CHUNK_TOKENS = 128
DECODE_TOKENS = 48


def text(words: int, seed: int) -> str:
    return " ".join(f"w{seed}x{i % 53} item{i % 97}" for i in range(words))


class Engine:
    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self.client, self.base_url = client, base_url

    async def tokens(self, content: str) -> list[int]:
        reply = await self.client.post(f"{self.base_url}/tokenize", json={"content": content})
        reply.raise_for_status()
        return reply.json()["tokens"]

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = await self.client.post(
            f"{self.base_url}/completion", json={"cache_prompt": True, "temperature": 0, **body}
        )
        reply.raise_for_status()
        return reply.json()

    async def prefill(self, ids: list[int], slot: int, batch: int = 0) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": ids, "n_predict": 0, "id_slot": slot}
        body["priority_class"] = "be"
        if batch:
            body["best_effort_batch_tokens"] = batch
        return await self.complete(body)

    async def decode(self, prompts: list[str]) -> None:
        await asyncio.gather(
            *(
                self.complete(
                    {"prompt": prompt, "n_predict": DECODE_TOKENS, "ignore_eos": True, "id_slot": i}
                )
                for i, prompt in enumerate(prompts)
            )
        )


async def alone(engine: Engine, sample: int) -> list[dict[str, Any]]:
    rows = []
    cached_text = await engine.tokens(f"branch {text(1200, 9)}")
    for context in CONTEXTS:
        base = cached_text[:context]
        extra = (await engine.tokens(f"{uuid.uuid4().hex} {text(200, 20 + sample)}"))[:512]
        for batch in BATCHES:
            await engine.prefill(base, slot=3)
            timings = (await engine.prefill(base + extra, slot=3, batch=batch))["timings"]
            rows.append(
                {
                    "context": context,
                    "batch": batch,
                    "tokens_per_s": round(timings["prompt_n"] / (timings["prompt_ms"] / 1000), 2),
                }
            )
    return rows


async def mixed(engine: Engine, sample: int) -> list[dict[str, Any]]:
    rows = []
    lives = [f"live{i} {text(400, i)}" for i in range(3)]
    base = await engine.tokens(f"branch {text(450, 9)}")
    extra = (await engine.tokens(f"{uuid.uuid4().hex} {text(150, 40 + sample)}"))[:1024]
    for arm in MIXED_ARMS:
        await engine.prefill(base, slot=3)
        prompts = [f"{live} {uuid.uuid4().hex}" for live in lives]
        for i, prompt in enumerate(prompts):  # the replies' prompts cached: they only decode
            await engine.complete({"prompt": prompt, "n_predict": 0, "id_slot": i})
        started = time.perf_counter()
        if arm == "one_after_the_other":
            await engine.decode(prompts)
            await engine.prefill(base + extra, slot=3)
        else:
            batch = 32 if arm == "chunks_batches_32" else 0

            await asyncio.gather(engine.decode(prompts), chunked(engine, base, extra, batch))
        rows.append({"arm": arm, "seconds": round(time.perf_counter() - started, 4)})
    return rows


async def chunked(engine: Engine, base: list[int], extra: list[int], batch: int) -> None:
    """`extra` after `base` in the warmer's chunks, each extending the one before."""
    for end in range(CHUNK_TOKENS, len(extra) + CHUNK_TOKENS, CHUNK_TOKENS):
        await engine.prefill(base + extra[:end], slot=3, batch=batch)


async def measure(samples: int) -> dict[str, Any]:
    handle = ensure_engine(EngineConfig(port=PORT, slots=4))
    alone_rows: list[dict[str, Any]] = []
    mixed_rows: list[dict[str, Any]] = []
    try:
        async with httpx.AsyncClient(timeout=600) as client:
            engine = Engine(client, handle.base_url)
            with Progress() as progress:
                task = progress.add_task("samples", total=samples)
                for sample in range(samples):
                    alone_rows += await alone(engine, sample)
                    mixed_rows += await mixed(engine, sample)
                    progress.advance(task)
    finally:
        if not handle.reused:
            handle.stop()
    return {
        "samples": samples,
        "new_tokens_alone": 512,
        "chunk_tokens": CHUNK_TOKENS,
        "decode_tokens": DECODE_TOKENS,
        "median_tokens_per_s": {
            str(context): {
                str(batch): statistics.median(
                    row["tokens_per_s"]
                    for row in alone_rows
                    if row["context"] == context and row["batch"] == batch
                )
                for batch in BATCHES
            }
            for context in CONTEXTS
        },
        "median_mixed_s": {
            arm: statistics.median(row["seconds"] for row in mixed_rows if row["arm"] == arm)
            for arm in MIXED_ARMS
        },
        "alone": alone_rows,
        "mixed": mixed_rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    document = asyncio.run(measure(args.samples))
    write_json(args.json, document)
    for context, by_batch in document["median_tokens_per_s"].items():
        print(f"context {context}: " + ", ".join(f"{b}: {r:.0f}/s" for b, r in by_batch.items()))
    for arm, seconds in document["median_mixed_s"].items():
        print(f"{arm:>22}: {seconds:.2f} s")


if __name__ == "__main__":
    main()

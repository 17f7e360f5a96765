#!/usr/bin/env python3
"""How long an agent's request waits behind a warm-up chunk on the embedded engine, by the
chunk's batch size: the situation of a one-agent run whose tool call returns while a chunk runs.

Two slots hold ~3K-token contexts (the agent's live one and its branch). Per sample, a request
adding ~200 tokens to the live context (n_predict 1, latency-critical) is sent alone, or 0.12 s
after a ~130-token best-effort chunk extending the branch, in the engine's 128-token batches or
in 16-token ones (`best_effort_batch_tokens`). The three alternate, so a machine whose speed
drifts slows all alike. Read the medians side by side in one run.

    python scripts/foreground_behind_best_effort.py --json docs/results/diagnostics/foreground_behind_best_effort.json
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import httpx
from rich.progress import track

from lookahead_sdk.bench.common import write_json
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.server import ensure_engine

PORT = 18151
ARMS: dict[str, int | None] = {"alone": None, "engine_batches": 0, "batches_16": 16}
CHUNK_AHEAD_S = 0.12  # the chunk's head start: inside its first batch


def text(words: int, seed: int) -> str:
    return " ".join(f"w{seed}x{i % 53} item{i % 97}" for i in range(words))


async def completion(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    reply = await client.post(url, json={"cache_prompt": True, **body})
    reply.raise_for_status()
    return time.perf_counter() - started


async def sample(client: httpx.AsyncClient, url: str, live: str, branch: str, arm: str) -> dict:
    batch = ARMS[arm]
    chunk = None
    if batch is not None:
        body: dict[str, Any] = {
            "prompt": f"{branch} {uuid.uuid4().hex} {text(14, 50)}",
            "n_predict": 0,
            "id_slot": 1,
            "priority_class": "be",
        }
        if batch:
            body["best_effort_batch_tokens"] = batch
        chunk = asyncio.create_task(completion(client, url, body))
        await asyncio.sleep(CHUNK_AHEAD_S)
    request = {
        "prompt": f"{live} {uuid.uuid4().hex} {text(21, 10)}",
        "n_predict": 1,
        "id_slot": 0,
        "priority_class": "lc",
    }
    foreground_s = await completion(client, url, request)
    chunk_s = await chunk if chunk is not None else None
    return {
        "arm": arm,
        "foreground_s": round(foreground_s, 4),
        "chunk_s": chunk_s and round(chunk_s, 4),
    }


async def measure(samples: int) -> dict[str, Any]:
    handle = ensure_engine(EngineConfig(port=PORT, slots=4))
    url = f"{handle.base_url}/completion"
    live, branch = f"live {text(300, 1)}", f"branch {text(300, 2)}"
    rows = []
    try:
        async with httpx.AsyncClient(timeout=120) as client:
            await completion(client, url, {"prompt": live, "n_predict": 0, "id_slot": 0})
            await completion(client, url, {"prompt": branch, "n_predict": 0, "id_slot": 1})
            for _ in track(range(samples), description="samples"):
                for arm in ARMS:
                    rows.append(await sample(client, url, live, branch, arm))
                    await asyncio.sleep(0.3)
    finally:
        if not handle.reused:
            handle.stop()
    medians = {
        arm: statistics.median(row["foreground_s"] for row in rows if row["arm"] == arm)
        for arm in ARMS
    }
    return {
        "samples": samples,
        "chunk_ahead_s": CHUNK_AHEAD_S,
        "median_foreground_s": medians,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    document = asyncio.run(measure(args.samples))
    write_json(args.json, document)
    for arm, seconds in document["median_foreground_s"].items():
        print(f"{arm:>15}: {seconds:.3f} s")


if __name__ == "__main__":
    main()

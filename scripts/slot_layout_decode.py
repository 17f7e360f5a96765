#!/usr/bin/env python3
"""Does it matter which llama-server slots the agents' contexts sit in? Four replies decoding
at once, pinned to slots 0-3 (consecutive) or 0, 2, 4, 6 (spread), with and without a
best-effort prefill beside them in the next slot.

Without `--kv-unified` each slot is a KV stream of its own, and llama.cpp splits a batch over
several streams into micro-batches of consecutive stream ids (`llama_batch_allocr::split_equal`
with `sequential`): decodes in slots 0-3 go in one, in 0, 2, 4, 6 in four, each reading every
weight again. Until `f3d10ce` the SDK's slot pairs put four agents' live contexts in slots
0/1, 2/3, 4/5 and 6/7, which of each pair depending on their commits; since then a pair's home
is the lowest free slot, its branch the highest (`client.llamacpp_slots`).

    python scripts/slot_layout_decode.py --json docs/results/diagnostics/slot_layout_decode.json
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

import httpx
from rich.progress import track

from lookahead_sdk.bench.common import write_json
from lookahead_sdk.bench.embedded_batches import random_token_ids
from lookahead_sdk.bench.ttft import erase_llamacpp_slots
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.server import ensure_engine, stop_engine

LAYOUTS: dict[str, tuple[int, ...]] = {"consecutive": (0, 1, 2, 3), "spread": (0, 2, 4, 6)}
SLOTS = 8
BESIDE_TOKENS = (0, 512)  # best-effort prefill tokens beside the decodes: none, then a chunk


async def decode_round(
    client: httpx.AsyncClient, layout: str, *, context: int, new_tokens: int, beside: int
) -> dict[str, Any]:
    """Cache a `context`-token prompt in each of the layout's slots, then decode `new_tokens`
    in all four at once (and prefill `beside` tokens, best-effort, in the slot after the last)."""
    slots = LAYOUTS[layout]
    if not erase_llamacpp_slots(str(client.base_url).rstrip("/")):
        raise RuntimeError(f"could not erase the slots of {client.base_url}")
    prompts = [random_token_ids(random.Random(10 + index), context) for index in range(len(slots))]
    for slot, prompt in zip(slots, prompts, strict=True):
        body = {"prompt": prompt, "n_predict": 0, "id_slot": slot, "cache_prompt": True}
        (await client.post("/completion", json=body)).raise_for_status()
    requests = [
        client.post(
            "/completion",
            json={
                "prompt": prompt,
                "n_predict": new_tokens,
                "id_slot": slot,
                "cache_prompt": True,
                "ignore_eos": True,
                "temperature": 0,
            },
        )
        for slot, prompt in zip(slots, prompts, strict=True)
    ]
    if beside:
        body = {
            "prompt": random_token_ids(random.Random(99), beside),
            "n_predict": 1,
            "id_slot": slots[-1] + 1,
            "cache_prompt": True,
            "priority_class": "be",
        }
        requests.append(client.post("/completion", json=body))
    started = time.perf_counter()
    replies = await asyncio.gather(*requests)
    wall = time.perf_counter() - started
    for reply in replies:
        reply.raise_for_status()
    generated = sum(reply.json()["timings"]["predicted_n"] for reply in replies[: len(slots)])
    return {
        "layout": layout,
        "beside_tokens": beside,
        "wall_s": round(wall, 3),
        "generated_tokens": generated,
        "tokens_per_s": round(generated / wall, 2),
    }


async def measure(port: int, *, context: int, new_tokens: int, repeats: int) -> dict[str, Any]:
    handle = ensure_engine(
        EngineConfig(port=port, slots=SLOTS, ctx_per_slot=4096), show_progress=False
    )
    rounds: list[dict[str, Any]] = []
    plan = [
        (beside, repeat, layout)
        for beside in BESIDE_TOKENS
        for repeat in range(repeats)
        # alternating which layout goes first, so a drift of the machine favours neither
        for layout in (("consecutive", "spread") if repeat % 2 == 0 else ("spread", "consecutive"))
    ]
    try:
        async with httpx.AsyncClient(base_url=handle.base_url, timeout=600) as client:
            for beside, repeat, layout in track(plan, description="decode rounds"):
                result = await decode_round(
                    client, layout, context=context, new_tokens=new_tokens, beside=beside
                )
                rounds.append({"repeat": repeat, **result})
    finally:
        stop_engine(port)
    summary = {}
    for beside in BESIDE_TOKENS:
        rates = {
            layout: [
                r["tokens_per_s"]
                for r in rounds
                if r["layout"] == layout and r["beside_tokens"] == beside
            ]
            for layout in LAYOUTS
        }
        pairs = [
            consecutive / spread
            for consecutive, spread in zip(rates["consecutive"], rates["spread"], strict=True)
        ]
        summary[f"beside_{beside}"] = {
            "consecutive_tokens_per_s": rates["consecutive"],
            "spread_tokens_per_s": rates["spread"],
            "consecutive_over_spread_each_repeat": [round(ratio, 3) for ratio in pairs],
            "consecutive_over_spread_median": round(statistics.median(pairs), 3),
        }
    return {
        "setup": (
            f"embedded engine, {SLOTS} slots of 4096 tokens (no --kv-unified); per round each "
            f"layout's four slots cache a {context}-token prompt, then all four decode "
            f"{new_tokens} tokens at once (beside_512: with a 512-token best-effort prefill in "
            "the slot after the last); layouts alternate which goes first"
        ),
        "context_tokens": context,
        "new_tokens": new_tokens,
        "rounds": rounds,
        "summary": summary,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--port", type=int, default=18123)
    parser.add_argument("--context", type=int, default=1500)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    document = asyncio.run(
        measure(args.port, context=args.context, new_tokens=args.new_tokens, repeats=args.repeats)
    )
    write_json(args.json, document)
    for beside, row in document["summary"].items():
        print(
            f"{beside}: consecutive {row['consecutive_tokens_per_s']} tok/s, spread "
            f"{row['spread_tokens_per_s']} tok/s, ratio per repeat "
            f"{row['consecutive_over_spread_each_repeat']}"
        )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

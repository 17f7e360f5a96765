#!/usr/bin/env python3
"""Is there spare compute beside a decoding reply on the embedded engine? Isolate's question.

Isolate can prefill a sub-agent's context only while the main agent writes the delegation: no
tool wait lies between that reply and the sub-agent's first request. So its lookahead moves the
sub-agent's prefill from after the reply (synchronous: the reply decodes, then the sub-agent's
request prefills its context) to beside it (the warm-up, best-effort, in chunks). That shortens
the sub-agent's first turn; it shortens the run only if the engine computes the prefill beside
the decode for less than apart. Each round, on fresh slots:

- `apart`: a reply decodes `--decode-tokens` tokens over a `--context`-token prompt in slot 0,
  then a `--prefill-tokens` prompt is prefilled in slot 2 in one latency-critical request (the
  synchronous sub-agent's first request);
- `beside-N`: the same reply, and the same prompt prefilled best-effort in requests of N
  tokens (each of `--chunk-tokens`) starting when the reply's first token is out (the warm-up).

The modes' order rotates between repeats, so a drift of the machine favours none.

    python scripts/decode_beside_prefill.py --json docs/results/diagnostics/decode_beside_prefill.json
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

REPLY_SLOT, PREFILL_SLOT = 0, 2  # a program's live slot and its branch (`SlotPairs.enroll`)


async def _post(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/completion", json=body)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


async def _decode(
    base_url: str, prompt: list[int], tokens: int, first_token: asyncio.Event
) -> float:
    """Stream the reply; set `first_token` when its first token is out; seconds to its end.
    On a connection of its own: llama-server closes a streamed response's connection, which a
    shared client would then try to reuse."""
    started = time.perf_counter()
    body = {
        "prompt": prompt,
        "n_predict": tokens,
        "ignore_eos": True,
        "temperature": 0,
        "cache_prompt": True,
        "id_slot": REPLY_SLOT,
        "stream": True,
    }
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=600) as client,
        client.stream("POST", "/completion", json=body) as response,
    ):
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                first_token.set()
    return time.perf_counter() - started


async def _prefill(
    client: httpx.AsyncClient, prompt: list[int], chunk: int, *, best_effort: bool
) -> float:
    started = time.perf_counter()
    end = 0
    while end < len(prompt):
        end = min(len(prompt), end + chunk)
        body: dict[str, Any] = {
            "prompt": prompt[:end],
            "n_predict": 0,
            "cache_prompt": True,
            "id_slot": PREFILL_SLOT,
        }
        if best_effort:
            body["priority_class"] = "be"
        await _post(client, body)
    return time.perf_counter() - started


async def one_round(
    client: httpx.AsyncClient, mode: str, seed: int, args: argparse.Namespace
) -> dict[str, Any]:
    if not erase_llamacpp_slots(str(client.base_url).rstrip("/")):  # nothing cached
        raise RuntimeError(f"could not erase the slots of {client.base_url}")
    context = random_token_ids(random.Random(seed), args.context)
    prompt = random_token_ids(random.Random(seed + 1), args.prefill_tokens)
    # The reply's context is cached, as a live slot's is when its program's turn starts.
    await _post(
        client, {"prompt": context, "n_predict": 0, "cache_prompt": True, "id_slot": REPLY_SLOT}
    )
    first_token = asyncio.Event()
    base_url = str(client.base_url).rstrip("/")
    started = time.perf_counter()
    if mode == "apart":
        decode_s = await _decode(base_url, context, args.decode_tokens, first_token)
        prefill_s = await _prefill(client, prompt, len(prompt), best_effort=False)
    else:
        chunk = int(mode.removeprefix("beside-"))
        reply = asyncio.create_task(_decode(base_url, context, args.decode_tokens, first_token))
        await first_token.wait()
        prefill_s = await _prefill(client, prompt, chunk, best_effort=True)
        decode_s = await reply
    return {
        "mode": mode,
        "seed": seed,
        "wall_s": round(time.perf_counter() - started, 3),
        "decode_s": round(decode_s, 3),
        "prefill_s": round(prefill_s, 3),
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    handle = ensure_engine(
        EngineConfig(port=args.port, slots=3, ctx_per_slot=8192), show_progress=False
    )
    modes = ["apart", *(f"beside-{chunk}" for chunk in args.chunk_tokens)]
    plan = [
        (repeat, modes[(repeat + index) % len(modes)])
        for repeat in range(args.repeats)
        for index in range(len(modes))
    ]
    rounds: list[dict[str, Any]] = []
    try:
        async with httpx.AsyncClient(base_url=handle.base_url, timeout=600) as client:
            for repeat, mode in track(plan, description="rounds"):
                result = await one_round(client, mode, 100 + 10 * repeat, args)
                rounds.append({"repeat": repeat, **result})
    finally:
        stop_engine(args.port)
    walls = {mode: [r["wall_s"] for r in rounds if r["mode"] == mode] for mode in modes}
    ratios = {
        mode: [round(b / a, 3) for a, b in zip(walls["apart"], walls[mode], strict=True)]
        for mode in modes[1:]
    }
    return {
        "setup": (
            f"embedded engine, 3 slots of 8192 tokens; per round on erased slots: a reply of "
            f"{args.decode_tokens} tokens over a cached {args.context}-token prompt (slot "
            f"{REPLY_SLOT}) and a {args.prefill_tokens}-token prompt prefilled (slot "
            f"{PREFILL_SLOT}): apart = the reply, then the prompt in one latency-critical "
            "request; beside-N = the prompt best-effort in N-token requests from the reply's "
            "first token on; the modes' order rotates between repeats"
        ),
        "context_tokens": args.context,
        "decode_tokens": args.decode_tokens,
        "prefill_tokens": args.prefill_tokens,
        "chunk_tokens": args.chunk_tokens,
        "rounds": rounds,
        "summary": {
            "wall_s": walls,
            "over_apart_each_repeat": ratios,
            "over_apart_median": {
                mode: round(statistics.median(each), 3) for mode, each in ratios.items()
            },
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--port", type=int, default=18124)
    parser.add_argument("--context", type=int, default=800, help="the reply's cached prompt")
    parser.add_argument("--decode-tokens", type=int, default=80, help="the delegation's reply")
    parser.add_argument("--prefill-tokens", type=int, default=800, help="the sub-agent's context")
    parser.add_argument(
        "--chunk-tokens",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[128, 800],
        help="comma-separated warm-up chunk sizes to compare (default 128,800)",
    )
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    document = asyncio.run(measure(args))
    write_json(args.json, document)
    summary = document["summary"]
    for mode, each in summary["over_apart_each_repeat"].items():
        print(f"{mode} / apart per repeat {each} (median {summary['over_apart_median'][mode]})")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

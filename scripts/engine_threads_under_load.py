#!/usr/bin/env python3
"""The embedded engine's speed at each thread count, on an idle machine and with busy loops
beside it (what an agent process, a router or a CI job does to a small machine): why the
engine's default is the usable CPUs less one. Writes a JSON that `lookahead-sdk report` turns
into docs/engine.md's "Threads" table.

    python scripts/engine_threads_under_load.py --json docs/results/engine_threads.json
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from rich.progress import track

from lookahead_sdk.bench.common import write_json
from lookahead_sdk.engine.config import EngineConfig, usable_cpus
from lookahead_sdk.engine.server import ensure_engine, stop_engine

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "tool", "data", "read", "file", "line")


@contextmanager
def busy_loops(count: int) -> Iterator[None]:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def measure(
    threads: int, busy: int, *, port: int, prompt_words: int, new_tokens: int, repeats: int
) -> dict[str, Any]:
    handle = ensure_engine(EngineConfig(port=port, slots=1, threads=threads), show_progress=False)
    prompt_ms: list[float] = []
    decode_ms: list[float] = []
    try:
        with busy_loops(busy), httpx.Client(timeout=900) as client:
            for _ in range(repeats):
                prompt = " ".join(random.choice(WORDS) for _ in range(prompt_words))
                reply = client.post(
                    f"{handle.base_url}/completion",
                    json={"prompt": prompt, "n_predict": new_tokens, "cache_prompt": False},
                ).json()
                prompt_ms.append(reply["timings"]["prompt_per_token_ms"])
                decode_ms.append(reply["timings"]["predicted_per_token_ms"])
    finally:
        stop_engine(port)
    return {
        "threads": threads,
        "busy_loops": busy,
        "prompt_tokens": reply["timings"]["prompt_n"],
        "prompt_ms_per_token": sorted(prompt_ms)[len(prompt_ms) // 2],
        "decode_ms_per_token": sorted(decode_ms)[len(decode_ms) // 2],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--port", type=int, default=18461)
    parser.add_argument("--prompt-words", type=int, default=500)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cpus = usable_cpus()
    plan = [(threads, busy) for busy in (0, 1) for threads in sorted({max(1, cpus - 1), cpus})]
    rows = [
        measure(
            threads,
            busy,
            port=args.port,
            prompt_words=args.prompt_words,
            new_tokens=args.new_tokens,
            repeats=args.repeats,
        )
        for threads, busy in track(plan, description="threads x busy loops")
    ]
    write_json(args.json, {"usable_cpus": cpus, "rows": rows})
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()

"""Measure the embedded engine on this machine: prefill and decode speed per quantization, and how
much a second request prefilling in another slot slows the first one's time to first token.

    python -m lookahead_sdk.engine.probe --out out/engine_probe.json

Each quantization gets its own engine (2 slots) on ``--port``, ``--port``+1, ...; the samples of
the quantizations are interleaved. Results are raw samples in JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import Progress

from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.model import QUANTIZATIONS
from lookahead_sdk.engine.server import EngineHandle, start_engine

_WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()


@dataclass(frozen=True)
class PrefillSample:
    quantization: str
    prompt_tokens: int
    prompt_ms: float  # server-side prefill time (timings.prompt_ms)
    wall_s: float  # client-side request time (prefill + 1 generated token)
    concurrent: bool  # another request was prefilling in the other slot at the same time
    load_avg_1m: float  # machine load when the sample was taken (other programs share the CPU)

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.prompt_tokens / self.prompt_ms


@dataclass(frozen=True)
class DecodeSample:
    quantization: str
    predicted_tokens: int
    predicted_per_second: float


def distinct_prompt(client: httpx.Client, n_tokens: int, seed: int) -> list[int]:
    """Token ids of a fresh filler text, exactly ``n_tokens`` long; a new seed never hits a cache."""
    rng = random.Random(seed)
    text = " ".join(f"{rng.choice(_WORDS)}{rng.randint(0, 9999)}" for _ in range(n_tokens))
    tokens = client.post("/tokenize", json={"content": text}).json()["tokens"]
    return tokens[:n_tokens]


def prefill(client: httpx.Client, prompt: list[int]) -> tuple[float, float]:
    """(server prompt_ms, client wall seconds) for one uncached prompt."""
    started = time.perf_counter()
    response = client.post(
        "/completion", json={"prompt": prompt, "n_predict": 0, "cache_prompt": True}
    )
    response.raise_for_status()
    wall_s = time.perf_counter() - started
    return float(response.json()["timings"]["prompt_ms"]), wall_s


def decode(client: httpx.Client, n_predict: int, seed: int) -> float:
    response = client.post(
        "/completion",
        json={
            "prompt": distinct_prompt(client, 32, seed),
            "n_predict": n_predict,
            "ignore_eos": True,
            "temperature": 0,
        },
    )
    response.raise_for_status()
    return float(response.json()["timings"]["predicted_per_second"])


def probe(
    quantizations: list[str], first_port: int, lengths: list[int], repeats: int
) -> tuple[list[PrefillSample], list[DecodeSample]]:
    """Run every quantization's engine side by side and interleave their samples, so that load
    from other programs on the machine affects each quantization alike."""
    engines: dict[str, EngineHandle] = {}
    clients: dict[str, httpx.Client] = {}
    prefills: list[PrefillSample] = []
    decodes: list[DecodeSample] = []
    seeds = iter(range(1, 1 << 30))
    steps = len(quantizations) * repeats * (2 * len(lengths) + 1)
    try:
        # Started inside the `try`: an engine that fails to start (a taken port, Ctrl-C) stops
        # the ones already running instead of leaving them behind.
        for i, quantization in enumerate(quantizations):
            engines[quantization] = start_engine(
                EngineConfig(
                    port=first_port + i, slots=2, ctx_per_slot=4096, quantization=quantization
                ),
                show_progress=False,
            )
        clients = {
            q: httpx.Client(base_url=e.base_url, timeout=600, trust_env=False)
            for q, e in engines.items()
        }
        with Progress(console=Console(stderr=True)) as progress:
            task = progress.add_task("probing the engine", total=steps)
            for n_tokens in lengths:
                for _ in range(repeats):
                    for quantization, client in clients.items():
                        prompt = distinct_prompt(client, n_tokens, next(seeds))
                        prompt_ms, wall_s = prefill(client, prompt)
                        prefills.append(
                            PrefillSample(
                                quantization, len(prompt), prompt_ms, wall_s, False, _load()
                            )
                        )
                        progress.advance(task)
                    for quantization, client in clients.items():
                        # The same length while a second prompt prefills in the other slot.
                        first = distinct_prompt(client, n_tokens, next(seeds))
                        second = distinct_prompt(client, n_tokens, next(seeds))
                        with ThreadPoolExecutor(2) as pool:
                            first_future = pool.submit(prefill, client, first)
                            pool.submit(prefill, client, second).result()
                            prompt_ms, wall_s = first_future.result()
                        prefills.append(
                            PrefillSample(
                                quantization, len(first), prompt_ms, wall_s, True, _load()
                            )
                        )
                        progress.advance(task)
            for _ in range(repeats):
                for quantization, client in clients.items():
                    rate = decode(client, 128, next(seeds))
                    decodes.append(DecodeSample(quantization, 128, rate))
                    progress.advance(task)
    finally:
        for client in clients.values():
            client.close()
        for engine in engines.values():
            engine.stop()
    return prefills, decodes


def summarize(prefills: list[PrefillSample], decodes: list[DecodeSample]) -> list[str]:
    lines = []
    for quantization in sorted({sample.quantization for sample in prefills}):
        for n_tokens in sorted({sample.prompt_tokens for sample in prefills}):
            for concurrent in (False, True):
                group = [
                    sample
                    for sample in prefills
                    if (sample.quantization, sample.prompt_tokens, sample.concurrent)
                    == (quantization, n_tokens, concurrent)
                ]
                if group:
                    lines.append(
                        f"{quantization} {n_tokens:>5} tokens "
                        f"{'2 concurrent' if concurrent else 'alone       '}: "
                        f"prefill median {statistics.median(s.tokens_per_s for s in group):4.0f} "
                        f"best {max(s.tokens_per_s for s in group):4.0f} tok/s, wall median "
                        f"{statistics.median(s.wall_s for s in group):5.2f} best "
                        f"{min(s.wall_s for s in group):5.2f} s"
                    )
        rates = [d.predicted_per_second for d in decodes if d.quantization == quantization]
        if rates:
            lines.append(
                f"{quantization} decode median {statistics.median(rates):.0f} "
                f"best {max(rates):.0f} tok/s"
            )
    return lines


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/engine_probe.json"))
    parser.add_argument("--port", type=int, default=18189, help="first of consecutive ports")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 3584])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quant", nargs="+", choices=QUANTIZATIONS, default=list(QUANTIZATIONS))
    args = parser.parse_args(argv)
    prefills, decodes = probe(args.quant, args.port, args.lengths, args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "prefill": [{**asdict(s), "tokens_per_s": s.tokens_per_s} for s in prefills],
                "decode": [asdict(d) for d in decodes],
            },
            indent=2,
        )
    )
    print("\n".join(summarize(prefills, decodes)))
    print(f"raw samples: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

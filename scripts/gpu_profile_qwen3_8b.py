#!/usr/bin/env python3
"""Profile a Qwen3-8B-shaped transformer (random bf16 weights) on one GPU and write batch
measurements in the calibration input format (`lookahead-sdk calibrate --profile-data FILE`).

Self-contained: needs only PyTorch. Each measured batch is a full forward pass through all
layers of one decoder block's shapes (hidden 4096, 32 query / 8 KV heads of dim 128, MLP 12288,
36 layers; one set of weights reused per layer, which reads the same bytes from memory as 36
distinct sets): RMSNorm, QKV / O / gate-up / down GEMMs over all batch tokens, and attention via
`torch.nn.functional.scaled_dot_product_attention` (decodes: batched GQA over equal contexts;
prefill chunks: causal from the lower right, after a cached prefix).

Batches measured (median of --repeats after --warmup runs, CUDA events):
- GEMM-dominated: M decodes of context 1 for M in 1..8192 (the T_GEMM table);
- decode attention: B decodes x context L;
- prefill chunks: q new tokens after a cached prefix of 0..20K tokens;
- a few mixed batches (decodes + one chunk), to check the fitted model on realistic shapes.
Stops measuring when --budget-s is spent and writes what it has.

    python scripts/gpu_profile_qwen3_8b.py --out $OUT/qwen3_8b_h200.json
    python scripts/gpu_profile_qwen3_8b.py --tiny      # CPU smoke test, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

SCHEMA = "lookahead-sdk/batch-measurements/v1"


@dataclass(frozen=True)
class ModelShape:
    hidden: int = 4096
    q_heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    mlp: int = 12288
    layers: int = 36

    @property
    def qkv_out(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim


TINY = ModelShape(hidden=64, q_heads=4, kv_heads=2, head_dim=16, mlp=128, layers=2)


@dataclass(frozen=True)
class Plan:
    gemm_tokens: tuple[int, ...]
    decode_batches: tuple[tuple[int, int], ...]  # (batch size, context)
    prefill_chunks: tuple[tuple[int, int], ...]  # (new tokens, cached prefix)
    mixed: tuple[tuple[int, int, int, int], ...]  # (decodes, context, chunk tokens, prefix)


FULL_PLAN = Plan(
    gemm_tokens=(
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        256,
        512,
        768,
        1024,
        1536,
        2048,
        3072,
        4096,
        6144,
        8192,
    ),
    decode_batches=tuple(
        (b, ctx)
        for b in (1, 8, 32, 64, 128)
        for ctx in (1024, 4096, 8192, 16384, 20480)
        if b * ctx <= 1_400_000
    ),
    prefill_chunks=tuple(
        (q, p)
        for q in (256, 512, 1024, 2048, 4096, 8192)
        for p in (0, 2048, 4096, 8192, 12288, 16384, 20480)
    ),
    mixed=(
        (16, 4096, 1024, 8192),
        (32, 8192, 2048, 16384),
        (64, 2048, 512, 4096),
        (8, 16384, 4096, 20480),
    ),
)
TINY_PLAN = Plan(
    gemm_tokens=(1, 4, 16, 64),
    decode_batches=((1, 32), (4, 64)),
    prefill_chunks=((16, 0), (16, 64), (32, 128)),
    mixed=((2, 32, 16, 64),),
)


class Block:
    """One decoder layer's weights and forward; `run` applies it `layers` times."""

    def __init__(self, shape: ModelShape, device: torch.device, dtype: torch.dtype) -> None:
        def weight(rows: int, cols: int) -> torch.Tensor:
            return torch.randn(rows, cols, device=device, dtype=dtype) * (rows**-0.5)

        self.shape = shape
        self.qkv = weight(shape.hidden, shape.qkv_out)
        self.o = weight(shape.q_heads * shape.head_dim, shape.hidden)
        self.gate_up = weight(shape.hidden, 2 * shape.mlp)
        self.down = weight(shape.mlp, shape.hidden)
        self.norm = torch.ones(shape.hidden, device=device, dtype=dtype)

    def gemms(self, x: torch.Tensor) -> torch.Tensor:
        """Everything but attention, for the GEMM-only table in the metadata."""
        h = F.rms_norm(x, (self.shape.hidden,), self.norm)
        h = (h @ self.qkv)[:, : self.shape.q_heads * self.shape.head_dim] @ self.o + x
        gate, up = (F.rms_norm(h, (self.shape.hidden,), self.norm) @ self.gate_up).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ self.down + h

    def layer(
        self, x: torch.Tensor, attend: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        s = self.shape
        qkv = F.rms_norm(x, (s.hidden,), self.norm) @ self.qkv
        q = qkv[:, : s.q_heads * s.head_dim].view(-1, s.q_heads, s.head_dim)
        h = attend(q).reshape(-1, s.q_heads * s.head_dim) @ self.o + x
        gate, up = (F.rms_norm(h, (s.hidden,), self.norm) @ self.gate_up).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ self.down + h


class Profiler:
    def __init__(
        self, shape: ModelShape, device: torch.device, dtype: torch.dtype, args: argparse.Namespace
    ) -> None:
        self.shape, self.device, self.dtype, self.args = shape, device, dtype, args
        self.block = Block(shape, device, dtype)
        self.kv_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _kv(self, sequences: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Random K/V of `sequences` x `length` tokens (shared by all layers: same bytes read)."""
        size = sequences * length
        if size not in self.kv_cache:
            self.kv_cache.clear()
            shape = (sequences, self.shape.kv_heads, length, self.shape.head_dim)
            self.kv_cache[size] = (
                torch.randn(shape, device=self.device, dtype=self.dtype),
                torch.randn(shape, device=self.device, dtype=self.dtype),
            )
        k, v = self.kv_cache[size]
        return k.view(sequences, self.shape.kv_heads, length, -1), v.view(
            sequences, self.shape.kv_heads, length, -1
        )

    def forward(self, decodes: int, context: int, chunk: int, prefix: int) -> Callable[[], None]:
        """A closure running one full forward over `decodes` x `context` plus one prefill chunk."""
        s = self.shape
        tokens = decodes + chunk
        x = torch.randn(tokens, s.hidden, device=self.device, dtype=self.dtype)
        dec_kv = self._kv(decodes, context) if decodes else None
        chunk_k = chunk_v = None
        if chunk:
            # GQA expanded once, outside the timed layers (an engine's kernel reads the 8 KV heads
            # directly; expanding per layer would time a copy no engine makes).
            group = s.q_heads // s.kv_heads
            kv_shape = (1, s.kv_heads, prefix + chunk, s.head_dim)
            chunk_k, chunk_v = (
                torch.randn(kv_shape, device=self.device, dtype=self.dtype).repeat_interleave(
                    group, dim=1
                )
                for _ in range(2)
            )
            mask = causal_lower_right(chunk, prefix + chunk)

        def attend(q: torch.Tensor) -> torch.Tensor:
            parts = []
            if decodes:
                k, v = dec_kv
                qd = q[:decodes].view(decodes, s.q_heads, 1, s.head_dim)
                parts.append(
                    F.scaled_dot_product_attention(qd, k, v, enable_gqa=True).view(
                        decodes, s.q_heads, s.head_dim
                    )
                )
            if chunk:
                qc = q[decodes:].transpose(0, 1).unsqueeze(0)  # [1, heads, chunk, dim]
                out = F.scaled_dot_product_attention(qc, chunk_k, chunk_v, attn_mask=mask)
                parts.append(out.squeeze(0).transpose(0, 1))
            return torch.cat(parts) if len(parts) > 1 else parts[0]

        def run() -> None:
            h = x
            for _ in range(s.layers):
                h = self.block.layer(h, attend)

        return run

    def time_ms(self, run: Callable[[], None]) -> float:
        for _ in range(self.args.warmup):
            run()
        samples = []
        for _ in range(self.args.repeats):
            if self.device.type == "cuda":
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                torch.cuda.synchronize()
                start.record()
                run()
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end))
            else:
                began = time.perf_counter()
                run()
                samples.append((time.perf_counter() - began) * 1000.0)
        return statistics.median(samples)


def planned_batches(plan: Plan) -> Iterator[tuple[str, int, int, int, int]]:
    for m in plan.gemm_tokens:
        yield "gemm", m, 1, 0, 0
    for b, ctx in plan.decode_batches:
        yield "decode", b, ctx, 0, 0
    for q, p in plan.prefill_chunks:
        yield "prefill", 0, 0, q, p
    for b, ctx, q, p in plan.mixed:
        yield "mixed", b, ctx, q, p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, help="output JSON (default: $OUT or . / qwen3_8b_profile.json)"
    )
    parser.add_argument("--tiny", action="store_true", help="tiny shapes and plan (CPU smoke test)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=300.0, help="stop measuring after this")
    args = parser.parse_args(argv)
    shape, plan = (TINY, TINY_PLAN) if args.tiny else (ModelShape(), FULL_PLAN)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out = args.out or Path(os.environ.get("OUT", ".")) / "qwen3_8b_profile.json"
    torch.manual_seed(0)
    profiler = Profiler(shape, device, dtype, args)
    began = time.perf_counter()
    batches, gemm_only, skipped = [], {}, []
    with torch.inference_mode():
        for kind, decodes, context, chunk, prefix in planned_batches(plan):
            if time.perf_counter() - began > args.budget_s:
                skipped.append([kind, decodes, context, chunk, prefix])
                continue
            try:
                latency = profiler.time_ms(profiler.forward(decodes, context, chunk, prefix))
                if kind == "gemm":
                    x = torch.randn(decodes, shape.hidden, device=device, dtype=dtype)
                    gemm_only[decodes] = profiler.time_ms(
                        lambda x=x: [profiler.block.gemms(x) for _ in range(shape.layers)]
                    )
            except torch.OutOfMemoryError:
                skipped.append([kind, decodes, context, chunk, prefix])
                torch.cuda.empty_cache()
                continue
            batches.append(
                {
                    "decode_contexts": [context] * decodes,
                    "prefill_chunks": [[chunk, prefix]] if chunk else [],
                    "latency_ms": latency,
                }
            )
            print(
                f"{kind:8s} decodes={decodes:5d}x{context:<6d} chunk={chunk:5d}+{prefix:<6d} {latency:9.3f} ms",
                flush=True,
            )
    metadata = {
        "model": "Qwen3-8B-shaped, random weights" + (" (tiny shapes)" if args.tiny else ""),
        "shape": asdict(shape),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(dtype),
        "torch": torch.__version__,
        "repeats": args.repeats,
        "gemm_only_ms": {str(m): ms for m, ms in sorted(gemm_only.items())},
        "skipped": skipped,
        "seconds": round(time.perf_counter() - began, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"schema": SCHEMA, "metadata": metadata, "batches": batches}, indent=1) + "\n"
    )
    print(
        f"wrote {len(batches)} batches to {out} ({metadata['seconds']} s, {len(skipped)} skipped)"
    )
    return 0 if batches else 1


if __name__ == "__main__":
    sys.exit(main())

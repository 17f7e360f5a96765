#!/usr/bin/env python3
"""Profile a Qwen3-8B-shaped transformer (random bf16 weights) on one GPU and write batch
measurements in the calibration input format (`lookahead-sdk calibrate --profile-data FILE`).

Self-contained: needs only PyTorch. Each measured batch is a full forward pass through all
layers of one decoder block's shapes (hidden 4096, 32 query / 8 KV heads of dim 128, MLP 12288,
36 layers; one set of weights reused per layer, which reads the same bytes from memory as 36
distinct sets): RMSNorm, QKV / O / gate-up / down GEMMs over all batch tokens, attention, and
the logits of each request's last token. Attention on a GPU is one FlashAttention-2 varlen call
per layer over every request of the batch (the packed layout of FlashInfer / FA3 engines: GQA
read directly, causal from the lower right), after a check against SDPA; elsewhere (or with
`--attention sdpa`) `scaled_dot_product_attention` per group of equal decodes and per chunk.

Batches measured (median of --repeats after --warmup runs, CUDA events). On a GPU each batch is
captured once as a CUDA graph and replayed, so its figure is GPU time, not Python's kernel-launch
time (with SDPA, batches with a chunk run eagerly: its lower-right mask is not captured):
- GEMM-dominated: M decodes of context 1 for M up to 256, one M-token chunk at prefix 0 above
  (the T_GEMM table);
- decode attention: B decodes x context L;
- prefill chunks: q new tokens after a cached prefix of 0..20K tokens;
- mixed batches drawn at random (seeded): decodes at one to three context lengths plus up to
  three prefill chunks, the shapes a serving engine actually builds; they test the fitted model.
Stops measuring when --budget-s is spent and writes what it has.

    python scripts/gpu_profile_qwen3_8b.py --out $OUT/qwen3_8b_h200.json
    python scripts/gpu_profile_qwen3_8b.py --tiny      # CPU smoke test, seconds
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
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
MAX_DECODE_BATCH = 256


@dataclass(frozen=True)
class ModelShape:
    hidden: int = 4096
    q_heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    mlp: int = 12288
    layers: int = 36
    vocab: int = 151936

    @property
    def qkv_out(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim


TINY = ModelShape(hidden=64, q_heads=4, kv_heads=2, head_dim=16, mlp=128, layers=2, vocab=256)


@dataclass(frozen=True)
class BatchSpec:
    """One forward pass: decodes grouped by context length, plus prefill chunks."""

    kind: str
    decode_groups: tuple[tuple[int, int], ...] = ()  # (decodes, context)
    chunks: tuple[tuple[int, int], ...] = ()  # (new tokens, cached prefix)

    @property
    def decodes(self) -> int:
        return sum(n for n, _ in self.decode_groups)

    @property
    def forward_tokens(self) -> int:
        return self.decodes + sum(q for q, _ in self.chunks)

    @property
    def kv_tokens(self) -> int:
        """Keys attended: each decode's context, each chunk's prefix and its own tokens."""
        return sum(n * ctx for n, ctx in self.decode_groups) + sum(q + p for q, p in self.chunks)

    def to_record(self, latency_ms: float) -> dict[str, object]:
        return {
            "decode_contexts": [ctx for n, ctx in self.decode_groups for _ in range(n)],
            "prefill_chunks": [[q, p] for q, p in self.chunks],
            "latency_ms": latency_ms,
        }


@dataclass(frozen=True)
class Plan:
    gemm_tokens: tuple[int, ...]
    decode_batches: tuple[tuple[int, int], ...]  # (batch size, context)
    prefill_chunks: tuple[tuple[int, int], ...]  # (new tokens, cached prefix)
    mixed_batches: int
    max_forward_tokens: int
    max_kv_tokens: int
    contexts: tuple[int, ...]
    chunk_tokens: tuple[int, ...]

    def batches(self, seed: int) -> Iterator[BatchSpec]:
        for m in self.gemm_tokens:
            # Up to a decode batch's size: decodes of context 1. Above, one chunk at prefix 0
            # (thousands of decodes would add a logits row each, which no engine batches).
            if m <= MAX_DECODE_BATCH:
                yield BatchSpec("gemm", decode_groups=((m, 1),))
            else:
                yield BatchSpec("gemm", chunks=((m, 0),))
        for b, ctx in self.decode_batches:
            yield BatchSpec("decode", decode_groups=((b, ctx),))
        for q, p in self.prefill_chunks:
            yield BatchSpec("prefill", chunks=((q, p),))
        rng = random.Random(seed)
        made = 0
        while made < self.mixed_batches:
            groups = tuple(
                (rng.choice((1, 2, 4, 8, 16, 32, 64)), rng.choice(self.contexts))
                for _ in range(rng.randint(1, 3))
            )
            chunks = tuple(
                (rng.choice(self.chunk_tokens), rng.choice((0, *self.contexts)))
                for _ in range(rng.randint(1, 3))
            )
            spec = BatchSpec("mixed", groups, chunks)
            if (
                spec.forward_tokens <= self.max_forward_tokens
                and spec.kv_tokens <= self.max_kv_tokens
            ):
                made += 1
                yield spec


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
    mixed_batches=60,
    max_forward_tokens=8192,
    max_kv_tokens=1_400_000,
    contexts=(512, 1024, 2048, 4096, 8192, 16384),
    chunk_tokens=(32, 128, 512, 1024, 2048, 4096),
)
TINY_PLAN = Plan(
    gemm_tokens=(1, 4, 16, 64),
    decode_batches=((1, 32), (4, 64)),
    prefill_chunks=((16, 0), (16, 64), (32, 128)),
    mixed_batches=3,
    max_forward_tokens=256,
    max_kv_tokens=4096,
    contexts=(32, 64, 128),
    chunk_tokens=(8, 16, 32),
)


def flash_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    max_q: int,
    max_k: int,
) -> torch.Tensor:
    """FlashAttention-2 over packed variable-length sequences: q [tokens, q_heads, dim], k / v
    [keys, kv_heads, dim]; sequence i's queries are its last tokens (causal from the lower right)."""
    return torch.ops.aten._flash_attention_forward(
        q, k, v, cu_q, cu_k, max_q, max_k, 0.0, True, False
    )[0]


def varlen_matches_sdpa(device: torch.device, dtype: torch.dtype) -> str:
    """'' when `flash_varlen` agrees with a per-sequence SDPA reference on a small batch of two
    decodes and a chunk after a prefix (GQA, lower-right causal), else why not."""
    heads, kv_heads, dim = 4, 2, 64
    q_lens, k_lens = [1, 1, 5], [9, 3, 12]  # the chunk: 5 new tokens after 7 cached
    torch.manual_seed(1)
    q = torch.randn(sum(q_lens), heads, dim, device=device, dtype=dtype)
    k = torch.randn(sum(k_lens), kv_heads, dim, device=device, dtype=dtype)
    v = torch.randn_like(k)
    cu_q, cu_k = (
        torch.tensor([0, *itertools.accumulate(lens)], device=device, dtype=torch.int32)
        for lens in (q_lens, k_lens)
    )
    try:
        got = flash_varlen(q, k, v, cu_q, cu_k, max(q_lens), max(k_lens))
    except Exception as error:  # no flash kernel for this GPU / build
        return f"flash varlen unavailable: {str(error).splitlines()[0]}"
    for i, (nq, nk) in enumerate(zip(q_lens, k_lens, strict=True)):
        qi = q[cu_q[i] : cu_q[i + 1]].transpose(0, 1).unsqueeze(0)
        ki, vi = (
            t[cu_k[i] : cu_k[i + 1]].transpose(0, 1).unsqueeze(0).repeat_interleave(2, dim=1)
            for t in (k, v)
        )
        want = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=causal_lower_right(nq, nk))
        diff = (got[cu_q[i] : cu_q[i + 1]] - want.squeeze(0).transpose(0, 1)).abs().max().item()
        if diff > 3e-2:
            return f"flash varlen differs from SDPA on sequence {i} by {diff:.3g}"
    return ""


class Block:
    """One decoder layer's weights and forward (a forward pass applies it `layers` times)."""

    def __init__(self, shape: ModelShape, device: torch.device, dtype: torch.dtype) -> None:
        def weight(rows: int, cols: int) -> torch.Tensor:
            return torch.randn(rows, cols, device=device, dtype=dtype) * (rows**-0.5)

        self.shape = shape
        self.qkv = weight(shape.hidden, shape.qkv_out)
        self.o = weight(shape.q_heads * shape.head_dim, shape.hidden)
        self.gate_up = weight(shape.hidden, 2 * shape.mlp)
        self.down = weight(shape.mlp, shape.hidden)
        self.norm = torch.ones(shape.hidden, device=device, dtype=dtype)
        self.lm_head = weight(shape.hidden, shape.vocab)

    def gemms(self, x: torch.Tensor) -> torch.Tensor:
        """Everything but attention (queries pass straight to the output projection), for the
        GEMM-only table in the metadata."""
        return self.layer(x, lambda q: q)

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
    """Times forward passes. Attention is one FlashAttention-2 varlen call per layer over all the
    batch's requests (the packed layout FlashInfer / FA3 engines use; GQA read directly, causal
    from the lower right) where the GPU has it and it passes `varlen_matches_sdpa`; otherwise
    per-group `scaled_dot_product_attention`."""

    def __init__(
        self, shape: ModelShape, device: torch.device, dtype: torch.dtype, args: argparse.Namespace
    ) -> None:
        self.shape, self.device, self.dtype, self.args = shape, device, dtype, args
        self.block = Block(shape, device, dtype)
        self.graphs_used = 0
        self.eager_used = 0
        self.attention = "sdpa"
        self.kv_pool: tuple[torch.Tensor, torch.Tensor] | None = None

    def _random(self, *shape: int) -> torch.Tensor:
        return torch.randn(shape, device=self.device, dtype=self.dtype)

    def use_varlen(self, max_kv_tokens: int) -> None:
        """One random K/V pool read by every batch (and every layer: the same bytes per layer)."""
        s = self.shape
        self.attention = "flash-varlen"
        self.kv_pool = (
            self._random(max_kv_tokens, s.kv_heads, s.head_dim),
            self._random(max_kv_tokens, s.kv_heads, s.head_dim),
        )

    def forward(self, spec: BatchSpec) -> Callable[[], None]:
        """A closure running one full forward pass of `spec`: all layers, then the logits of each
        request's last token (what a serving engine samples from)."""
        s = self.shape
        x = self._random(spec.forward_tokens, s.hidden)
        decodes = spec.decodes
        chunk_ends = list(itertools.accumulate(q for q, _ in spec.chunks))
        last_tokens = torch.tensor(
            [*range(decodes), *(decodes + end - 1 for end in chunk_ends)], device=self.device
        )
        attend = (
            self._varlen_attend(spec)
            if self.attention == "flash-varlen"
            else self._sdpa_attend(spec)
        )

        def run() -> None:
            h = x
            for _ in range(s.layers):
                h = self.block.layer(h, attend)
            F.rms_norm(h[last_tokens], (s.hidden,), self.block.norm) @ self.block.lm_head

        return run

    def _varlen_attend(self, spec: BatchSpec) -> Callable[[torch.Tensor], torch.Tensor]:
        assert self.kv_pool is not None
        q_lens = [1] * spec.decodes + [q for q, _ in spec.chunks]
        k_lens = [ctx for n, ctx in spec.decode_groups for _ in range(n)]
        k_lens += [p + q for q, p in spec.chunks]
        cu_q, cu_k = (
            torch.tensor([0, *itertools.accumulate(lens)], device=self.device, dtype=torch.int32)
            for lens in (q_lens, k_lens)
        )
        k, v = (pool[: spec.kv_tokens] for pool in self.kv_pool)
        max_q, max_k = max(q_lens), max(k_lens)
        return lambda q: flash_varlen(q, k, v, cu_q, cu_k, max_q, max_k)

    def _sdpa_attend(self, spec: BatchSpec) -> Callable[[torch.Tensor], torch.Tensor]:
        s = self.shape
        # K/V are random and shared by all layers (the same bytes read per layer).
        decode_kv = [
            (
                n,
                self._random(n, s.kv_heads, ctx, s.head_dim),
                self._random(n, s.kv_heads, ctx, s.head_dim),
            )
            for n, ctx in spec.decode_groups
        ]
        group = s.q_heads // s.kv_heads
        # A chunk's GQA K/V are expanded once, outside the timed layers (an engine's kernel reads
        # the KV heads directly; expanding per layer would time a copy no engine makes).
        chunk_kv = [
            (
                q,
                self._random(1, s.kv_heads, p + q, s.head_dim).repeat_interleave(group, dim=1),
                self._random(1, s.kv_heads, p + q, s.head_dim).repeat_interleave(group, dim=1),
                causal_lower_right(q, p + q),
            )
            for q, p in spec.chunks
        ]

        def attend(q: torch.Tensor) -> torch.Tensor:
            parts, at = [], 0
            for n, k, v in decode_kv:
                qd = q[at : at + n].reshape(n, s.q_heads, 1, s.head_dim)
                out = F.scaled_dot_product_attention(qd, k, v, enable_gqa=True)
                parts.append(out.view(n, s.q_heads, s.head_dim))
                at += n
            for n, k, v, mask in chunk_kv:
                qc = q[at : at + n].transpose(0, 1).unsqueeze(0)  # [1, heads, chunk, dim]
                out = F.scaled_dot_product_attention(qc, k, v, attn_mask=mask)
                parts.append(out.squeeze(0).transpose(0, 1))
                at += n
            return torch.cat(parts) if len(parts) > 1 else parts[0]

        return attend

    def time_ms(self, run: Callable[[], None], *, graph: bool) -> float:
        for _ in range(self.args.warmup):
            run()
        if self.device.type != "cuda":
            samples = []
            for _ in range(self.args.repeats):
                began = time.perf_counter()
                run()
                samples.append((time.perf_counter() - began) * 1000.0)
            return statistics.median(samples)
        replay = run
        if graph and self.args.graphs:
            try:
                cuda_graph = torch.cuda.CUDAGraph()
                torch.cuda.synchronize()
                with torch.cuda.graph(cuda_graph):
                    run()
                replay = cuda_graph.replay
                self.graphs_used += 1
            except Exception as error:  # a kernel that cannot be captured: time it eagerly
                print(f"  (CUDA graph capture failed, timing eagerly: {error})", flush=True)
                torch.cuda.synchronize()
                self.eager_used += 1
        else:
            self.eager_used += 1
        replay()
        samples = []
        for _ in range(self.args.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            replay()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        return statistics.median(samples)


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
    parser.add_argument("--seed", type=int, default=0, help="seed of the random mixed batches")
    parser.add_argument(
        "--attention",
        choices=("auto", "sdpa"),
        default="auto",
        help="auto: FlashAttention varlen on a GPU that passes the check, else SDPA per group",
    )
    parser.add_argument(
        "--no-graphs", dest="graphs", action="store_false", help="time eagerly, without CUDA graphs"
    )
    args = parser.parse_args(argv)
    shape, plan = (TINY, TINY_PLAN) if args.tiny else (ModelShape(), FULL_PLAN)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out = args.out or Path(os.environ.get("OUT", ".")) / "qwen3_8b_profile.json"
    torch.manual_seed(args.seed)
    profiler = Profiler(shape, device, dtype, args)
    why_not_varlen = "not a CUDA device" if device.type != "cuda" else "--attention sdpa"
    if device.type == "cuda" and args.attention == "auto":
        why_not_varlen = varlen_matches_sdpa(device, dtype)
        if not why_not_varlen:
            profiler.use_varlen(plan.max_kv_tokens + max(q + p for q, p in plan.prefill_chunks))
    print(f"attention: {profiler.attention} {why_not_varlen}", flush=True)
    began = time.perf_counter()
    batches: list[dict[str, object]] = []
    gemm_only: dict[int, float] = {}
    skipped: list[dict[str, object]] = []

    def write() -> None:
        metadata = {
            "model": "Qwen3-8B-shaped, random weights" + (" (tiny shapes)" if args.tiny else ""),
            "shape": asdict(shape),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dtype": str(dtype),
            "torch": torch.__version__,
            "repeats": args.repeats,
            "attention": profiler.attention,
            "why_not_flash_varlen": why_not_varlen,
            "cuda_graphs": profiler.graphs_used,
            "eager": profiler.eager_used,
            "gemm_only_ms": {str(m): ms for m, ms in sorted(gemm_only.items())},
            "skipped": skipped,
            "seconds": round(time.perf_counter() - began, 1),
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        document = {"schema": SCHEMA, "metadata": metadata, "batches": batches}
        out.write_text(json.dumps(document, indent=1) + "\n")

    with torch.inference_mode():
        for spec in plan.batches(args.seed):
            if time.perf_counter() - began > args.budget_s:
                skipped.append(asdict(spec))
                continue
            try:
                latency = profiler.time_ms(
                    profiler.forward(spec),
                    graph=profiler.attention == "flash-varlen" or not spec.chunks,
                )
                if spec.kind == "gemm":
                    x = profiler._random(spec.forward_tokens, shape.hidden)
                    gemm_only[spec.forward_tokens] = profiler.time_ms(
                        lambda x=x: [profiler.block.gemms(x) for _ in range(shape.layers)],
                        graph=True,
                    )
            except torch.OutOfMemoryError:
                skipped.append(asdict(spec))
                torch.cuda.empty_cache()
                continue
            batches.append(spec.to_record(latency))
            decodes = " ".join(f"{n}x{ctx}" for n, ctx in spec.decode_groups) or "-"
            chunks = " ".join(f"{q}+{p}" for q, p in spec.chunks) or "-"
            print(
                f"{len(batches):4d} {spec.kind:8s} decodes {decodes:24s} chunks {chunks:28s} "
                f"{latency:9.3f} ms",
                flush=True,
            )
            if len(batches) % 10 == 0:
                write()  # a run stopped from outside still leaves what it measured
    write()
    print(
        f"wrote {len(batches)} batches to {out} ({time.perf_counter() - began:.1f} s, {len(skipped)} skipped)"
    )
    return 0 if batches else 1


if __name__ == "__main__":
    sys.exit(main())

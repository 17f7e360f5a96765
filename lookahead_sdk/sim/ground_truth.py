"""How long a simulated forward pass really takes (the simulator's ground truth).

The scheduler only ever sees its latency *model*; the simulated engine advances time with a
ground truth. `ModelTruth` is the model itself (exact). `GpuLikeTruth` adds effects that Eq. 1
does not capture, so that a fit of Eq. 1 to simulated batches is a real test:

- GEMM wave quantization: the token count is rounded up to a multiple of 64 before the table
  lookup (kernels run whole tiles);
- a fixed per-iteration launch/scheduling overhead and a per-request metadata cost;
- attention kernels are less efficient on short chunks: efficiency q / (q + 8) (Qwen3-8B packs
  4 query heads per KV head, so a 128-row tile fills at 32 tokens; the residual penalty is
  small). The estimator bench's max error is sensitive to this constant: with q / (q + 16) it
  rises from about 9% to about 14% (docs/scheduling.md);
- decode attention has a per-request floor of 128 context tokens (a KV page is read whole);
- multiplicative log-normal noise (run-to-run jitter), seeded.
"""

from __future__ import annotations

import math
import random
from typing import Protocol

from lookahead_sdk.scheduling.latency_model import BatchShape, LatencyEstimator, LatencyProfile


class GroundTruth(Protocol):
    def duration_ms(self, batch: BatchShape) -> float: ...


class ModelTruth:
    def __init__(self, estimator: LatencyEstimator) -> None:
        self._estimator = estimator

    def duration_ms(self, batch: BatchShape) -> float:
        return self._estimator.est_ms(batch)


class GpuLikeTruth:
    TILE_TOKENS = 64
    ITERATION_OVERHEAD_MS = 0.25
    PER_REQUEST_MS = 0.01
    SHORT_CHUNK_TOKENS = 8
    MIN_DECODE_CONTEXT = 128

    def __init__(self, profile: LatencyProfile, *, noise: float = 0.02, seed: int = 0) -> None:
        if not 0 <= noise < 1:
            raise ValueError(f"noise must be in [0, 1), got {noise!r}")
        self.profile = profile
        self.noise = noise
        self._rng = random.Random(seed)

    def duration_ms(self, batch: BatchShape) -> float:
        forward = batch.forward_tokens
        if forward == 0:
            return 0.0
        tiles = math.ceil(forward / self.TILE_TOKENS) * self.TILE_TOKENS
        gemm = self.profile.gemm_table(tiles if forward > self.TILE_TOKENS else forward)
        decode = self.profile.alpha_decode_ms * sum(
            max(context, self.MIN_DECODE_CONTEXT) for context in batch.decode_contexts
        )
        prefill = self.profile.alpha_prefill_ms * sum(
            chunk.attention_units * (chunk.new_tokens + self.SHORT_CHUNK_TOKENS) / chunk.new_tokens
            for chunk in batch.prefill_chunks
            if chunk.new_tokens > 0
        )
        requests = len(batch.decode_contexts) + len(batch.prefill_chunks)
        exact = (
            self.ITERATION_OVERHEAD_MS + self.PER_REQUEST_MS * requests + gemm + decode + prefill
        )
        return exact * (self._rng.lognormvariate(0.0, self.noise) if self.noise else 1.0)

"""Built-in latency profiles (usable by name wherever a profile path is accepted)."""

from __future__ import annotations

from pathlib import Path

from lookahead_sdk.base.args import name_or_file
from lookahead_sdk.scheduling.latency_model import (
    LatencyProfile,
    PiecewiseLinearTable,
    read_profile_file,
)

# The SmoothAgent artifact's hard-coded H100 / Qwen3-8B numbers (REFERENCE.md section 1). The
# artifact ships no calibration data, so this profile has no fitted token-only table.
H100_QWEN3_8B = LatencyProfile(
    name="h100-qwen3-8b",
    gemm_table=PiecewiseLinearTable(
        tokens=(1, 8, 32, 128, 512, 1024, 2048, 4096, 8192),
        ms=(0.05, 0.20, 0.35, 0.55, 0.85, 1.12, 3.08, 7.23, 13.30),
    ),
    alpha_decode_ms=6.5e-4,
    alpha_prefill_ms=5.0e-6,
    metadata={
        "hardware": "NVIDIA H100 80GB",
        "model": "Qwen3-8B",
        "source": "SmoothAgent artifact (arXiv 2607.00151), hard-coded scheduler constants",
    },
)


def _roofline_gemm_ms(tokens: int) -> float:
    """max(read all weights once, dense FLOPs at 60% of peak)."""
    weight_read_ms = _WEIGHT_BYTES / (_HBM_BYTES_PER_S * _HBM_EFFICIENCY) * 1e3
    compute_ms = tokens * 2 * _NON_EMBEDDING_PARAMS / (_PEAK_FLOPS * 0.6) * 1e3
    return max(weight_read_ms, compute_ms)


# First-principles H100 SXM numbers for Qwen3-8B (36 layers, 32 query / 8 KV heads of dim 128):
# weights 16.4 GB in bf16, 6.95e9 non-embedding parameters; HBM3 3.35 TB/s (80% achievable);
# 989 TFLOPS dense bf16. KV per token = 36 x 8 x 128 x 2 (K, V) x 2 bytes = 147,456 bytes; a
# causal attention pair costs 4 x 128 x 32 x 36 = 589,824 FLOPs (QK^T and PV), at 50% of peak.
_WEIGHT_BYTES = 16.4e9
_NON_EMBEDDING_PARAMS = 6.95e9
_HBM_BYTES_PER_S = 3.35e12
_HBM_EFFICIENCY = 0.8
_PEAK_FLOPS = 989e12
_KV_BYTES_PER_TOKEN = 36 * 8 * 128 * 2 * 2
_ATTENTION_FLOPS_PER_PAIR = 4 * 128 * 32 * 36
_ROOFLINE_POINTS = (1, 64, 256, 512, 1024, 2048, 4096, 8192)

H100_QWEN3_8B_ROOFLINE = LatencyProfile(
    name="h100-qwen3-8b-roofline",
    gemm_table=PiecewiseLinearTable(
        tokens=_ROOFLINE_POINTS,
        ms=tuple(round(_roofline_gemm_ms(m), 4) for m in _ROOFLINE_POINTS),
    ),
    alpha_decode_ms=_KV_BYTES_PER_TOKEN / (_HBM_BYTES_PER_S * _HBM_EFFICIENCY) * 1e3,
    alpha_prefill_ms=_ATTENTION_FLOPS_PER_PAIR / (_PEAK_FLOPS * 0.5) * 1e3,
    metadata={
        "hardware": "NVIDIA H100 SXM 80GB",
        "model": "Qwen3-8B",
        "source": (
            "roofline estimate from model shape and datasheet bandwidth/FLOPS (not measured); "
            "see lookahead_sdk/scheduling/profiles.py"
        ),
    },
)

# Measured: `lookahead-sdk calibrate` (70% of the batches, seed 0) on 132 batches that
# scripts/gpu_profile_qwen3_8b.py --attention sdpa timed on an H200 (a Qwen3-8B-shaped stack with
# random bf16 weights; docs/results/scheduling/gpu/). Rounded to 4 significant digits.
_H200_KNOTS = (1, 2, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
H200_QWEN3_8B = LatencyProfile(
    name="h200-qwen3-8b",
    gemm_table=PiecewiseLinearTable(
        tokens=_H200_KNOTS,
        ms=(4.904, 4.945, 5.131, 5.131, 5.47, 6.268, 10.82, 14.9, 26.32, 50.26, 100.2, 195.0),
    ),
    alpha_decode_ms=3.239e-05,
    alpha_prefill_ms=1.802e-06,
    token_only_table=PiecewiseLinearTable(
        tokens=_H200_KNOTS,
        ms=(5.08, 5.8, 7.186, 7.186, 8.558, 9.694, 11.63, 18.45, 34.79, 67.69, 147.4, 294.9),
    ),
    metadata={
        "hardware": "NVIDIA H200 141GB (PyTorch 2.11, CUDA 13.0)",
        "model": "Qwen3-8B-shaped, random bf16 weights",
        "source": (
            "measured with scripts/gpu_profile_qwen3_8b.py --attention sdpa and fitted by "
            "lookahead-sdk calibrate; docs/results/scheduling/gpu/"
        ),
    },
)

BUILTIN_PROFILES: dict[str, LatencyProfile] = {
    profile.name: profile for profile in (H100_QWEN3_8B, H100_QWEN3_8B_ROOFLINE, H200_QWEN3_8B)
}

# The type of a `--profile` flag: a built-in name or a profile file, checked when parsed.
latency_profile = name_or_file(BUILTIN_PROFILES, "latency profile")


def load_profile(name_or_path: str | Path) -> LatencyProfile:
    """A built-in profile by name (e.g. "h100-qwen3-8b") or a profile JSON file."""
    if isinstance(name_or_path, str) and name_or_path in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[name_or_path]
    if not Path(name_or_path).is_file():
        raise FileNotFoundError(
            f"no latency profile at {str(name_or_path)!r}; pass a profile JSON file or one of the "
            f"built-in names {sorted(BUILTIN_PROFILES)}"
        )
    return read_profile_file(name_or_path)

"""Context-aware batch latency model (SmoothAgent paper, Eq. 1) and its token-only baseline.

    M   = |B_decode| + sum_j q_j                       forward tokens in the batch
    A_j = q_j * prefix_j + q_j * (q_j + 1) / 2         causal attention work of prefill chunk j
    Est = T_GEMM(M) + alpha_d * sum_decode L_j + alpha_p * sum_prefill A_j      (milliseconds)

T_GEMM is a profiled table, interpolated piecewise-linearly. The token-only baseline predicts a
batch's latency from M alone (one table), which is what a scheduler without context awareness uses.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

PROFILE_SCHEMA = "lookahead-sdk/latency-profile/v1"


def attention_units(new_tokens: int, prefix_tokens: int) -> int:
    """Causal attention work of a prefill chunk of `new_tokens` after `prefix_tokens` in KV."""
    return new_tokens * prefix_tokens + new_tokens * (new_tokens + 1) // 2


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """`new_tokens` prompt tokens computed in this batch, after `prefix_tokens` already in KV."""

    new_tokens: int
    prefix_tokens: int

    def __post_init__(self) -> None:
        _require_non_negative_int("PrefillChunk.new_tokens", self.new_tokens)
        _require_non_negative_int("PrefillChunk.prefix_tokens", self.prefix_tokens)

    @property
    def attention_units(self) -> int:
        return attention_units(self.new_tokens, self.prefix_tokens)


@dataclass(frozen=True, slots=True)
class BatchFeatures:
    """The three sufficient statistics of a batch for Eq. 1; additive, so a scheduler can build a
    batch incrementally and undo a tentative addition exactly (all integers)."""

    forward_tokens: int = 0
    decode_context_tokens: int = 0
    prefill_attention_units: int = 0

    def with_chunk(self, new_tokens: int, prefix_tokens: int) -> BatchFeatures:
        return BatchFeatures(
            self.forward_tokens + new_tokens,
            self.decode_context_tokens,
            self.prefill_attention_units + attention_units(new_tokens, prefix_tokens),
        )

    def without_chunk(self, new_tokens: int, prefix_tokens: int) -> BatchFeatures:
        return BatchFeatures(
            self.forward_tokens - new_tokens,
            self.decode_context_tokens,
            self.prefill_attention_units - attention_units(new_tokens, prefix_tokens),
        )

    def with_decodes(self, contexts: Iterable[int]) -> BatchFeatures:
        contexts = list(contexts)
        return BatchFeatures(
            self.forward_tokens + len(contexts),
            self.decode_context_tokens + sum(contexts),
            self.prefill_attention_units,
        )


@dataclass(frozen=True, slots=True)
class BatchShape:
    """One forward pass: the decoding requests' context lengths plus the prefill chunks."""

    decode_contexts: tuple[int, ...] = ()
    prefill_chunks: tuple[PrefillChunk, ...] = ()

    def __post_init__(self) -> None:
        for index, context in enumerate(self.decode_contexts):
            _require_non_negative_int(f"BatchShape.decode_contexts[{index}]", context)
        for index, chunk in enumerate(self.prefill_chunks):
            if not isinstance(chunk, PrefillChunk):
                raise TypeError(
                    f"BatchShape.prefill_chunks[{index}] must be a PrefillChunk, got "
                    f"{type(chunk).__name__}"
                )

    @property
    def features(self) -> BatchFeatures:
        features = BatchFeatures().with_decodes(self.decode_contexts)
        for chunk in self.prefill_chunks:
            features = features.with_chunk(chunk.new_tokens, chunk.prefix_tokens)
        return features

    @property
    def forward_tokens(self) -> int:
        return self.features.forward_tokens


@dataclass(frozen=True, slots=True)
class PiecewiseLinearTable:
    """Milliseconds at profiled token counts; linear in between, flat below the first point (a
    small batch is bound by reading the weights), extended with the last slope above the last."""

    tokens: tuple[int, ...]
    ms: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.tokens) == 0 or len(self.tokens) != len(self.ms):
            raise ValueError(
                "table needs one or more (tokens, ms) points with as many ms values as token counts"
            )
        for index, (tokens, ms) in enumerate(zip(self.tokens, self.ms, strict=True)):
            _require_non_negative_int(f"table.tokens[{index}]", tokens)
            if not (_is_number(ms) and math.isfinite(ms) and ms >= 0):
                raise ValueError(f"table.ms[{index}] must be a finite number >= 0, got {ms!r}")
        if any(b <= a for a, b in itertools.pairwise(self.tokens)):
            raise ValueError(f"table.tokens must be strictly increasing, got {list(self.tokens)}")
        if any(b < a for a, b in itertools.pairwise(self.ms)):
            raise ValueError(
                f"table.ms must be non-decreasing in tokens (more work never takes less time), "
                f"got {list(self.ms)}"
            )

    @classmethod
    def from_pairs(
        cls, pairs: Iterable[Sequence[float]], where: str = "table"
    ) -> PiecewiseLinearTable:
        if isinstance(pairs, str | bytes | Mapping) or not isinstance(pairs, Iterable):
            raise ValueError(f"{where} must be a list of [tokens, ms] pairs, got {pairs!r}")
        points = list(pairs)
        for index, point in enumerate(points):
            if not isinstance(point, list | tuple) or len(point) != 2:
                raise ValueError(f"{where}[{index}] must be a [tokens, ms] pair, got {point!r}")
        tokens = tuple(_as_int(f"{where}[{index}][0]", p[0]) for index, p in enumerate(points))
        ms = tuple(_as_ms(f"{where}[{index}][1]", p[1]) for index, p in enumerate(points))
        return cls(tokens, ms)

    def pairs(self) -> list[list[float]]:
        return [[tokens, ms] for tokens, ms in zip(self.tokens, self.ms, strict=True)]

    def __call__(self, tokens: float) -> float:
        if tokens <= 0:
            return 0.0
        if len(self.tokens) == 1 or tokens <= self.tokens[0]:
            return self.ms[0]
        right = bisect.bisect_left(self.tokens, tokens)
        if right == len(self.tokens):
            right = len(self.tokens) - 1
        left = right - 1
        x0, x1 = self.tokens[left], self.tokens[right]
        y0, y1 = self.ms[left], self.ms[right]
        return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)


class LatencyEstimator(Protocol):
    """Anything that predicts a batch's forward-pass time in milliseconds."""

    def est_features_ms(self, features: BatchFeatures) -> float: ...

    def est_ms(self, batch: BatchShape) -> float: ...


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """A calibrated model for one (model, hardware) pair; see `docs/scheduling.md` for the file.

    `alpha_decode_ms` is milliseconds per token of decode context (KV read per decode step);
    `alpha_prefill_ms` is milliseconds per causal attention unit (one query-key pair, all layers).
    `token_only_table`, when present, is the token-only baseline fitted on the same data.
    """

    name: str
    gemm_table: PiecewiseLinearTable
    alpha_decode_ms: float
    alpha_prefill_ms: float
    token_only_table: PiecewiseLinearTable | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("profile.name must be a non-empty string")
        for field_name in ("alpha_decode_ms", "alpha_prefill_ms"):
            value = getattr(self, field_name)
            if not (_is_number(value) and math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"profile.{field_name} must be a finite number >= 0, got {value!r}"
                )

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "schema": PROFILE_SCHEMA,
            "name": self.name,
            "gemm_table_ms": self.gemm_table.pairs(),
            "alpha_decode_ms": self.alpha_decode_ms,
            "alpha_prefill_ms": self.alpha_prefill_ms,
        }
        if self.token_only_table is not None:
            document["token_only_table_ms"] = self.token_only_table.pairs()
        if self.metadata:
            document["metadata"] = dict(self.metadata)
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> LatencyProfile:
        if not isinstance(document, Mapping):
            raise TypeError(
                f"a latency profile must be a JSON object, got {type(document).__name__}"
            )
        schema = document.get("schema")
        if schema != PROFILE_SCHEMA:
            raise ValueError(f"profile.schema must be {PROFILE_SCHEMA!r}, got {schema!r}")
        for key in ("name", "gemm_table_ms", "alpha_decode_ms", "alpha_prefill_ms"):
            if key not in document:
                raise ValueError(f"profile is missing the field {key!r}")
        token_only = document.get("token_only_table_ms")
        metadata = document.get("metadata", {})
        if not isinstance(metadata, Mapping):
            raise ValueError("profile.metadata must be a JSON object")
        return cls(
            name=document["name"],
            gemm_table=PiecewiseLinearTable.from_pairs(
                document["gemm_table_ms"], "profile.gemm_table_ms"
            ),
            alpha_decode_ms=document["alpha_decode_ms"],
            alpha_prefill_ms=document["alpha_prefill_ms"],
            token_only_table=(
                PiecewiseLinearTable.from_pairs(token_only, "profile.token_only_table_ms")
                if token_only is not None
                else None
            ),
            metadata=dict(metadata),
        )


class LatencyModel:
    """Eq. 1 over a profile: `est_ms(batch)`; `est_features_ms` for incremental schedulers."""

    def __init__(self, profile: LatencyProfile) -> None:
        self.profile = profile
        self._gemm = profile.gemm_table

    def gemm_ms(self, forward_tokens: float) -> float:
        return self._gemm(forward_tokens)

    def est_features_ms(self, features: BatchFeatures) -> float:
        if features.forward_tokens <= 0:
            return 0.0
        return (
            self._gemm(features.forward_tokens)
            + self.profile.alpha_decode_ms * features.decode_context_tokens
            + self.profile.alpha_prefill_ms * features.prefill_attention_units
        )

    def est_ms(self, batch: BatchShape) -> float:
        return self.est_features_ms(batch.features)


class TokenOnlyModel:
    """The baseline: latency as a function of the batch's forward-token count alone."""

    def __init__(self, table: PiecewiseLinearTable) -> None:
        self.table = table

    def est_features_ms(self, features: BatchFeatures) -> float:
        return self.table(features.forward_tokens) if features.forward_tokens > 0 else 0.0

    def est_ms(self, batch: BatchShape) -> float:
        return self.est_features_ms(batch.features)


def read_profile_file(path: str | Path) -> LatencyProfile:
    """A profile JSON file (built-in profiles by name: `profiles.load_profile`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no latency profile file at {str(path)!r}")
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"latency profile {str(path)!r} is not valid JSON: {error}") from error
    return LatencyProfile.from_json(document)


def save_profile(profile: LatencyProfile, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile.to_json(), indent=2) + "\n")
    return path


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_int(field_name: str, value: Any) -> int:
    if not _is_number(value) or not math.isfinite(value) or value != int(value):
        raise ValueError(f"{field_name} must be a whole number of tokens, got {value!r}")
    return int(value)


def _as_ms(field_name: str, value: Any) -> float:
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{field_name} must be a finite number of ms, got {value!r}")
    return float(value)


def _require_non_negative_int(field_name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field_name} must be an int, got {type(value).__name__} ({value!r})")
    if value < 0:
        raise ValueError(f"{field_name} must be >= 0, got {value}")

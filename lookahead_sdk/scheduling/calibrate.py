"""Fit Eq. 1 (T_GEMM table + alpha_d + alpha_p) and the token-only baseline by least squares.

Both models are linear in their parameters once T_GEMM is a piecewise-linear table over fixed
knots (hat-function basis). Rows are weighted by 1/latency, so the fit minimises relative error
(the quantity reported). The table is parametrised by non-negative increments and solved with
non-negative least squares, so a fitted table is non-decreasing and the alphas are >= 0.

The loss is Huber's on the relative residuals (iteratively reweighted least squares): a batch
whose measurement is far off the rest, e.g. timed while another process held the CPU, pulls the
fit linearly instead of quadratically. With clean data (residuals within about 1.3 robust standard
deviations) this is plain least squares.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lookahead_sdk.scheduling.latency_model import (
    LatencyEstimator,
    LatencyModel,
    LatencyProfile,
    PiecewiseLinearTable,
    TokenOnlyModel,
)
from lookahead_sdk.scheduling.measurements import BatchMeasurement

MIN_SAMPLES_PER_INTERVAL = 2
HUBER_K = 1.345  # the usual constant: 95% efficiency of least squares under Gaussian noise
MAD_TO_SIGMA = 1.4826  # median absolute deviation -> standard deviation (Gaussian)
IRLS_MAX_ITERATIONS = 50


@dataclass(frozen=True, slots=True)
class ErrorStats:
    n: int
    max_rel_err: float
    mean_rel_err: float

    def to_json(self) -> dict[str, float]:
        return {"max_rel_err": self.max_rel_err, "mean_rel_err": self.mean_rel_err}


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    """A fitted profile (with its token-only table) and both models' errors."""

    profile: LatencyProfile
    n_train: int
    n_heldout: int
    train_context_aware: ErrorStats
    train_token_only: ErrorStats
    heldout_context_aware: ErrorStats | None
    heldout_token_only: ErrorStats | None

    def heldout_json(self) -> dict[str, Any]:
        """The benchmark's `E` shape: held-out errors of both models."""
        if self.heldout_context_aware is None or self.heldout_token_only is None:
            raise ValueError("this calibration had no held-out split (heldout_frac=0)")
        return {
            "n_heldout": self.n_heldout,
            "context_aware": self.heldout_context_aware.to_json(),
            "token_only": self.heldout_token_only.to_json(),
        }


@dataclass(frozen=True, slots=True)
class CrossValidation:
    """Out-of-fold errors of both models: each batch predicted by a fit that never saw it."""

    folds: int
    context_aware: ErrorStats
    token_only: ErrorStats

    def to_json(self) -> dict[str, Any]:
        return {
            "folds": self.folds,
            "n": self.context_aware.n,
            "context_aware": self.context_aware.to_json(),
            "token_only": self.token_only.to_json(),
        }


def relative_errors(estimator: LatencyEstimator, data: Sequence[BatchMeasurement]) -> list[float]:
    return [abs(estimator.est_ms(m.batch) - m.latency_ms) / m.latency_ms for m in data]


def error_stats(estimator: LatencyEstimator, data: Sequence[BatchMeasurement]) -> ErrorStats:
    if not data:
        raise ValueError("error_stats needs at least one measured batch")
    return _stats(relative_errors(estimator, data))


def split_heldout(
    data: Sequence[BatchMeasurement], heldout_frac: float, seed: int
) -> tuple[list[BatchMeasurement], list[BatchMeasurement]]:
    if not 0 <= heldout_frac < 1:
        raise ValueError(f"heldout_frac must be in [0, 1), got {heldout_frac!r}")
    order = list(range(len(data)))
    random.Random(seed).shuffle(order)
    n_heldout = round(len(data) * heldout_frac)
    if heldout_frac > 0 and len(data) >= 2:
        n_heldout = min(max(n_heldout, 1), len(data) - 1)
    heldout = sorted(order[:n_heldout])
    train = sorted(order[n_heldout:])
    return [data[i] for i in train], [data[i] for i in heldout]


def choose_knots(forward_tokens: Sequence[int]) -> list[int]:
    """Powers of two spanning the observed forward-token counts (plus both ends), merged until
    every interval between knots holds enough samples to pin down its end points."""
    if not forward_tokens:
        raise ValueError("choose_knots needs at least one batch")
    low, high = min(forward_tokens), max(forward_tokens)
    knots = sorted({low, high} | {2**i for i in range(40) if low < 2**i < high})
    values = sorted(forward_tokens)

    def count(a: int, b: int) -> int:  # samples in (a, b]
        return int(np.searchsorted(values, b, "right") - np.searchsorted(values, a, "right"))

    while len(knots) > 2:
        counts = [count(a, b) for a, b in itertools.pairwise(knots)]
        counts[0] += count(knots[0] - 1, knots[0])  # the first interval includes its left end
        sparse = min(range(len(counts)), key=lambda i: counts[i])
        if counts[sparse] >= MIN_SAMPLES_PER_INTERVAL:
            break
        # Drop the interior end of the sparsest interval, merging it with its sparser neighbour.
        if sparse == 0:
            drop = 1
        elif sparse == len(counts) - 1:
            drop = len(knots) - 2
        else:
            drop = sparse if counts[sparse - 1] <= counts[sparse + 1] else sparse + 1
        del knots[drop]
    return knots


def fit_profile(
    data: Sequence[BatchMeasurement],
    *,
    name: str,
    knots: Sequence[int] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> LatencyProfile:
    """Least-squares (relative-error weighted) fit of Eq. 1 and of the token-only table."""
    if len(data) < 3:
        raise ValueError(f"fit_profile needs at least 3 measured batches, got {len(data)}")
    features = [m.batch.features for m in data]
    knots = list(knots) if knots is not None else choose_knots([f.forward_tokens for f in features])
    table_basis = _monotone_table_basis([f.forward_tokens for f in features], knots)
    latencies = np.array([m.latency_ms for m in data], dtype=float)
    context_columns = np.column_stack(
        [
            table_basis,
            [f.decode_context_tokens for f in features],
            [f.prefill_attention_units for f in features],
        ]
    ).astype(float)
    solution = _huber_relative_fit(context_columns, latencies)
    token_solution = _huber_relative_fit(table_basis, latencies)
    return LatencyProfile(
        name=name,
        gemm_table=_table_from_increments(knots, solution[: len(knots)]),
        alpha_decode_ms=float(solution[len(knots)]),
        alpha_prefill_ms=float(solution[len(knots) + 1]),
        token_only_table=_table_from_increments(knots, token_solution),
        metadata=dict(metadata or {}),
    )


def calibrate(
    data: Sequence[BatchMeasurement],
    *,
    name: str,
    heldout_frac: float = 0.3,
    seed: int = 0,
    metadata: Mapping[str, Any] | None = None,
) -> CalibrationReport:
    train, heldout = split_heldout(data, heldout_frac, seed)
    profile = fit_profile(train, name=name, metadata=metadata)
    context_aware = LatencyModel(profile)
    assert profile.token_only_table is not None
    token_only = TokenOnlyModel(profile.token_only_table)
    return CalibrationReport(
        profile=profile,
        n_train=len(train),
        n_heldout=len(heldout),
        train_context_aware=error_stats(context_aware, train),
        train_token_only=error_stats(token_only, train),
        heldout_context_aware=error_stats(context_aware, heldout) if heldout else None,
        heldout_token_only=error_stats(token_only, heldout) if heldout else None,
    )


def cross_validate(
    data: Sequence[BatchMeasurement], *, folds: int = 5, seed: int = 0
) -> CrossValidation:
    """k-fold cross-validation of both models (seeded random folds)."""
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds must be an int >= 2, got {folds!r}")
    if len(data) < folds + 3:
        raise ValueError(
            f"{folds}-fold cross-validation needs at least {folds + 3} batches, got {len(data)}"
        )
    order = list(range(len(data)))
    random.Random(seed).shuffle(order)
    context_errors: list[float] = []
    token_errors: list[float] = []
    for fold in range(folds):
        held = set(order[fold::folds])
        profile = fit_profile([m for i, m in enumerate(data) if i not in held], name="cv")
        assert profile.token_only_table is not None
        test = [data[i] for i in sorted(held)]
        context_errors += relative_errors(LatencyModel(profile), test)
        token_errors += relative_errors(TokenOnlyModel(profile.token_only_table), test)
    return CrossValidation(folds, _stats(context_errors), _stats(token_errors))


def _stats(errors: Sequence[float]) -> ErrorStats:
    return ErrorStats(len(errors), max(errors), sum(errors) / len(errors))


def _hat_basis(forward_tokens: Sequence[int], knots: Sequence[int]) -> np.ndarray:
    """Row i: the interpolation weights of each knot at forward_tokens[i] (matches
    `PiecewiseLinearTable`: flat below the first knot, last slope above the last)."""
    basis = np.zeros((len(forward_tokens), len(knots)))
    for row, tokens in enumerate(forward_tokens):
        if len(knots) == 1 or tokens <= knots[0]:
            basis[row, 0] = 1.0
            continue
        right = min(int(np.searchsorted(knots, tokens, "left")), len(knots) - 1)
        left = right - 1
        t = (tokens - knots[left]) / (knots[right] - knots[left])
        basis[row, left] = 1.0 - t
        basis[row, right] = t
    return basis


def _monotone_table_basis(forward_tokens: Sequence[int], knots: Sequence[int]) -> np.ndarray:
    """Table value at knot k = sum of increments 0..k, so increment columns are suffix sums of
    the hat weights; non-negative increments give a non-decreasing table."""
    hat = _hat_basis(forward_tokens, knots)
    return np.cumsum(hat[:, ::-1], axis=1)[:, ::-1]


def _table_from_increments(knots: Sequence[int], increments: np.ndarray) -> PiecewiseLinearTable:
    values = np.cumsum(increments)
    return PiecewiseLinearTable(tuple(int(k) for k in knots), tuple(float(v) for v in values))


def _huber_relative_fit(columns: np.ndarray, latencies: np.ndarray) -> np.ndarray:
    """Non-negative fit minimising Huber's loss of the relative residuals, by iteratively
    reweighted least squares; the residual scale is their median absolute deviation."""
    relative = 1.0 / latencies
    solution = _weighted_nnls(columns, latencies, relative)
    for _ in range(IRLS_MAX_ITERATIONS):
        residuals = (columns @ solution - latencies) * relative
        scale = MAD_TO_SIGMA * float(np.median(np.abs(residuals - np.median(residuals))))
        if scale <= 1e-12:  # (nearly) exact fit: nothing to down-weight
            break
        excess = np.abs(residuals) / (HUBER_K * scale)
        huber = np.where(excess <= 1.0, 1.0, 1.0 / np.maximum(excess, 1.0))
        updated = _weighted_nnls(columns, latencies, relative * np.sqrt(huber))
        converged = np.allclose(updated, solution, rtol=1e-9, atol=0.0)
        solution = updated
        if converged:
            break
    return solution


def _weighted_nnls(columns: np.ndarray, target: np.ndarray, weights: np.ndarray) -> np.ndarray:
    weighted = columns * weights[:, None]
    scale = np.linalg.norm(weighted, axis=0)
    scale[scale == 0] = 1.0
    solution = nnls(weighted / scale, target * weights)
    return solution / scale


def nnls(matrix: np.ndarray, target: np.ndarray, max_iterations: int | None = None) -> np.ndarray:
    """Non-negative least squares, Lawson & Hanson's active-set algorithm."""
    _, n = matrix.shape
    passive = np.zeros(n, dtype=bool)
    x = np.zeros(n)
    gradient = matrix.T @ (target - matrix @ x)
    tolerance = 10 * np.finfo(float).eps * np.linalg.norm(matrix, 1) * max(matrix.shape)
    iterations = 0
    limit = max_iterations if max_iterations is not None else 30 * n
    while (~passive).any() and gradient[~passive].max() > tolerance and iterations < limit:
        candidate = int(np.argmax(np.where(passive, -np.inf, gradient)))
        passive[candidate] = True
        while True:
            iterations += 1
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(matrix[:, passive], target, rcond=None)[0]
            if (z[passive] > tolerance).all() or iterations >= limit:
                break
            blocking = passive & (z <= tolerance)
            gap = np.maximum(x[blocking] - z[blocking], np.finfo(float).tiny)
            step = float(np.min(x[blocking] / gap))
            x = x + step * (z - x)
            passive &= x > tolerance
        x = np.where(passive, z, 0.0)
        gradient = matrix.T @ (target - matrix @ x)
    return np.clip(x, 0.0, None)

import argparse
import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk.base.args import CommandParser
from lookahead_sdk.cli import scheduling as scheduling_cli
from lookahead_sdk.scheduling import (
    BatchShape,
    LatencyModel,
    LatencyProfile,
    PiecewiseLinearTable,
    PrefillChunk,
    TokenOnlyModel,
    load_profile,
)
from lookahead_sdk.scheduling.calibrate import (
    _huber_relative_fit,
    _weighted_nnls,
    calibrate,
    choose_knots,
    cross_validate,
    error_stats,
    fit_profile,
    nnls,
    split_heldout,
)
from lookahead_sdk.scheduling.measurements import (
    BatchMeasurement,
    MeasurementSet,
    load_measurements,
    save_measurements,
)
from lookahead_sdk.scheduling.profiles import H200_QWEN3_8B

TRUE_PROFILE = LatencyProfile(
    name="truth",
    gemm_table=PiecewiseLinearTable((1, 64, 512, 4096), (0.5, 0.9, 2.5, 14.0)),
    alpha_decode_ms=2e-4,
    alpha_prefill_ms=3e-6,
)


def random_batches(count: int, seed: int) -> list[BatchShape]:
    rng = random.Random(seed)
    batches = []
    for _ in range(count):
        decode = tuple(rng.randint(100, 20_000) for _ in range(rng.randint(0, 12)))
        chunks = tuple(
            PrefillChunk(rng.randint(1, 3000), rng.randint(0, 20_000))
            for _ in range(rng.randint(0 if decode else 1, 2))
        )
        batches.append(BatchShape(decode, chunks))
    return batches


def measured(batches: list[BatchShape], profile: LatencyProfile, noise: float, seed: int):
    rng = random.Random(seed)
    model = LatencyModel(profile)
    return [BatchMeasurement(b, model.est_ms(b) * rng.lognormvariate(0, noise)) for b in batches]


def brute_force_nnls(matrix: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The best least-squares solution over every support set whose solution is non-negative."""
    n = matrix.shape[1]
    best, best_residual = np.zeros(n), float(np.linalg.norm(target))
    for size in range(1, n + 1):
        for support in itertools.combinations(range(n), size):
            columns = list(support)
            solution = np.linalg.lstsq(matrix[:, columns], target, rcond=None)[0]
            if (solution < 0).any():
                continue
            x = np.zeros(n)
            x[columns] = solution
            residual = float(np.linalg.norm(matrix @ x - target))
            if residual < best_residual - 1e-12:
                best, best_residual = x, residual
    return best


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 4))
def test_nnls_matches_brute_force_over_support_sets(seed, n) -> None:
    rng = np.random.default_rng(seed)
    matrix = rng.normal(size=(12, n))
    target = rng.normal(size=12)
    x = nnls(matrix, target)
    expected = brute_force_nnls(matrix, target)
    assert (x >= 0).all()
    assert np.linalg.norm(matrix @ x - target) == pytest.approx(
        np.linalg.norm(matrix @ expected - target), rel=1e-6, abs=1e-9
    )


def test_fit_recovers_the_parameters_of_noise_free_data() -> None:
    data = measured(random_batches(300, seed=1), TRUE_PROFILE, noise=0.0, seed=0)
    profile = fit_profile(data, name="fit", knots=TRUE_PROFILE.gemm_table.tokens)
    assert profile.alpha_decode_ms == pytest.approx(TRUE_PROFILE.alpha_decode_ms, rel=1e-3)
    assert profile.alpha_prefill_ms == pytest.approx(TRUE_PROFILE.alpha_prefill_ms, rel=1e-3)
    assert profile.gemm_table.ms == pytest.approx(TRUE_PROFILE.gemm_table.ms, rel=1e-2)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), noise=st.floats(0.0, 0.3))
def test_fitted_table_is_non_decreasing_and_alphas_non_negative(seed, noise) -> None:
    data = measured(random_batches(40, seed), TRUE_PROFILE, noise, seed)
    profile = fit_profile(data, name="fit")
    ms = profile.gemm_table.ms
    assert all(b >= a for a, b in itertools.pairwise(ms))
    assert profile.alpha_decode_ms >= 0 and profile.alpha_prefill_ms >= 0
    assert profile.token_only_table is not None


def test_context_aware_beats_token_only_on_held_out_context_varying_data() -> None:
    data = measured(random_batches(200, seed=3), TRUE_PROFILE, noise=0.02, seed=4)
    report = calibrate(data, name="fit", heldout_frac=0.3, seed=0)
    assert report.n_heldout == 60 and report.n_train == 140
    assert report.heldout_context_aware is not None and report.heldout_token_only is not None
    assert report.heldout_context_aware.max_rel_err < 0.10
    assert report.heldout_token_only.mean_rel_err > 3 * report.heldout_context_aware.mean_rel_err
    assert report.heldout_json()["n_heldout"] == 60


def test_a_few_gross_outliers_barely_move_the_robust_fit() -> None:
    """Three of 30 batches timed 3x too slow (another process held the CPU). Plain relative
    least squares is off by about 12% on some clean batch here; the Huber fit stays within the
    1% noise."""
    data = measured(random_batches(30, seed=8), TRUE_PROFILE, noise=0.01, seed=3)
    spoiled = [*data[:-3], *(BatchMeasurement(m.batch, 3 * m.latency_ms) for m in data[-3:])]
    profile = fit_profile(spoiled, name="robust", knots=TRUE_PROFILE.gemm_table.tokens)
    assert profile.alpha_prefill_ms == pytest.approx(TRUE_PROFILE.alpha_prefill_ms, rel=0.02)
    assert profile.alpha_decode_ms == pytest.approx(TRUE_PROFILE.alpha_decode_ms, rel=0.02)
    model = LatencyModel(profile)
    assert max(abs(model.est_ms(m.batch) - m.latency_ms) / m.latency_ms for m in data[:-3]) < 0.04


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), bad=st.integers(0, 29), factor=st.floats(1.5, 10.0))
def test_property_huber_fit_has_no_larger_relative_error_on_clean_rows_than_least_squares(
    seed, bad, factor
) -> None:
    rng = np.random.default_rng(seed)
    columns = rng.uniform(1.0, 10.0, size=(30, 3))
    clean = columns @ np.array([1.0, 2.0, 0.5])
    target = clean.copy()
    target[bad] *= factor

    def clean_rows_error(solution):
        errors = np.abs(columns @ solution - clean) / clean
        return float(np.delete(errors, bad).max())

    plain = _weighted_nnls(columns, target, 1.0 / target)
    robust = _huber_relative_fit(columns, target)
    assert (robust >= 0).all()
    assert clean_rows_error(robust) <= clean_rows_error(plain) + 1e-9


def test_cross_validation_predicts_every_batch_once_from_a_fit_without_it() -> None:
    data = measured(random_batches(60, seed=9), TRUE_PROFILE, noise=0.02, seed=5)
    cv = cross_validate(data, folds=5, seed=0)
    assert cv.folds == 5 and cv.context_aware.n == 60 and cv.token_only.n == 60
    assert cv.context_aware.max_rel_err < 0.10
    assert cv.token_only.mean_rel_err > 3 * cv.context_aware.mean_rel_err
    assert cross_validate(data, folds=5, seed=0) == cv  # seeded
    assert set(cv.to_json()) == {"folds", "n", "context_aware", "token_only"}
    with pytest.raises(ValueError, match="folds"):
        cross_validate(data, folds=1)
    with pytest.raises(ValueError, match="at least 8 batches"):
        cross_validate(data[:7], folds=5)


def test_heldout_split_is_disjoint_complete_and_seeded() -> None:
    data = measured(random_batches(50, seed=5), TRUE_PROFILE, noise=0.0, seed=0)
    train, heldout = split_heldout(data, 0.3, seed=7)
    assert len(heldout) == 15 and len(train) == 35
    assert {id(m) for m in train}.isdisjoint({id(m) for m in heldout})
    assert split_heldout(data, 0.3, seed=7) == (train, heldout)
    assert split_heldout(data, 0.3, seed=8)[1] != heldout
    with pytest.raises(ValueError, match="heldout_frac"):
        split_heldout(data, 1.0, seed=0)


@given(st.lists(st.integers(1, 100_000), min_size=1, max_size=200))
def test_knots_span_the_data_and_every_interval_has_samples(tokens) -> None:
    knots = choose_knots(tokens)
    assert knots[0] == min(tokens) and knots[-1] == max(tokens)
    assert all(b > a for a, b in itertools.pairwise(knots))
    if len(knots) > 2:
        for a, b in itertools.pairwise(knots):
            assert sum(1 for t in tokens if a < t <= b or (a == knots[0] and t == a)) >= 2


def test_too_few_batches_is_a_clear_error() -> None:
    data = measured(random_batches(2, seed=0), TRUE_PROFILE, noise=0.0, seed=0)
    with pytest.raises(ValueError, match="at least 3"):
        fit_profile(data, name="x")


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_measurements_round_trip(tmp_path, suffix) -> None:
    data = measured(random_batches(20, seed=9), TRUE_PROFILE, noise=0.1, seed=1)
    path = save_measurements(MeasurementSet(tuple(data)), tmp_path / f"m{suffix}")
    loaded = load_measurements(path).batches
    assert [m.batch for m in loaded] == [m.batch for m in data]
    assert [m.latency_ms for m in loaded] == pytest.approx([m.latency_ms for m in data])


def test_bad_csv_names_the_line_and_the_fix(tmp_path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("latency_ms,decode_contexts,prefill_chunks\n3.0,100,\n2.0,,512-0\n")
    with pytest.raises(ValueError, match=r"line 3.*new_tokens:prefix_tokens"):
        load_measurements(path)
    path.write_text("latency,decode\n1,2\n")
    with pytest.raises(ValueError, match="missing"):
        load_measurements(path)


def test_bad_json_record_names_its_index(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            {
                "schema": "lookahead-sdk/batch-measurements/v1",
                "batches": [{"decode_contexts": [5], "latency_ms": 1.0}, {"latency_ms": -2}],
            }
        )
    )
    with pytest.raises(ValueError, match=r"batches\[1\]"):
        load_measurements(path)


def test_calibrate_command_writes_a_loadable_profile_and_report(tmp_path, capsys) -> None:
    data = measured(random_batches(80, seed=11), TRUE_PROFILE, noise=0.02, seed=2)
    data_path = save_measurements(MeasurementSet(tuple(data)), tmp_path / "batches.csv")
    out, report = tmp_path / "profile.json", tmp_path / "report.json"
    parser = argparse.ArgumentParser()
    scheduling_cli.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "calibrate",
            "--profile-data", str(data_path),
            "--save-profile", str(out),
            "--heldout-frac", "0.25",
            "--report-json", str(report),
        ]
    )  # fmt: skip
    assert args.func(args) == 0
    profile = load_profile(out)
    assert profile.name == "batches"
    heldout = json.loads(report.read_text())["heldout"]
    assert heldout["n_heldout"] == 20
    assert set(heldout["context_aware"]) == {"max_rel_err", "mean_rel_err"}
    assert "context-aware" in capsys.readouterr().out


def test_measurement_plan_flags_are_validated(tmp_path, capsys) -> None:
    parser = CommandParser(prog="lookahead-sdk")
    scheduling_cli.register(parser.add_subparsers())
    base = ["calibrate", "--measure-embedded", "--save-profile", str(tmp_path / "p.json")]
    assert parser.parse_args([*base, "--new-tokens", "16, 64,512"]).new_tokens == (16, 64, 512)
    for bad in ("", "16,0", "16,x"):
        with pytest.raises(SystemExit) as exit:
            parser.parse_args([*base, "--new-tokens", bad])
        assert exit.value.code == 2 and "--new-tokens" in capsys.readouterr().err


def test_builtin_h200_profile_is_the_fit_of_the_committed_gpu_measurements() -> None:
    """The shipped numbers are reproducible: calibrating the H200 batches in docs/ (the CLI's
    default split) gives them back, and context awareness is what makes the fit good."""
    root = Path(__file__).resolve().parents[2] / "docs" / "results" / "scheduling" / "gpu"
    measured = load_measurements(root / "qwen3_8b_h200_sdpa_seed0.json").batches
    fitted = calibrate(measured, name="h200-qwen3-8b").profile
    assert fitted.alpha_decode_ms == pytest.approx(H200_QWEN3_8B.alpha_decode_ms, rel=1e-3)
    assert fitted.alpha_prefill_ms == pytest.approx(H200_QWEN3_8B.alpha_prefill_ms, rel=1e-3)
    for table, shipped in (
        (fitted.gemm_table, H200_QWEN3_8B.gemm_table),
        (fitted.token_only_table, H200_QWEN3_8B.token_only_table),
    ):
        assert table is not None and shipped is not None
        assert table.tokens == shipped.tokens
        assert table.ms == pytest.approx(shipped.ms, rel=1e-3)
    # An independent run's random mixed batches (seed 1), which the fit never saw.
    mixed = [
        m
        for m in load_measurements(root / "qwen3_8b_h200_sdpa_rev1_seed1.json").batches
        if m.batch.decode_contexts and m.batch.prefill_chunks
    ]
    assert len(mixed) == 60
    context_aware = error_stats(LatencyModel(H200_QWEN3_8B), mixed)
    token_only = error_stats(TokenOnlyModel(H200_QWEN3_8B.token_only_table), mixed)
    assert context_aware.mean_rel_err < 0.08 < token_only.mean_rel_err


def test_a_profile_measured_on_the_embedded_engine_says_where(tmp_path, monkeypatch) -> None:
    """The engine itself is measured by the engine tests; here its batches are given, and the
    profile must carry the stamp (commit, machine, command) of the run that timed them."""
    from lookahead_sdk.bench import embedded_batches

    data = measured(random_batches(60, seed=5), TRUE_PROFILE, noise=0.02, seed=4)
    monkeypatch.setattr(
        embedded_batches,
        "measure_on_embedded_engine",
        lambda plan, port, threads: MeasurementSet(tuple(data), {"threads": threads}),
    )
    out, batches = tmp_path / "profile.json", tmp_path / "batches.json"
    parser = argparse.ArgumentParser()
    scheduling_cli.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "calibrate", "--measure-embedded", "--engine-threads", "2",
            "--save-profile", str(out), "--save-measurements", str(batches),
        ]
    )  # fmt: skip
    assert args.func(args) == 0
    for metadata in (
        load_profile(out).metadata,
        json.loads(batches.read_text())["metadata"],
    ):
        assert metadata["threads"] == 2
        stamp = metadata["provenance"]
        assert {"commit", "machine", "command", "date"} <= set(stamp)
        assert stamp["machine"]["cpus"] >= 1

"""The scheduling benchmarks end to end, at toy sizes: JSON shapes and the direction of effects."""

import argparse
import dataclasses
import json
import math

import pytest

from lookahead_sdk.bench import estimator, sim_ttft, slo
from lookahead_sdk.scheduling.admission import HybridConfig
from lookahead_sdk.scheduling.measurements import MeasurementSet, save_measurements


def run_bench(module, argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_slo_bench_writes_the_issue_shape_and_protects_tbt(tmp_path) -> None:
    out, plot = tmp_path / "slo.json", tmp_path / "slo.png"
    code = run_bench(
        slo,
        [
            "slo",
            "--json",
            str(out),
            "--plot",
            str(plot),
            "--be-loads",
            "0,10",
            "--duration-s",
            "40",
        ],
    )
    assert code == 0 and plot.stat().st_size > 0
    document = json.loads(out.read_text())
    assert set(document) == {
        "provenance",
        "slo_ttft_ms",
        "slo_tbt_ms",
        "be_loads",
        "hybrid",
        "vanilla",
        "lookahead_aware",
    }
    assert document["be_loads"] == [0.0, 10.0]
    assert document["hybrid"] == dataclasses.asdict(HybridConfig(tbt_bound_ms=45.0))
    for policy in ("vanilla", "lookahead_aware"):
        series = document[policy]
        assert {"lc_ttft_p99_ms", "tbt_p95_ms", "lookahead_on_time_frac"} <= set(series)
        assert all(len(values) == 2 for values in series.values())
        assert all(0 <= f <= 1 for f in series["lookahead_waste_frac"])
        assert series["lookaheads"][0] == 0 and series["lookaheads"][1] > 0
    heavy = 1
    assert (
        document["lookahead_aware"]["tbt_p95_ms"][heavy] < document["vanilla"]["tbt_p95_ms"][heavy]
    )
    assert document["lookahead_aware"]["tbt_p95_ms"][heavy] <= document["slo_tbt_ms"]


def test_estimator_bench_on_sim_and_a_saved_embedded_file(tmp_path) -> None:
    saved = estimator.measure_sim("h100-qwen3-8b", 90, 0.0, seed=5)
    embedded = save_measurements(MeasurementSet(saved.batches), tmp_path / "embedded.json")
    out = tmp_path / "estimator.json"
    argv = [
        "estimator",
        "--json",
        str(out),
        "--sim-batches",
        "120",
        "--embedded-data",
        str(embedded),
    ]
    assert run_bench(estimator, argv) == 0
    sources = json.loads(out.read_text())["sources"]
    assert set(sources) == {"sim", "embedded"}
    for report in sources.values():
        assert set(report) == {"n_heldout", "context_aware", "token_only"}
        assert report["context_aware"]["mean_rel_err"] < report["token_only"]["mean_rel_err"]
    assert sources["sim"]["n_heldout"] == 36
    cross = json.loads(out.read_text())["cross_validation"]
    assert set(cross) == {"sim", "embedded"}
    assert cross["sim"]["n"] == 120 and cross["sim"]["folds"] == 5
    assert (
        cross["sim"]["context_aware"]["mean_rel_err"] < cross["sim"]["token_only"]["mean_rel_err"]
    )


def test_sim_ttft_summary_math() -> None:
    runs = [
        {"sync_p50_s": 1.0, "lookahead_p50_s": 0.5, "sync_p90_s": 2.0, "lookahead_p90_s": 0.5},
        {"sync_p50_s": 1.0, "lookahead_p50_s": 1.0, "sync_p90_s": 1.0, "lookahead_p90_s": 0.5},
        {
            "sync_p50_s": 1.0,
            "lookahead_p50_s": math.nan,
            "sync_p90_s": 1.0,
            "lookahead_p90_s": math.nan,
        },
    ]
    assert sim_ttft.reductions(runs, "p90") == pytest.approx([0.75, 0.5])
    assert sim_ttft.reductions(runs, "p50") == pytest.approx([0.5, 0.0])
    assert "62.5%" in sim_ttft.summary(runs)


def test_sim_ttft_drives_real_sdk_agents_against_sim_serve(tmp_path) -> None:
    """A real `sim serve` child process and the SDK's reference agents (tiny window and steps)."""
    out = tmp_path / "sim_ttft.json"
    argv = [
        "sim-ttft", "--json", str(out), "--agents", "1", "--strategies", "summarize",
        "--steps", "8", "--window-tokens", "4096", "--time-scale", "0.5",
        "--tool-output-tokens", "300,320",
    ]  # fmt: skip
    assert run_bench(sim_ttft, argv) == 0
    document = json.loads(out.read_text())
    assert document["profile"] == "h100-qwen3-8b"
    (row,) = document["runs"]
    assert row["agents"] == 1 and row["strategy"] == "summarize"
    assert row["sync_p50_s"] > 0 and row["lookahead_p50_s"] > 0

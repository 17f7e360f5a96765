import argparse
import json
import math

import pytest

from lookahead_sdk.bench import router as bench


def test_rank_correlations() -> None:
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert bench.pearson(xs, [2 * x + 1 for x in xs]) == pytest.approx(1.0)
    assert bench.spearman(xs, [x**3 for x in xs]) == pytest.approx(1.0)
    assert bench.spearman(xs, [-x for x in xs]) == pytest.approx(-1.0)
    assert bench._ranks([10.0, 20.0, 20.0, 5.0]) == [2.0, 3.5, 3.5, 1.0]
    assert math.isnan(bench.pearson([1.0, 1.0], [2.0, 3.0]))
    assert math.isnan(bench.spearman([1.0], [1.0]))


def _row(arm: str, seed: int, programs: int, overload: float, spm: float, **extra) -> dict:
    return {
        "arm": arm,
        "seed": seed,
        "programs": programs,
        "overload": overload,
        "steps_per_min": spm,
        "hold_p99_s": extra.get("hold", 0.0),
        "forced_admits": extra.get("forced", 0),
    }


def test_targets_are_judged_per_seed_from_the_measured_rows() -> None:
    runs = []
    for seed, thunder_2x in ((0, 320.0), (1, 290.0)):
        runs += [
            _row("thunder", seed, 36, 0.5, 380.0),
            _row("session", seed, 36, 0.5, 390.0),
            _row("thunder", seed, 72, 1.0, 400.0, hold=10.0),
            _row("thunder", seed, 144, 2.0, thunder_2x, hold=70.0 if seed else 30.0),
            _row("thunder", seed, 216, 3.0, 370.0),
            _row("session", seed, 144, 2.0, 200.0),
            _row("round-robin", seed, 144, 2.0, 190.0),
            _row("thunder-no-queue", seed, 144, 2.0, 250.0),
            _row("thunder-no-decay", seed, 144, 2.0, 330.0),
        ]
    burst = [{"arm": "thunder", "seed": 0, "spearman": 0.1, "pearson": 0.35}]
    targets = bench.evaluate_targets(runs, burst, {"tick_p99_ms": 7.0, "tick_cpu_p99_ms": 1.0})
    assert targets["thunder_over_best_baseline_at_2x"]["per_seed"] == {0: 1.6, 1: 1.45}
    assert not targets["thunder_over_best_baseline_at_2x"]["met"]
    assert targets["half_load_vs_session"]["met"]  # 380 / 390 = 0.974
    collapse = targets["no_collapse_up_to_3x"]["per_seed"]
    assert collapse[0]["worst_programs"] == 144 and collapse[0]["worst_over_peak"] == 0.8
    assert not targets["no_collapse_up_to_3x"]["met"]
    assert not targets["holds_up_to_2x"]["met"]  # seed 1's hold p99 is 70 s
    ablations = targets["ablations_at_2x"]
    assert ablations["thunder-no-queue"]["costs_steps_per_min"]
    assert not ablations["thunder-no-decay"]["costs_steps_per_min"]
    assert not targets["burst_fairness"]["met"]  # Pearson 0.35
    assert targets["policy_tick"]["met"]


def test_settings_size_the_kv_for_the_reference_overload() -> None:
    settings = bench.SweepSettings()
    assert settings.overload(144) == pytest.approx(2.0, abs=1e-4)
    assert settings.overload(36) == pytest.approx(0.5, abs=1e-4)
    with pytest.raises(ValueError, match="arms must name some of"):
        bench.SweepSettings(arms=("thunder", "magic"))


def test_a_small_sweep_writes_json_and_a_plot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    settings = bench.SweepSettings(
        programs=(4, 8), seeds=(0,), duration_s=40.0, warmup_s=10.0, reference_programs=8
    )
    document = bench.run_router_bench(
        "sim",
        str(tmp_path / "router.json"),
        str(tmp_path / "router.png"),
        settings=settings,
        burst=bench.BurstSettings(programs=8, duration_s=60.0, seeds=(0,)),
        tick=False,
        sensitivity=bench.SensitivitySettings(
            half_lives_s=(0.0, 1.0), aging_s=(40.0,), swap_budgets=(0.1,), programs=(8,)
        ),
        show_progress=False,
    )
    written = json.loads((tmp_path / "router.json").read_text())
    assert written["mode"] == "sim" and (tmp_path / "router.png").stat().st_size > 0
    assert {(r["arm"], r["programs"]) for r in written["runs"]} == {
        (arm, n) for arm in bench.ARMS for n in (4, 8)
    }
    for row in written["runs"]:
        assert row["steps_per_min"] > 0
        assert {"step_p50_s", "step_p99_s", "hold_p99_s", "hold_max_s", "forced_admits"} <= set(row)
        assert {"reprefill_tokens", "migrations", "preemptions"} <= set(row)
    assert written["setup"]["kv_tokens_per_backend"] == settings.kv_tokens_per_backend
    assert "commit" in written["provenance"]  # stamped by write_json
    assert {r["arm"] for r in document["burst"]} == set(bench.BURST_ARMS)
    assert "thunder_over_best_baseline_at_2x" in document["targets"]
    knobs = [
        (r["decay_half_life_s"], r["pause_order"], r["programs"]) for r in document["sensitivity"]
    ]
    assert knobs == [(0.0, "idle_longest", 8), (1.0, "idle_longest", 8), (1.0, "smallest", 8)]
    assert bench._sensitivity_table(document["sensitivity"]).row_count == 3


def test_measure_tick_reports_percentiles() -> None:
    tick = bench.measure_tick(bench.SweepSettings(), programs=40, backends=2, duration_s=30.0)
    assert tick["ticks"] > 10 and tick["programs"] == 40
    assert 0 < tick["tick_p50_ms"] <= tick["tick_p99_ms"] <= tick["tick_max_ms"]
    assert 0 <= tick["tick_cpu_p50_ms"] <= tick["tick_cpu_p99_ms"] <= tick["tick_cpu_max_ms"]


def test_the_command_line_runs_a_sweep(tmp_path) -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(
        [
            "--json", str(tmp_path / "out.json"), "--programs", "4", "--seeds", "0",
            "--arms", "thunder,session", "--duration-s", "30", "--warmup-s", "5",
            "--no-burst", "--no-tick",
        ]
    )  # fmt: skip
    assert bench.main(args) == 0
    document = json.loads((tmp_path / "out.json").read_text())
    assert [r["arm"] for r in document["runs"]] == ["thunder", "session"]
    with pytest.raises(ValueError, match="runs the simulation"):
        bench.run_router_bench("engine")

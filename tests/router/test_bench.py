import argparse
import json
import math
from pathlib import Path

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
    # The sweep's thunder-no-decay arm leads the frontier as its no-preemption end.
    assert [
        (p["decay_half_life_s"], p["swap_budget"], p["pause_order"]) for p in written["frontier"]
    ] == [
        (0.0, 0.12, "idle_longest"),
        (0.0, 0.1, "idle_longest"),
        (1.0, 0.1, "idle_longest"),
        (1.0, 0.12, "smallest"),
    ]
    no_decay = [r for r in written["runs"] if r["arm"] == "thunder-no-decay"]
    assert written["frontier"][0]["peak_steps_per_min"] == max(r["steps_per_min"] for r in no_decay)
    assert (tmp_path / "router_frontier.png").stat().st_size > 0


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


def _sensitivity_row(
    budget: float,
    seed: int,
    programs: int,
    overload: float,
    steps: float,
    hold: float,
    forced: int = 0,
) -> dict:
    return {
        "decay_half_life_s": 1.0, "aging_s": 40.0, "swap_budget": budget,
        "pause_order": "idle_longest", "arm": "thunder", "seed": seed, "programs": programs,
        "overload": overload, "steps_per_min": steps, "hold_p99_s": hold,
        "forced_admits": forced, "reprefill_tokens": int(steps * 1000),
    }  # fmt: skip


LOADS = ((64, 0.89), (144, 2.0), (216, 3.0))


def _setting(
    budget: float,
    seed: int,
    steps: tuple[float, ...],
    holds: tuple[float, ...],
    forced: tuple[int, ...] = (0, 0, 0),
) -> list[dict]:
    """One setting's runs at LOADS."""
    return [
        _sensitivity_row(budget, seed, programs, overload, s, h, f)
        for (programs, overload), s, h, f in zip(LOADS, steps, holds, forced, strict=True)
    ]  # fmt: skip


def test_the_frontier_judges_each_setting_and_seed_on_both_targets_at_once() -> None:
    rows = [
        # budget 0.08: steps hold up (worst 540 / 600 = 0.9), holds reach 70 s at 2x
        *_setting(0.08, 0, steps=(600, 560, 540), holds=(0, 70, 90)),
        # budget 0.12: holds bounded (55 s up to 2x; 3x is not judged), steps fall to 0.85
        *_setting(0.12, 0, steps=(600, 510, 530), holds=(0, 55, 80)),
        # seed 1 of budget 0.12: meets both, though forced admits at 3x do not count
        *_setting(0.12, 1, steps=(600, 560, 550), holds=(0, 55, 80), forced=(0, 0, 3)),
    ]
    points = {(p["swap_budget"], p["seed"]): p for p in bench.frontier(rows)}
    assert set(points) == {(0.08, 0), (0.12, 0), (0.12, 1)}
    slack = points[(0.08, 0)]
    assert (slack["worst_over_peak"], slack["worst_hold_p99_s"]) == (0.9, 70)
    assert (slack["collapse_met"], slack["holds_met"], slack["both_met"]) == (True, False, False)
    bounded = points[(0.12, 0)]
    assert (bounded["worst_programs"], bounded["worst_over_peak"]) == (144, 0.85)
    assert (bounded["holds_met"], bounded["collapse_met"], bounded["both_met"]) == (
        True,
        False,
        False,
    )
    assert bounded["reprefill_tokens_at_2x"] == 510_000
    both = points[(0.12, 1)]
    assert both["both_met"] and both["forced_admits"] == 0
    # A forced admit at 2x fails the hold target whatever the hold p99.
    forced = [dict(r, forced_admits=1) if r["programs"] == 144 else r for r in rows]
    refused = {(p["swap_budget"], p["seed"]): p for p in bench.frontier(forced)}[(0.12, 1)]
    assert not refused["holds_met"] and not refused["both_met"]


def test_the_targets_and_the_frontier_judge_the_default_the_same_way() -> None:
    loads = [(64, 0.89), (128, 1.78), (144, 2.0), (216, 3.0)]
    rows = [
        _sensitivity_row(0.12, seed, p, o, s, h)
        for seed in (0, 1)
        for (p, o), s, h in zip(
            loads, (600, 520 + seed * 40, 550, 560), (0, 45, 58, 90), strict=True
        )
    ]
    targets = bench.evaluate_targets(rows, [], None)
    points = {p["seed"]: p for p in bench.frontier(rows)}
    for seed in (0, 1):
        assert (
            targets["no_collapse_up_to_3x"]["per_seed"][seed]["worst_over_peak"]
            == points[seed]["worst_over_peak"]
        )
        assert (
            targets["holds_up_to_2x"]["per_seed"][seed]["worst_hold_p99_s"]
            == points[seed]["worst_hold_p99_s"]
        )
    assert [points[s]["both_met"] for s in (0, 1)] == [False, True]
    assert targets["no_collapse_up_to_3x"]["met"] is False


def test_the_frontier_plot_sits_beside_the_sweep_plot_for_str_and_path() -> None:
    expected = Path("out/router_sim_frontier.png")
    assert bench.frontier_plot_path("out/router_sim.png") == expected
    assert bench.frontier_plot_path(Path("out/router_sim.png")) == expected  # the CLI's type
    assert bench.frontier_plot_path("out/plot") == Path("out/plot_frontier.png")


def test_parallel_simulations_give_the_serial_rows_in_the_same_order() -> None:
    settings = bench.SweepSettings(
        programs=(4, 8), seeds=(0,), arms=("thunder", "session"), duration_s=30.0,
        warmup_s=5.0, reference_programs=8,
    )  # fmt: skip
    serial = bench.run_sweep(settings, jobs=1, show_progress=False)
    assert bench.run_sweep(settings, jobs=2, show_progress=False) == serial
    sensitivity = bench.SensitivitySettings(aging_s=(40.0,), swap_budgets=(0.1,), programs=(8,))
    assert bench.run_sensitivity(
        settings, sensitivity, jobs=2, show_progress=False
    ) == bench.run_sensitivity(settings, sensitivity, jobs=1, show_progress=False)

"""`lookahead-sdk bench router --mode sim`: steps/min of agent programs vs fleet load, the
program-aware router (thunder) against baseline routers and its own ablations, in the fleet
simulator (virtual time: the real policy core over simulated engines; see
`lookahead_sdk/router/fleet_sim/`). Also a burst-fairness scenario and the policy tick's cost.
`--mode overhead` (`router_overhead.py`) and `--mode engine` (`router_engine.py`) share the
command line.

Every figure is measured by running the simulation; `targets` in the JSON compares them with
the issue's targets and says which are met.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from lookahead_sdk.base.args import (
    comma_list,
    non_negative_float,
    non_negative_int,
    one_of,
    output_file,
    positive_float,
    positive_int,
)
from lookahead_sdk.bench import router_engine, router_overhead
from lookahead_sdk.bench.common import new_figure, percentile, progress, save_figure, write_json
from lookahead_sdk.router import (
    BaselineConfig,
    LeastLoadedStickyPolicy,
    RoundRobinPolicy,
    RouterCore,
    SessionAffinityPolicy,
    ThunderConfig,
    ThunderPolicy,
)
from lookahead_sdk.router.config import PauseOrder
from lookahead_sdk.router.fleet_sim import FleetConfig, FleetResult, WorkloadConfig, run_fleet
from lookahead_sdk.router.metrics import RouterMetrics
from lookahead_sdk.scheduling.profiles import latency_profile

ARMS: dict[str, Callable[[], RouterCore]] = {
    "thunder": lambda: ThunderPolicy(ThunderConfig()),
    "round-robin": lambda: RoundRobinPolicy(BaselineConfig()),
    "session": lambda: SessionAffinityPolicy(BaselineConfig()),
    "least-loaded": lambda: LeastLoadedStickyPolicy(BaselineConfig()),
    "thunder-no-queue": lambda: ThunderPolicy(ThunderConfig(global_queue=False)),
    "thunder-no-decay": lambda: ThunderPolicy(ThunderConfig(decay_half_life_s=0.0)),
}
BASELINES = ("round-robin", "session", "least-loaded")
DEFAULT_PROGRAMS = (16, 32, 36, 48, 64, 96, 128, 144, 160, 192, 216)
# The burst scenario's arms: thunder; thunder admitting new programs smallest first (within the
# 120 s aging bound); session affinity (no holds: the engine's FIFO).
BURST_ARMS: dict[str, Callable[[], RouterCore]] = {
    "thunder": ARMS["thunder"],
    "thunder-smallest-first": lambda: ThunderPolicy(ThunderConfig(new_program_order="smallest")),
    "session": ARMS["session"],
}


@dataclass(frozen=True, slots=True)
class SweepSettings:
    programs: tuple[int, ...] = DEFAULT_PROGRAMS
    seeds: tuple[int, ...] = (0, 1, 2)
    arms: tuple[str, ...] = tuple(ARMS)
    backends: int = 2
    profile: str = "h200-qwen3-8b"
    duration_s: float = 600.0
    warmup_s: float = 120.0
    # KV is sized so that `reference_programs` programs demand `reference_overload` x the KV.
    reference_programs: int = 144
    reference_overload: float = 2.0
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.arms) - set(ARMS))
        if unknown or not self.arms:
            raise ValueError(f"arms must name some of {list(ARMS)}; unknown: {unknown}")
        if not self.programs or min(self.programs) < 1 or not self.seeds:
            raise ValueError("programs must be ints >= 1 and seeds must not be empty")

    @property
    def kv_tokens_per_backend(self) -> int:
        demand = self.reference_programs * self.workload.mean_resident_tokens()
        return round(demand / (self.reference_overload * self.backends))

    def overload(self, programs: int) -> float:
        demand = programs * self.workload.mean_resident_tokens()
        return demand / (self.kv_tokens_per_backend * self.backends)

    def fleet(self, programs: int, seed: int) -> FleetConfig:
        return FleetConfig(
            programs=programs,
            kv_tokens_per_backend=self.kv_tokens_per_backend,
            backends=self.backends,
            profile=self.profile,
            duration_s=self.duration_s,
            warmup_s=self.warmup_s,
            seed=seed,
            workload=self.workload,
        )


# --- the sweep ---------------------------------------------------------------------------------


def run_one(settings: SweepSettings, arm: str, programs: int, seed: int) -> dict[str, Any]:
    result = run_fleet(ARMS[arm](), settings.fleet(programs, seed))
    return _row(arm, seed, programs, round(settings.overload(programs), 3), result)


def _row(arm: str, seed: int, programs: int, overload: float, r: FleetResult) -> dict[str, Any]:
    held = [h for h in r.hold_s if h > 0]
    return {
        "arm": arm,
        "seed": seed,
        "programs": programs,
        "overload": overload,
        "steps_per_min": round(r.steps_per_min, 2),
        "step_p50_s": _round(percentile(r.step_latency_s, 50)),
        "step_p99_s": _round(percentile(r.step_latency_s, 99)),
        "hold_p99_s": _round(percentile(r.hold_s, 99)) if r.hold_s else 0.0,
        "hold_max_s": _round(max(r.hold_s, default=0.0)),
        "held_fraction": round(len(held) / len(r.hold_s), 4) if r.hold_s else 0.0,
        "held_p50_s": _round(percentile(held, 50)) if held else 0.0,
        "forced_admits": r.forced_admits,
        "reprefill_tokens": r.engine.reprefill_tokens,
        "prefill_tokens": r.engine.prefill_tokens,
        "decode_tokens": r.engine.decode_tokens,
        "migrations": r.migrations,
        "pauses": r.pauses,
        "restores": r.restores,
        "preemptions": r.preemptions,
        "gpu_busy": round(r.engine.busy_s / (r.window_s * r.backends), 4),
        "programs_completed": r.programs_completed,
    }


def _round(value: float) -> float:
    return round(value, 3) if math.isfinite(value) else value


def run_sweep(
    settings: SweepSettings, *, jobs: int = 1, show_progress: bool = True
) -> list[dict[str, Any]]:
    tasks = [
        (arm, programs, seed)
        for programs in settings.programs
        for seed in settings.seeds
        for arm in settings.arms
    ]
    return run_simulations(
        "fleet simulations",
        partial(run_one, settings),
        tasks,
        describe=lambda arm, programs, seed: f"{arm}, {programs} programs, seed {seed}",
        jobs=jobs,
        show_progress=show_progress,
    )


def run_simulations(
    title: str,
    simulate: Callable[..., dict[str, Any]],
    tasks: Sequence[tuple[Any, ...]],
    *,
    describe: Callable[..., str],
    jobs: int = 1,
    show_progress: bool = True,
) -> list[dict[str, Any]]:
    """`simulate(*task)` for every task, in order, in `jobs` processes (a picklable
    `simulate`), with a progress bar (`describe(*task)` names the running one when serial)."""
    rows: list[dict[str, Any]] = []
    with progress(disable=not show_progress) as bar:
        bar_task = bar.add_task(title, total=len(tasks))
        if jobs <= 1:
            for task in tasks:
                bar.update(bar_task, description=describe(*task))
                rows.append(simulate(*task))
                bar.advance(bar_task)
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                for future in [pool.submit(simulate, *task) for task in tasks]:
                    rows.append(future.result())
                    bar.advance(bar_task)
    return rows


# --- burst fairness ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BurstSettings:
    """`programs` new agent programs with first prompts of `prompt_tokens` arrive within
    `spread_s` at one backend whose KV holds 1 / `prompt_overload` of those first prompts, so
    that most of them queue at the router (the case where strict smallest-first admission
    starved long prompts upstream). The programs then run as in the sweep."""

    programs: int = 64
    prompt_tokens: tuple[int, int] = (1400, 8000)
    spread_s: float = 13.0
    prompt_overload: float = 2.2
    duration_s: float = 900.0
    seeds: tuple[int, ...] = (0, 1, 2)

    @property
    def kv_tokens(self) -> int:
        mean_prompt = (self.prompt_tokens[0] + self.prompt_tokens[1]) / 2
        return round(self.programs * mean_prompt / self.prompt_overload)


def run_burst(
    sweep: SweepSettings, burst: BurstSettings, *, show_progress: bool = True
) -> list[dict[str, Any]]:
    fleet = replace(
        sweep.fleet(burst.programs, 0),
        backends=1,
        kv_tokens_per_backend=burst.kv_tokens,
        duration_s=burst.duration_s,
        warmup_s=0.0,
        stationary_start=False,
        arrival_spread_s=burst.spread_s,
        workload=replace(sweep.workload, initial_tokens=burst.prompt_tokens),
    )
    rows: list[dict[str, Any]] = []
    with progress(disable=not show_progress) as bar:
        task = bar.add_task("burst fairness", total=len(BURST_ARMS) * len(burst.seeds))
        for arm, make in BURST_ARMS.items():
            for seed in burst.seeds:
                bar.update(task, description=f"burst, {arm}, seed {seed}")
                result = run_fleet(make(), replace(fleet, seed=seed))
                first = [f for f in result.first_responses if f.initial]
                sizes = [float(f.prompt_tokens) for f in first]
                waits = [f.responded_s - f.arrived_s for f in first]
                rows.append(
                    {
                        "arm": arm,
                        "seed": seed,
                        "programs_answered": len(first),
                        "spearman": _round(spearman(sizes, waits)),
                        "pearson": _round(pearson(sizes, waits)),
                        "first_response_p50_s": _round(percentile(waits, 50)),
                        "first_response_max_s": _round(max(waits, default=math.nan)),
                        "forced_admits": result.forced_admits,
                    }
                )
                bar.advance(task)
    return rows


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) < 2 or len(xs) != len(ys):
        return math.nan
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mean_x) ** 2 for x in xs)
    syy = sum((y - mean_y) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    return pearson(_ranks(xs), _ranks(ys))


def _ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


# --- sensitivity: what bounded holds cost in steps/min ------------------------------------


@dataclass(frozen=True, slots=True)
class SensitivitySettings:
    """Thunder over a grid of its trade-off knobs at the loads the targets judge: the aging
    bound (a request held that long may preempt acting programs) x the swap budget (how much
    re-prefill such preemption may cause) x the decay half-life; plus each `pause_orders` beyond
    the first at the default aging bound and budget. Each setting gets the two targets that pull
    against each other, per seed (`frontier`): hold p99 up to 2x and steps/min up to 3x against
    its own peak (the loads include the peak's, 64 programs). The defaults: half-life 1 s, aging
    40 s, budget 0.12, idle-longest pauses."""

    half_lives_s: tuple[float, ...] = (1.0,)
    aging_s: tuple[float, ...] = (20.0, 40.0, 60.0)
    swap_budgets: tuple[float, ...] = (0.06, 0.08, 0.10, 0.12, 0.16)
    pause_orders: tuple[PauseOrder, ...] = ("idle_longest", "smallest")
    programs: tuple[int, ...] = (64, 96, 128, 144, 160, 192, 216)

    def variants(self) -> list[dict[str, Any]]:
        grid = [
            {"decay_half_life_s": h, "aging_s": a, "swap_budget": b, "pause_order": order}
            for h in self.half_lives_s
            for a in self.aging_s
            for b in self.swap_budgets
            for order in self.pause_orders[:1]
        ]
        defaults = ThunderConfig()
        grid += [
            {
                "decay_half_life_s": defaults.decay_half_life_s,
                "aging_s": defaults.aging_s,
                "swap_budget": defaults.swap_budget,
                "pause_order": order,
            }
            for order in self.pause_orders[1:]
        ]
        return grid


def _run_knobs(
    sweep: SweepSettings, knobs: dict[str, Any], programs: int, seed: int
) -> dict[str, Any]:
    result = run_fleet(ThunderPolicy(ThunderConfig(**knobs)), sweep.fleet(programs, seed))
    row = _row("thunder", seed, programs, round(sweep.overload(programs), 3), result)
    return {**knobs, **row}


def run_sensitivity(
    sweep: SweepSettings,
    sensitivity: SensitivitySettings,
    *,
    jobs: int = 1,
    show_progress: bool = True,
) -> list[dict[str, Any]]:
    tasks = [
        (knobs, programs, seed)
        for knobs in sensitivity.variants()
        for programs in sensitivity.programs
        for seed in sweep.seeds
    ]
    return run_simulations(
        "thunder sensitivity",
        partial(_run_knobs, sweep),
        tasks,
        describe=lambda knobs, programs, seed: f"sensitivity {_knobs_label(knobs)}",
        jobs=jobs,
        show_progress=show_progress,
    )


def frontier(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per setting and seed of the sensitivity runs: the hold target (up to 2x), the collapse
    target (up to 3x, against the setting's own peak), the re-prefill at 2x, and whether both
    targets are met at once."""
    points: list[dict[str, Any]] = []
    for label in dict.fromkeys(_knobs_label(r) for r in rows):
        mine = [r for r in rows if _knobs_label(r) == label]
        knobs = {name: mine[0][name] for name in KNOBS}
        for seed in sorted({r["seed"] for r in mine}):
            runs = [r for r in mine if r["seed"] == seed]
            at_2x = [r for r in runs if math.isclose(r["overload"], 2.0, abs_tol=0.01)]
            hold, fall = holds(runs), collapse(runs)
            hold_ok, fall_ok = holds_met(hold), collapse_met(fall)
            points.append(
                {
                    **knobs,
                    "seed": seed,
                    **hold,
                    **fall,
                    "reprefill_tokens_at_2x": at_2x[0]["reprefill_tokens"] if at_2x else None,
                    "holds_met": hold_ok,
                    "collapse_met": fall_ok,
                    "both_met": hold_ok and fall_ok,
                }
            )
    return points


def _no_decay_rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sweep's thunder-no-decay runs with their knobs: the frontier's no-preemption end."""
    config = ThunderConfig(decay_half_life_s=0.0)
    knobs = {name: getattr(config, name) for name in KNOBS}
    return [{**knobs, **r} for r in runs if r["arm"] == "thunder-no-decay"]


# The thunder settings the sensitivity varies (each row and frontier point carries them).
KNOBS = ("decay_half_life_s", "aging_s", "swap_budget", "pause_order")


def _knobs_label(knobs: dict[str, Any]) -> str:
    return (
        f"half-life {knobs['decay_half_life_s']:g} s, aging {knobs['aging_s']:g} s, "
        f"budget {knobs['swap_budget']:g}, {knobs['pause_order']}"
    )


# --- policy tick cost --------------------------------------------------------------------------


class _TimedTicks:
    """Delegates to a policy and times its `tick` calls: wall clock, and this process's CPU time
    (what the tick itself costs, without other processes on a shared machine)."""

    def __init__(self, policy: RouterCore) -> None:
        self._policy = policy
        self.name = policy.name
        self.tick_ms: list[float] = []
        self.tick_cpu_ms: list[float] = []
        self.programs_at_tick: list[int] = []

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._policy, attribute)

    def tick(self, now_s: float) -> list[Any]:
        start, start_cpu = time.perf_counter(), time.process_time()
        decisions = self._policy.tick(now_s)
        self.tick_cpu_ms.append((time.process_time() - start_cpu) * 1e3)
        self.tick_ms.append((time.perf_counter() - start) * 1e3)
        self.programs_at_tick.append(len(self._policy.programs()))
        return decisions

    def metrics(self) -> RouterMetrics:
        return self._policy.metrics()


def measure_tick(
    sweep: SweepSettings, *, programs: int = 1000, backends: int = 8, duration_s: float = 120.0
) -> dict[str, Any]:
    """Wall time of a thunder policy's `tick` while the fleet simulation drives it with
    `programs` programs on `backends` backends, KV sized for the sweep's reference overload."""
    timed = _TimedTicks(ThunderPolicy(ThunderConfig()))
    demand = programs * sweep.workload.mean_resident_tokens()
    fleet = replace(
        sweep.fleet(programs, 0),
        backends=backends,
        kv_tokens_per_backend=round(demand / (sweep.reference_overload * backends)),
        duration_s=duration_s,
        warmup_s=duration_s / 4,
    )
    run_fleet(timed, fleet)
    wall = timed.tick_ms[5:]  # the first ticks run while the programs are still arriving
    cpu = timed.tick_cpu_ms[5:]
    return {
        "programs": programs,
        "backends": backends,
        "ticks": len(wall),
        "programs_in_table_min": min(timed.programs_at_tick[5:], default=0),
        "tick_p50_ms": _round(percentile(wall, 50)),
        "tick_p99_ms": _round(percentile(wall, 99)),
        "tick_max_ms": _round(max(wall, default=math.nan)),
        "tick_cpu_p50_ms": _round(percentile(cpu, 50)),
        "tick_cpu_p99_ms": _round(percentile(cpu, 99)),
        "tick_cpu_max_ms": _round(max(cpu, default=math.nan)),
    }


# --- targets -----------------------------------------------------------------------------------


COLLAPSE_TARGET = "steps/min >= 0.9 x thunder's own peak at every load up to 3x"
HOLDS_TARGET = "no forced admits and hold p99 <= 60 s at every load up to 2x"


def collapse(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One seed's runs of one policy over loads: its peak steps/min, and the worst load from
    the peak's up to 3x against it (ties go to the lighter load, whatever the rows' order)."""
    rows = sorted(rows, key=lambda r: r["overload"])
    peak = max(rows, key=lambda r: r["steps_per_min"])
    after = [r for r in rows if peak["overload"] <= r["overload"] <= 3.0 + 1e-9]
    worst = min(after, key=lambda r: r["steps_per_min"])
    return {
        "peak_programs": peak["programs"],
        "peak_steps_per_min": peak["steps_per_min"],
        "worst_programs": worst["programs"],
        "worst_over_peak": round(worst["steps_per_min"] / peak["steps_per_min"], 3),
    }


def collapse_met(value: dict[str, Any]) -> bool:
    return bool(value["worst_over_peak"] >= 0.9)


def holds(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One seed's runs of one policy over loads: forced admits and the worst hold p99 up to 2x."""
    bounded = [r for r in rows if r["overload"] <= 2.0 + 1e-9]
    return {
        "forced_admits": sum(r["forced_admits"] for r in bounded),
        "worst_hold_p99_s": max((r["hold_p99_s"] for r in bounded), default=0.0),
    }


def holds_met(value: dict[str, Any]) -> bool:
    return value["forced_admits"] == 0 and value["worst_hold_p99_s"] <= 60


def evaluate_targets(
    runs: list[dict[str, Any]],
    burst: list[dict[str, Any]],
    tick: dict[str, Any] | None,
) -> dict[str, Any]:
    """The issue's targets, checked against the measured runs (per seed)."""
    by_key = {(r["arm"], r["seed"], r["programs"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    overloads = {r["programs"]: r["overload"] for r in runs}
    targets: dict[str, Any] = {}

    def programs_at(overload: float) -> int | None:
        matches = [p for p, o in overloads.items() if math.isclose(o, overload, abs_tol=0.01)]
        return matches[0] if matches else None

    def spm(arm: str, seed: int, programs: int) -> float | None:
        row = by_key.get((arm, seed, programs))
        return None if row is None else row["steps_per_min"]

    at_2x, at_half = programs_at(2.0), programs_at(0.5)
    if at_2x is not None:
        per_seed = {}
        for seed in seeds:
            thunder = spm("thunder", seed, at_2x)
            baselines = [v for a in BASELINES if (v := spm(a, seed, at_2x)) is not None]
            if thunder is not None and baselines:
                per_seed[seed] = round(thunder / max(baselines), 3)
        targets["thunder_over_best_baseline_at_2x"] = {
            "target": ">= 1.5 on every seed",
            "per_seed": per_seed,
            "met": bool(per_seed) and all(v >= 1.5 for v in per_seed.values()),
        }
        ablations: dict[str, Any] = {}
        for arm in ("thunder-no-queue", "thunder-no-decay"):
            ratios = {}
            for seed in seeds:
                thunder, ablated = spm("thunder", seed, at_2x), spm(arm, seed, at_2x)
                if thunder is not None and ablated is not None and thunder > 0:
                    ratios[seed] = round(ablated / thunder, 3)
            ablations[arm] = {
                "steps_per_min_vs_thunder": ratios,
                "costs_steps_per_min": bool(ratios) and all(v < 1.0 for v in ratios.values()),
            }
        targets["ablations_at_2x"] = {"target": "each ablation < thunder", **ablations}
    thunder_rows = [r for r in runs if r["arm"] == "thunder"]
    if thunder_rows:
        per_seed_collapse = {
            seed: collapse([r for r in thunder_rows if r["seed"] == seed]) for seed in seeds
        }
        targets["no_collapse_up_to_3x"] = {
            "target": COLLAPSE_TARGET,
            "per_seed": per_seed_collapse,
            "met": all(collapse_met(v) for v in per_seed_collapse.values()),
        }
        per_seed_holds = {
            seed: holds([r for r in thunder_rows if r["seed"] == seed]) for seed in seeds
        }
        targets["holds_up_to_2x"] = {
            "target": HOLDS_TARGET,
            "per_seed": per_seed_holds,
            "met": all(holds_met(v) for v in per_seed_holds.values()),
        }
    if at_half is not None:
        per_seed_half = {}
        for seed in seeds:
            thunder, session = spm("thunder", seed, at_half), spm("session", seed, at_half)
            if thunder is not None and session:
                per_seed_half[seed] = round(thunder / session, 3)
        targets["half_load_vs_session"] = {
            "target": "thunder within 5% of session affinity at 0.5x load",
            "per_seed": per_seed_half,
            "met": bool(per_seed_half) and all(v >= 0.95 for v in per_seed_half.values()),
        }
    thunder_burst = [r for r in burst if r["arm"] == "thunder"]
    if thunder_burst:
        targets["burst_fairness"] = {
            "target": "correlation of prompt size with time to first response <= 0.3",
            "per_seed": {
                r["seed"]: {"spearman": r["spearman"], "pearson": r["pearson"]}
                for r in thunder_burst
            },
            "met": all(r["spearman"] <= 0.3 and r["pearson"] <= 0.3 for r in thunder_burst),
        }
    if tick is not None:
        targets["policy_tick"] = {
            "target": "a tick <= 5 ms at 1,000 programs x 8 backends (p99 of its CPU time)",
            "tick_cpu_p99_ms": tick["tick_cpu_p99_ms"],
            # Wall time also counts whatever else the machine ran meanwhile.
            "tick_wall_p99_ms": tick["tick_p99_ms"],
            "met": tick["tick_cpu_p99_ms"] <= 5.0,
        }
    return targets


# --- output ------------------------------------------------------------------------------------


def plot_sweep(path: str | Path, runs: list[dict[str, Any]], settings: SweepSettings) -> None:
    figure, axes = new_figure(1, 1, size=(9, 5))
    axis = axes[0][0]
    for arm in settings.arms:
        by_programs: dict[int, list[float]] = {}
        for r in runs:
            if r["arm"] == arm:
                by_programs.setdefault(r["programs"], []).append(r["steps_per_min"])
        xs = sorted(by_programs)
        means = [statistics.fmean(by_programs[x]) for x in xs]
        line = axis.plot(xs, means, marker="o", label=arm)[0]
        axis.fill_between(
            xs,
            [min(by_programs[x]) for x in xs],
            [max(by_programs[x]) for x in xs],
            color=line.get_color(),
            alpha=0.15,
        )
    at_capacity = settings.reference_programs / settings.reference_overload
    axis.axvline(at_capacity, color="grey", linestyle=":", label="demand = KV")
    axis.set_xlabel("agent programs (closed loop)")
    axis.set_ylabel("steps / min (mean over seeds; band: min-max)")
    axis.set_title(
        f"fleet simulation: {settings.backends} backends, {settings.profile}, "
        f"KV = demand of {at_capacity:g} programs"
    )
    axis.legend()
    save_figure(figure, path)


def plot_frontier(path: str | Path, points: Sequence[dict[str, Any]]) -> None:
    """Each thunder setting and seed as a point: hold p99 up to 2x against the worst load up to
    3x over its own peak, with the region where both targets hold shaded. Settings without
    preemption (decay off) wait minutes: they sit at the right edge, their holds written out."""
    figure, axes = new_figure(1, 1, size=(11, 5))
    axis = axes[0][0]
    axis.fill_between([0, 60], 0.9, 1.0, color="tab:green", alpha=0.12, label="both targets met")
    preempting = [p for p in points if p["decay_half_life_s"] > 0]
    budgets = sorted({p["swap_budget"] for p in preempting})
    markers = dict(zip(sorted({p["aging_s"] for p in preempting}), "osD^v<>", strict=False))
    colors = {budget: f"C{i}" for i, budget in enumerate(budgets)}
    right = 1.15 * max((p["worst_hold_p99_s"] for p in preempting), default=60.0)
    seen: set[str] = set()
    for point in preempting:
        label = f"budget {point['swap_budget']:g}, aging {point['aging_s']:g} s"
        smallest = point["pause_order"] != "idle_longest"
        label += f", {point['pause_order']} pauses" if smallest else ""
        axis.scatter(
            point["worst_hold_p99_s"],
            point["worst_over_peak"],
            color=colors[point["swap_budget"]],
            marker="x" if smallest else markers[point["aging_s"]],
            label=None if label in seen else label,
        )
        seen.add(label)
    waiting = [p for p in points if p["decay_half_life_s"] == 0]
    if waiting:
        axis.scatter(
            [right] * len(waiting),
            [p["worst_over_peak"] for p in waiting],
            color="black",
            marker=">",
            label="no preemption (decay off), holds written beside",
        )
        for point in waiting:
            axis.annotate(
                f"{point['worst_hold_p99_s']:.0f} s",
                (right, point["worst_over_peak"]),
                textcoords="offset points",
                xytext=(-34, -3),
                fontsize="x-small",
            )
    axis.set_xlabel("hold p99 at loads up to 2x (s, worst load of the seed)")
    axis.set_ylabel("steps/min at the worst load up to 3x / own peak")
    axis.set_title("thunder settings: bounded holds against no collapse (one point per seed)")
    axis.set_xlim(0, right * 1.03)
    axis.set_ylim(top=1.0)
    axis.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save_figure(figure, path)


def frontier_plot_path(plot_path: str | Path) -> Path:
    path = Path(plot_path)
    return path.with_name(f"{path.stem}_frontier{path.suffix or '.png'}")


def _table(runs: list[dict[str, Any]], arms: Sequence[str]) -> Any:
    from rich.table import Table

    table = Table(title="steps/min (mean over seeds) and hold p99 (s), fleet simulation")
    table.add_column("programs", justify="right")
    table.add_column("overload", justify="right")
    for arm in arms:
        table.add_column(arm, justify="right")
    for programs in sorted({r["programs"] for r in runs}):
        rows = [r for r in runs if r["programs"] == programs]
        cells = []
        for arm in arms:
            mine = [r for r in rows if r["arm"] == arm]
            if not mine:
                cells.append("-")
                continue
            mean = statistics.fmean(r["steps_per_min"] for r in mine)
            hold = max(r["hold_p99_s"] for r in mine)
            cells.append(f"{mean:.0f}" + (f" ({hold:.0f})" if hold > 0 else ""))
        table.add_row(str(programs), f"{rows[0]['overload']:.2f}", *cells)
    return table


def _sensitivity_table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="thunder: steps/min (mean) / worst hold p99 (s) / forced admits")
    table.add_column("settings")
    points = sorted({(r["programs"], r["overload"]) for r in rows})
    for programs, overload in points:
        table.add_column(f"{programs} ({overload:.2f}x)", justify="right")
    labels = list(dict.fromkeys(_knobs_label(r) for r in rows))
    for label in labels:
        cells = []
        for programs, _ in points:
            mine = [r for r in rows if _knobs_label(r) == label and r["programs"] == programs]
            mean = statistics.fmean(r["steps_per_min"] for r in mine)
            hold = max(r["hold_p99_s"] for r in mine)
            forced = sum(r["forced_admits"] for r in mine)
            cells.append(f"{mean:.0f} / {hold:.0f} / {forced}")
        table.add_row(label, *cells)
    return table


def _frontier_table(points: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="thunder settings: both targets at once, per seed")
    for name in ("settings", "seed", "hold p99 up to 2x (s)", "worst / peak up to 3x", "both"):
        table.add_column(name, justify="left" if name == "settings" else "right")
    for point in points:
        table.add_row(
            _knobs_label(point),
            str(point["seed"]),
            f"{point['worst_hold_p99_s']:.0f}",
            f"{point['worst_over_peak']:.3f}",
            "yes" if point["both_met"] else "no",
        )
    return table


def run_router_bench(
    mode: str = "sim",
    json_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    *,
    settings: SweepSettings | None = None,
    burst: BurstSettings | None = BurstSettings(),
    tick: bool = True,
    sensitivity: SensitivitySettings | None = None,
    jobs: int = 1,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Run the sweep (+ burst, + tick cost), return the JSON document; write it and the plot
    when paths are given."""
    if mode != "sim":
        raise ValueError(
            f"run_router_bench runs the simulation (mode 'sim'), got {mode!r}: the other modes are "
            "router_overhead.run_overhead and router_engine.run_engine_bench"
        )
    settings = SweepSettings() if settings is None else settings
    started = time.perf_counter()
    runs = run_sweep(settings, jobs=jobs, show_progress=show_progress)
    burst_rows = run_burst(settings, burst, show_progress=show_progress) if burst else []
    tick_row = measure_tick(settings) if tick else None
    sensitivity_rows = (
        run_sensitivity(settings, sensitivity, jobs=jobs, show_progress=show_progress)
        if sensitivity
        else []
    )
    document: dict[str, Any] = {
        "mode": mode,
        "setup": _setup(settings, burst, time.perf_counter() - started),
        "runs": runs,
        "burst": burst_rows,
        "tick": tick_row,
        "sensitivity": sensitivity_rows,
        "frontier": frontier(_no_decay_rows(runs) + sensitivity_rows) if sensitivity else [],
        "targets": evaluate_targets(runs, burst_rows, tick_row),
    }
    if json_path:
        write_json(json_path, document)
    if plot_path:
        plot_sweep(plot_path, runs, settings)
        if document["frontier"]:
            plot_frontier(frontier_plot_path(plot_path), document["frontier"])
    return document


def _setup(settings: SweepSettings, burst: BurstSettings | None, wall_s: float) -> dict[str, Any]:
    import platform

    workload = settings.workload
    return {
        "simulator": "lookahead_sdk.router.fleet_sim (virtual time; policy core unchanged)",
        "profile": settings.profile,
        "backends": settings.backends,
        "kv_tokens_per_backend": settings.kv_tokens_per_backend,
        "mean_resident_tokens_per_program": round(workload.mean_resident_tokens(), 1),
        "kv_sizing": (
            f"{settings.reference_programs} programs demand {settings.reference_overload}x "
            "the fleet's KV (overload = programs x mean resident tokens / total KV)"
        ),
        "duration_s": settings.duration_s,
        "warmup_s": settings.warmup_s,
        "seeds": list(settings.seeds),
        "workload": {
            "steps": list(workload.steps),
            "initial_tokens": list(workload.initial_tokens),
            "decode_tokens": list(workload.decode_tokens),
            "tool_output_tokens": list(workload.tool_output_tokens),
            "tool_time": f"lognormal, median {workload.tool_median_s} s, sigma {workload.tool_sigma}",
        },
        "thunder_config": {
            name: getattr(ThunderConfig(), name) for name in ThunderConfig.__dataclass_fields__
        },
        "burst": None
        if burst is None
        else {
            "programs": burst.programs,
            "prompt_tokens": list(burst.prompt_tokens),
            "spread_s": burst.spread_s,
            "kv_tokens": burst.kv_tokens,
            "duration_s": burst.duration_s,
            "seeds": list(burst.seeds),
        },
        "python": platform.python_version(),
        "wall_s": round(wall_s, 1),
    }


# --- command line ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mode",
        choices=("sim", "overhead", "engine"),
        default="sim",
        help="sim: the fleet simulation sweep; overhead: the HTTP router's added TTFT; engine: "
        "reference agents on two embedded llama-servers through `router serve`, per policy",
    )
    parser.add_argument("--json", type=output_file, required=True, metavar="PATH")
    parser.add_argument("--plot", type=output_file, metavar="PATH")
    parser.add_argument(
        "--programs", type=comma_list(positive_int),
        help="sim: program counts to sweep (default "
        f"{','.join(map(str, DEFAULT_PROGRAMS))}); engine: one count (default "
        f"{router_engine.EngineBenchSettings().programs})",
    )  # fmt: skip
    parser.add_argument(
        "--seeds", type=comma_list(non_negative_int),
        help="sim: seeds (default 0,1,2); engine: one seed, program i runs seed + i (default 0)",
    )  # fmt: skip
    parser.add_argument(
        "--arms", type=comma_list(one_of(ARMS)),
        help=f"sim: default all ({','.join(ARMS)}); engine: router policies (default "
        f"{','.join(router_engine.DEFAULT_ARMS)})",
    )  # fmt: skip
    group = parser.add_argument_group("--mode sim")
    group.add_argument("--profile", type=latency_profile, default="h200-qwen3-8b")
    group.add_argument("--duration-s", type=positive_float, default=600.0)
    group.add_argument("--warmup-s", type=non_negative_float, default=120.0)
    group.add_argument(
        "--jobs", type=positive_int, default=1, help="simulations in parallel processes"
    )
    group.add_argument("--no-burst", action="store_true", help="skip the burst-fairness runs")
    group.add_argument("--no-tick", action="store_true", help="skip the tick-cost measurement")
    group.add_argument(
        "--sensitivity",
        action="store_true",
        help="also run thunder over a grid of aging bounds x swap budgets (and the upstream "
        "pause order) at 64-216 programs: each setting's hold p99 up to 2x against its "
        "steps/min up to 3x over its own peak (JSON `frontier`; with --plot also "
        "<plot>_frontier.png)",
    )
    router_overhead.add_arguments(parser)
    router_engine.add_arguments(parser)


def main(args: argparse.Namespace) -> int:
    if args.mode == "overhead":
        return router_overhead.main(args)
    if args.mode == "engine":
        return router_engine.main(args)
    from rich.console import Console

    arms = args.arms or tuple(ARMS)
    settings = SweepSettings(
        programs=args.programs or DEFAULT_PROGRAMS,
        seeds=args.seeds or (0, 1, 2),
        arms=tuple(dict.fromkeys(arms)),
        profile=args.profile,
        duration_s=args.duration_s,
        warmup_s=args.warmup_s,
    )
    document = run_router_bench(
        args.mode,
        args.json,
        args.plot,
        settings=settings,
        burst=None if args.no_burst else BurstSettings(seeds=settings.seeds),
        tick=not args.no_tick,
        sensitivity=SensitivitySettings() if args.sensitivity else None,
        jobs=args.jobs,
    )
    console = Console()
    console.print(_table(document["runs"], settings.arms))
    if document["sensitivity"]:
        console.print(_sensitivity_table(document["sensitivity"]))
        console.print(_frontier_table(document["frontier"]))
    for name, target in document["targets"].items():
        verdict = {True: "met", False: "NOT met"}.get(target.get("met"), "see JSON")
        console.print(f"{name}: {verdict}  ({target['target']})")
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "router", help="program-aware routing: steps/min vs programs, thunder vs baselines"
    )
    add_arguments(parser)
    parser.set_defaults(func=main)

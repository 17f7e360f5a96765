"""`lookahead-sdk bench slo` (paper Fig. 14): LC TTFT p99 and TBT p95 vs best-effort load, vanilla
(BE treated like LC: FCFS, token-budget chunks) vs lookahead-aware hybrid batching, plus the share
of lookahead warm-ups done before their commit deadline. In-process simulator, virtual time."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lookahead_sdk.base.args import (
    add_be_batching,
    be_batching,
    comma_list,
    non_negative_float,
    output_file,
    positive_float,
    positive_int,
)
from lookahead_sdk.bench.common import (
    compact_table,
    new_figure,
    percentile,
    progress,
    save_figure,
    write_json,
)
from lookahead_sdk.scheduling.admission import HybridConfig
from lookahead_sdk.scheduling.latency_model import LatencyProfile
from lookahead_sdk.scheduling.profiles import latency_profile, load_profile
from lookahead_sdk.sim.cluster import ClusterConfig, PolicyName, SimCluster
from lookahead_sdk.sim.ground_truth import GpuLikeTruth
from lookahead_sdk.sim.simulation import Simulation
from lookahead_sdk.sim.workloads import SloWorkload

SLO_TTFT_MS = 500.0
SLO_TBT_MS = 50.0
DEFAULT_BE_LOADS = (
    0.0,
    2.0,
    4.0,
    5.0,
    6.0,
    7.0,
    8.0,
    9.0,
    10.0,
    11.0,
    12.0,
    13.0,
    14.0,
    15.0,
    16.0,
)
POLICY_KEYS: dict[PolicyName, str] = {"vanilla": "vanilla", "lookahead": "lookahead_aware"}


@dataclass(slots=True)
class SloPoint:
    lc_ttft_ms: list[float] = field(default_factory=list)
    tbt_ms: list[float] = field(default_factory=list)
    lookaheads: int = 0
    lookaheads_on_time: int = 0
    be_prefill_tokens: int = 0
    late_be_prefill_tokens: int = 0

    @property
    def ttft_p99_ms(self) -> float:
        return percentile(self.lc_ttft_ms, 99)

    @property
    def tbt_p95_ms(self) -> float:
        return percentile(self.tbt_ms, 95)

    @property
    def on_time_frac(self) -> float:
        return self.lookaheads_on_time / self.lookaheads if self.lookaheads else 1.0

    @property
    def waste_frac(self) -> float:
        """Share of BE prefill spent on lookaheads that missed their deadline."""
        return (
            self.late_be_prefill_tokens / self.be_prefill_tokens if self.be_prefill_tokens else 0.0
        )

    def meets_slo(self) -> bool:
        return self.ttft_p99_ms <= SLO_TTFT_MS and self.tbt_p95_ms <= SLO_TBT_MS


def simulate_point(
    profile: LatencyProfile,
    policy: PolicyName,
    workload: SloWorkload,
    be_rate_per_s: float,
    *,
    kv_tokens: int,
    hybrid: HybridConfig,
) -> SloPoint:
    config = ClusterConfig(mode="colocated", policy=policy, kv_tokens=kv_tokens, hybrid=hybrid)
    cluster = SimCluster(profile, config, truth=GpuLikeTruth(profile, seed=workload.seed))
    simulation = Simulation(cluster)
    requests = workload.requests(be_rate_per_s)
    for request in requests:
        simulation.submit_at(request)
    simulation.run()
    point = SloPoint()
    measured_from_ms = workload.warmup_s * 1000.0
    for request in requests:
        if request.arrival_ms < measured_from_ms:
            continue
        if request.tags.is_lookahead:
            computed = request.prompt_tokens - request.cached_tokens
            deadline = request.commit_deadline_abs_ms
            on_time = request.finish_ms is not None and (
                deadline is None or request.finish_ms <= deadline
            )
            point.lookaheads += 1
            point.lookaheads_on_time += on_time
            point.be_prefill_tokens += computed
            point.late_be_prefill_tokens += 0 if on_time else computed
            continue
        times = request.token_times_ms
        point.lc_ttft_ms.append(times[0] - request.arrival_ms)
        point.tbt_ms.extend(b - a for a, b in itertools.pairwise(times))
    return point


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "slo",
        help="paper Fig. 14: LC TTFT/TBT vs best-effort load, vanilla vs lookahead-aware (simulated)",
    )
    parser.add_argument("--json", type=output_file, required=True, metavar="PATH")
    parser.add_argument("--plot", type=output_file, metavar="PATH")
    parser.add_argument("--profile", type=latency_profile, default="h100-qwen3-8b")
    parser.add_argument(
        "--be-loads",
        type=comma_list(non_negative_float),
        default=DEFAULT_BE_LOADS,
        metavar="R,R,...",
        help="best-effort lookahead warm-ups per second, comma-separated",
    )
    parser.add_argument("--duration-s", type=positive_float, default=SloWorkload().duration_s)
    parser.add_argument("--lc-rate", type=positive_float, default=SloWorkload().lc_rate_per_s)
    parser.add_argument("--kv-tokens", type=positive_int, default=400_000)
    parser.add_argument(
        "--tbt-bound-ms",
        type=positive_float,
        default=0.9 * SLO_TBT_MS,
        help="the lookahead-aware scheduler's Est bound (below the SLO: margin for model error)",
    )
    add_be_batching(parser, HybridConfig())
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console()
    profile = load_profile(args.profile)
    loads = list(args.be_loads)
    workload = replace(
        SloWorkload(), duration_s=args.duration_s, lc_rate_per_s=args.lc_rate, seed=args.seed
    )
    hybrid = HybridConfig(tbt_bound_ms=args.tbt_bound_ms, **be_batching(args))
    points: dict[PolicyName, list[SloPoint]] = {"vanilla": [], "lookahead": []}
    with progress() as bar:
        task = bar.add_task("simulating load points", total=2 * len(loads))
        for load in loads:
            for policy in points:
                points[policy].append(
                    simulate_point(
                        profile,
                        policy,
                        workload,
                        load,
                        kv_tokens=args.kv_tokens,
                        hybrid=hybrid,
                    )
                )
                bar.advance(task)
    document: dict[str, Any] = {
        "slo_ttft_ms": int(SLO_TTFT_MS),
        "slo_tbt_ms": int(SLO_TBT_MS),
        "hybrid": dataclasses.asdict(hybrid),
        "be_loads": loads,
        **{
            POLICY_KEYS[policy]: {
                "lc_ttft_p99_ms": [p.ttft_p99_ms for p in series],
                "tbt_p95_ms": [p.tbt_p95_ms for p in series],
                "lookahead_on_time_frac": [p.on_time_frac for p in series],
                "lookahead_waste_frac": [p.waste_frac for p in series],
                "lookaheads": [p.lookaheads for p in series],
            }
            for policy, series in points.items()
        },
    }
    write_json(args.json, document)
    console.print(_table(loads, points))
    console.print(verdict(document))
    if args.plot:
        _plot(args.plot, loads, points)
    return 0


def verdict(document: dict[str, Any]) -> str:
    """The run's verdict on the target, from its JSON (the rule: `report_scheduling.slo_verdict`,
    which the docs' tables use too)."""
    from lookahead_sdk.bench.report_scheduling import slo_verdict

    result = slo_verdict(document)
    loads = result.loads

    def load(index: int | None) -> float | None:
        return None if index is None else loads[index]

    if result.vanilla_break is None:
        return f"vanilla met both SLOs at every load (up to {loads[-1]}/s): raise --be-loads"
    vanilla_break = loads[result.vanilla_break]
    return (
        f"vanilla breaks the SLOs at {vanilla_break:g}/s; lookahead-aware holds them up to "
        f"{load(result.slo_held)}/s, and with >= 90% of lookaheads on time up to "
        f"{load(result.held)}/s (target >= 2x = {2 * vanilla_break:g}/s: "
        f"{'met' if result.met else 'NOT met'})"
    )


def _table(loads: list[float], points: dict[PolicyName, list[SloPoint]]) -> Table:
    table = compact_table(
        "LC SLOs vs best-effort load (simulated, co-located)",
        ("BE/s", "policy", "TTFT p99 ms", "TBT p95 ms", "on time", "waste", "LC reqs"),
    )
    for index, load in enumerate(loads):
        for policy, series in points.items():
            p = series[index]
            table.add_row(
                f"{load:g}",
                POLICY_KEYS[policy],
                f"{p.ttft_p99_ms:.0f}",
                f"{p.tbt_p95_ms:.1f}",
                f"{p.on_time_frac:.1%}",
                f"{p.waste_frac:.1%}",
                str(len(p.lc_ttft_ms)),
            )
    return table


def _plot(path: str | Path, loads: list[float], points: dict[PolicyName, list[SloPoint]]) -> None:
    figure, axes = new_figure(1, 3, size=(14, 4))
    panels = (
        ("LC TTFT p99 (ms)", lambda p: p.ttft_p99_ms, SLO_TTFT_MS),
        ("TBT p95 (ms)", lambda p: p.tbt_p95_ms, SLO_TBT_MS),
        ("lookaheads on time", lambda p: p.on_time_frac, 0.9),
    )
    for axis, (title, value, line) in zip(axes[0], panels, strict=True):
        for policy, series in points.items():
            axis.plot(loads, [value(p) for p in series], marker="o", label=POLICY_KEYS[policy])
        axis.axhline(line, color="grey", linestyle="--", linewidth=1)
        axis.set_xlabel("best-effort warm-ups per second")
        axis.set_title(title)
        if "ms" in title:
            axis.set_yscale("log")
    axes[0][0].legend()
    save_figure(figure, path)

"""The transform-turn TTFT targets, judged per run, with a pool of several runs beside them.

A target counts as met per run. A run of one agent has 2-4 transform turns per strategy and a
run of four agents 8-15, so one run's p50 moves by a few tenths of a second on a shared CPU;
the pooled row (the p50 of the union of the runs' raw lists, sync and lookahead from the same
runs, so the ratio stays side by side) shows where the runs centre, never in place of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from lookahead_sdk.bench.common import compact_table, p50
from lookahead_sdk.strategies import Isolate, KeepRecent, Offload, Summarize

RATIO_TARGET = 0.35  # lookahead T p50 <= 0.35 x sync T p50, per strategy
TRANSFORM_VS_NORMAL_TARGET = 1.5  # lookahead T p50 <= 1.5 x lookahead N p50 (physical limit)
MEAN_REDUCTION_TARGET = 0.70  # mean over strategies of 1 - lookahead T / sync T
# The whole run (a gain on the transform turn must not hide a loss elsewhere):
NORMAL_RATIO_TARGET = 1.10  # lookahead N p50 <= 1.10 x sync N p50
WALL_RATIO_TARGET = 1.02  # lookahead run's wall time <= 1.02 x sync's
# Commits: as many as sync's per run, each leaving a context within one turn of sync's.
# Burst commit turns: a commit whose turn brought an output this many times a normal turn's
# (the median new tokens of the synchronous run's normal turns), judged on their own.
BURST_FACTOR = 2.0
BURST_RATIO_TARGET = 0.6  # lookahead burst T p50 <= 0.6 x sync burst T p50
# A spawning strategy's transform turn is a sub-agent's first call, whose new tokens are its
# whole context: no burst, whatever its size.
SPAWNING = frozenset(
    policy.name
    for policy in (Offload, KeepRecent, Summarize, Isolate)
    if policy.commit_mode == "spawn"
)
FEW_TURNS = 5  # a p50 of fewer turns than this is marked

Labelled = tuple[str, dict[str, Any]]  # (a run's label, its `bench ttft` document)


@dataclass
class TurnLists:
    """The raw lists one strategy contributes, from one run or pooled over several."""

    sync_transform: list[float] = field(default_factory=list)
    lookahead_transform: list[float] = field(default_factory=list)
    lookahead_normal: list[float] = field(default_factory=list)

    def add(self, strategy: dict[str, Any]) -> None:
        self.sync_transform += strategy["sync"]["transform_ttft_s"]
        self.lookahead_transform += strategy["lookahead"]["transform_ttft_s"]
        self.lookahead_normal += strategy["lookahead"]["normal_ttft_s"]

    @property
    def turns(self) -> int:
        return min(len(self.sync_transform), len(self.lookahead_transform))

    @property
    def turns_label(self) -> str:
        """Transform turns of the sync / lookahead runs (the lookahead run may commit more)."""
        return f"{len(self.sync_transform)}/{len(self.lookahead_transform)}"

    @classmethod
    def of(cls, strategy: dict[str, Any]) -> TurnLists:
        lists = cls()
        lists.add(strategy)
        return lists

    @property
    def ratio(self) -> float:
        """look T / sync T (p50s); NaN where a side has no turns."""
        return safe_ratio(p50(self.lookahead_transform), p50(self.sync_transform))

    @property
    def transform_vs_normal(self) -> float:
        """look T / look N (p50s); NaN where a side has no turns."""
        return safe_ratio(p50(self.lookahead_transform), p50(self.lookahead_normal))


@dataclass(frozen=True)
class TargetRow:
    run: str
    strategy: str
    turns: int
    turns_label: str
    ratio: float
    transform_vs_normal: float
    pooled: bool = False

    @property
    def ratio_met(self) -> bool:
        return self.ratio <= RATIO_TARGET

    @property
    def transform_vs_normal_met(self) -> bool:
        return self.transform_vs_normal <= TRANSFORM_VS_NORMAL_TARGET


# What makes two runs repeats of one measurement (and so poolable): the workload and the engine.
SETUP_FIELDS = (
    "engine", "engine_threads", "model", "agents", "steps", "isolate_steps", "window_tokens",
    "warmer", "max_tokens", "tool_latency_s", "tool_output_tokens", "large_output_every", "gate",
    "small_batches", "warm_up_batch_tokens",
)  # fmt: skip


def setup_of(document: dict[str, Any]) -> tuple[str, ...]:
    return tuple(repr(document.get(field)) for field in SETUP_FIELDS)


def target_rows(runs: Sequence[Labelled]) -> list[TargetRow]:
    """One row per run and strategy, then a pooled row for each strategy measured in several
    runs of the same setup (`SETUP_FIELDS`): runs of different setups are never pooled."""
    rows: list[TargetRow] = []
    pooled: dict[tuple[str, tuple[str, ...]], TurnLists] = {}
    pooled_runs: dict[tuple[str, tuple[str, ...]], int] = {}
    for label, document in runs:
        setup = setup_of(document)
        for name, strategy in document["strategies"].items():
            lists = TurnLists.of(strategy)
            rows.append(
                TargetRow(
                    label,
                    name,
                    lists.turns,
                    lists.turns_label,
                    lists.ratio,
                    lists.transform_vs_normal,
                )
            )
            pooled.setdefault((name, setup), TurnLists()).add(strategy)
            pooled_runs[name, setup] = pooled_runs.get((name, setup), 0) + 1
    rows += [
        TargetRow(
            f"pool of {pooled_runs[key]}",
            key[0],
            lists.turns,
            lists.turns_label,
            lists.ratio,
            lists.transform_vs_normal,
            pooled=True,
        )
        for key, lists in pooled.items()
        if pooled_runs[key] > 1
    ]
    return rows


def mean_reduction(document: dict[str, Any]) -> float:
    reductions = []
    for strategy in document["strategies"].values():
        lists = TurnLists()
        lists.add(strategy)
        reductions.append(1 - lists.ratio)
    return sum(reductions) / len(reductions)


@dataclass(frozen=True)
class WholeRunRow:
    """One run of one strategy as a whole: its normal turns, every TTFT summed, its wall time."""

    run: str
    strategy: str
    normal_ratio: float
    sync_ttft_sum_s: float
    lookahead_ttft_sum_s: float
    wall_ratio: float
    # With repeated runs (`--repeats`): each repeat's look/sync wall ratio, in run order.
    wall_ratio_each: tuple[float, ...] = ()

    @property
    def normal_ratio_met(self) -> bool:
        return self.normal_ratio <= NORMAL_RATIO_TARGET

    @property
    def ttft_sum_met(self) -> bool:
        return self.lookahead_ttft_sum_s < self.sync_ttft_sum_s

    @property
    def wall_ratio_met(self) -> bool | None:
        return None if math.isnan(self.wall_ratio) else self.wall_ratio <= WALL_RATIO_TARGET


def whole_run_rows(runs: Sequence[Labelled]) -> list[WholeRunRow]:
    rows = []
    for label, document in runs:
        for name, strategy in document["strategies"].items():
            sync, look = strategy["sync"], strategy["lookahead"]
            rows.append(
                WholeRunRow(
                    label,
                    name,
                    p50(look["normal_ttft_s"]) / p50(sync["normal_ttft_s"]),
                    sum(sync["transform_ttft_s"]) + sum(sync["normal_ttft_s"]),
                    sum(look["transform_ttft_s"]) + sum(look["normal_ttft_s"]),
                    safe_ratio(look.get("wall_s"), sync.get("wall_s")),
                    tuple(
                        safe_ratio(look_s, sync_s)
                        for look_s, sync_s in zip(
                            look.get("wall_s_each", ()), sync.get("wall_s_each", ()), strict=False
                        )
                    )
                    if look.get("repeats", 1) > 1
                    else (),
                )
            )
    return rows


@dataclass(frozen=True)
class CommitSizeRow:
    """One run of one strategy: how many commits each mode made and the p50 context they left
    (None for runs recorded before contexts were), against one turn (the largest new tokens a
    turn brought in either run)."""

    run: str
    strategy: str
    sync_commits: int
    lookahead_commits: int
    sync_context_p50: float | None
    lookahead_context_p50: float | None
    one_turn_tokens: int

    @property
    def commits_met(self) -> bool:
        return self.sync_commits == self.lookahead_commits

    @property
    def context_met(self) -> bool | None:
        if self.sync_context_p50 is None or self.lookahead_context_p50 is None:
            return None
        return abs(self.lookahead_context_p50 - self.sync_context_p50) <= self.one_turn_tokens


def commit_size_rows(runs: Sequence[Labelled]) -> list[CommitSizeRow]:
    rows = []
    for label, document in runs:
        for name, strategy in document["strategies"].items():
            sync, look = strategy["sync"], strategy["lookahead"]
            contexts = [mode.get("transform_context_tokens") for mode in (sync, look)]
            turns = [
                *sync.get("normal_new_tokens", []),
                *sync.get("transform_new_tokens", []),
                *look.get("normal_new_tokens", []),
                *look.get("transform_new_tokens", []),
            ]
            rows.append(
                CommitSizeRow(
                    label,
                    name,
                    len(sync["transform_ttft_s"]),
                    len(look["transform_ttft_s"]),
                    *(p50(c) if c else None for c in contexts),
                    max(turns, default=0),
                )
            )
    return rows


@dataclass(frozen=True)
class BurstRow:
    """One run of one strategy's burst commit turns (`BURST_FACTOR`): a large output that
    pushed the history over the limit, which averages alone cannot see coming."""

    run: str
    strategy: str
    threshold_tokens: float
    sync_turns: int
    lookahead_turns: int
    ratio: float  # look p50 / sync p50; NaN where a side has none

    @property
    def met(self) -> bool | None:
        return None if math.isnan(self.ratio) else self.ratio <= BURST_RATIO_TARGET


def burst_rows(runs: Sequence[Labelled]) -> list[BurstRow]:
    """Only strategies that rewrite the history and whose runs had burst commit turns (with
    new tokens recorded)."""
    rows = []
    for label, document in runs:
        for name, strategy in document["strategies"].items():
            if name in SPAWNING:
                continue
            sync, look = strategy["sync"], strategy["lookahead"]
            threshold = BURST_FACTOR * p50(sync.get("normal_new_tokens", []))
            if math.isnan(threshold):
                continue
            sync_bursts, look_bursts = (
                [
                    ttft
                    for ttft, new in zip(
                        mode["transform_ttft_s"], mode.get("transform_new_tokens", []), strict=False
                    )
                    if new >= threshold
                ]
                for mode in (sync, look)
            )
            if sync_bursts or look_bursts:
                rows.append(
                    BurstRow(
                        label,
                        name,
                        threshold,
                        len(sync_bursts),
                        len(look_bursts),
                        safe_ratio(p50(look_bursts), p50(sync_bursts)),
                    )
                )
    return rows


def safe_ratio(numerator: float | None, denominator: float | None) -> float:
    """numerator / denominator, or NaN where either is missing, zero or NaN."""
    if not numerator or not denominator or math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    return numerator / denominator


def _against(value: float, target: float) -> str:
    """Three decimals, or four where three would round onto the target and hide the verdict."""
    if math.isnan(value):
        return "-"
    text = f"{value:.3f}"
    return f"{value:.4f}" if float(text) == target and value != target else text


def _met(met: bool | None) -> str:
    return "-" if met is None else "yes" if met else "NO"


def targets_tables(runs: Sequence[Labelled]) -> list[Table]:
    per_strategy = compact_table(
        f"Targets per run: look T <= {RATIO_TARGET} x sync T, T/N <= {TRANSFORM_VS_NORMAL_TARGET}",
        ("run", "strategy", "T s/l", "look/sync", "met", "T/N", "met"),
    )
    few = False
    for row in target_rows(runs):
        marker = "*" if row.turns < FEW_TURNS else ""
        few |= bool(marker)
        per_strategy.add_row(
            row.run,
            row.strategy,
            f"{row.turns_label}{marker}",
            _against(row.ratio, RATIO_TARGET),
            "(pooled)" if row.pooled else _met(row.ratio_met),
            _against(row.transform_vs_normal, TRANSFORM_VS_NORMAL_TARGET),
            "(pooled)" if row.pooled else _met(row.transform_vs_normal_met),
        )
    if few:
        per_strategy.caption = f"*: a p50 of fewer than {FEW_TURNS} transform turns"
    means = compact_table(
        f"Mean cut per run (target >= {MEAN_REDUCTION_TARGET:.0%})",
        ("run", "strategies", "mean cut", "met"),
    )
    for label, document in runs:
        if len(document["strategies"]) < 2:
            continue  # a run of one strategy has no mean over strategies
        reduction = mean_reduction(document)
        means.add_row(
            label,
            str(len(document["strategies"])),
            f"{reduction:.0%}",
            _met(reduction >= MEAN_REDUCTION_TARGET),
        )
    whole = compact_table(
        f"Whole run: N l/s <= {NORMAL_RATIO_TARGET}, sum TTFT look < sync, "
        f"wall l/s <= {WALL_RATIO_TARGET}",
        ("run", "strategy", "N l/s", "met", "sum TTFT s->l", "met", "wall l/s", "met"),
    )
    repeated = []
    for row in whole_run_rows(runs):
        if row.wall_ratio_each:
            each = ", ".join(f"{ratio:.3f}" for ratio in row.wall_ratio_each)
            repeated.append(f"{row.run} {row.strategy} {each}")
        whole.add_row(
            row.run,
            row.strategy,
            _against(row.normal_ratio, NORMAL_RATIO_TARGET),
            _met(row.normal_ratio_met),
            f"{row.sync_ttft_sum_s:.0f}->{row.lookahead_ttft_sum_s:.0f}s",
            _met(row.ttft_sum_met),
            _against(row.wall_ratio, WALL_RATIO_TARGET),
            _met(row.wall_ratio_met),
        )
    if repeated:
        whole.caption = (
            "Repeated runs: turns pooled, wall l/s of the mean runs; each repeat's wall l/s: "
            + "; ".join(repeated)
        )
    sizes = compact_table(
        "Commits equal per run; context left by a commit (p50 tokens) within a turn",
        ("run", "strategy", "commits s/l", "met", "context s/l", "turn", "met"),
    )
    for size in commit_size_rows(runs):
        context = (
            "-"
            if size.context_met is None
            else f"{size.sync_context_p50:.0f}/{size.lookahead_context_p50:.0f}"
        )
        sizes.add_row(
            size.run,
            size.strategy,
            f"{size.sync_commits}/{size.lookahead_commits}",
            _met(size.commits_met),
            context,
            str(size.one_turn_tokens),
            _met(size.context_met),
        )
    bursts = compact_table(
        f"Burst commit turns (an output >= {BURST_FACTOR:g}x a normal turn's): "
        f"look/sync <= {BURST_RATIO_TARGET}",
        ("run", "strategy", "from tok", "T s/l", "look/sync", "met"),
    )
    for burst in burst_rows(runs):
        bursts.add_row(
            burst.run,
            burst.strategy,
            f"{burst.threshold_tokens:.0f}",
            f"{burst.sync_turns}/{burst.lookahead_turns}",
            _against(burst.ratio, BURST_RATIO_TARGET),
            _met(burst.met),
        )
    return [
        per_strategy,
        *([means] if means.row_count else []),
        whole,
        sizes,
        *([bursts] if bursts.row_count else []),
    ]

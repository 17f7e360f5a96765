"""Renderers of the server-side results: docs/scheduling.md section 5, docs/benchmarks.md section 4.

Each takes the JSON that a bench or `calibrate` wrote and returns a markdown table (plus, where
the bench prints one, its verdict line); `lookahead_sdk.bench.report` registers them by name.
Targets are judged per run (per seed, per measured file), never only over a pool.

- `bench slo`: `slo_loads_table` (one seed, a selection of its loads), `slo_targets_table`
  (every seed: where vanilla breaks, how far lookahead-aware holds, the >= 2x target);
- `bench estimator`: `estimator_table` (held-out and cross-validated errors, the <= 10% target);
- `scripts/gpu_profile_qwen3_8b.py` + `calibrate --report-json`: `gpu_calibration_table`;
- `bench sim-ttft`: `sim_ttft_table` (every run) and `sim_ttft_targets_table` (the >= 62% target).

Nothing here imports numpy: the GPU table evaluates the committed profile on the committed
batches with the latency model alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lookahead_sdk.bench.common import markdown_table

Document = dict[str, Any]
Runs = Sequence[tuple[str, Document]]

ON_TIME_TARGET = 0.9  # `bench slo`: share of lookahead warm-ups done before their deadline
LOAD_RATIO_TARGET = 2.0  # ... up to this multiple of vanilla's breaking load
ESTIMATOR_MAX_ERR_TARGET = 0.10  # `bench estimator`: context-aware max relative error
SIM_TTFT_REDUCTION_TARGET = 0.62  # `bench sim-ttft`: mean p90 reduction (= `sim_ttft.summary`)
GPU_LONG_BATCH_MS = 20.0  # the GPU table's subset of batches that take at least this long

SLO_METRICS = (  # (series key, SLO key in the document, label, format)
    ("lc_ttft_p99_ms", "slo_ttft_ms", "TTFT p99", "{:.0f}"),
    ("tbt_p95_ms", "slo_tbt_ms", "TBT p95", "{:.1f}"),
)
MODES = ("sync", "lookahead")  # `bench sim-ttft`'s two runs of each configuration
ESTIMATOR_SOURCES = {"sim": "sim (GPU-like truth)", "embedded": "embedded llama.cpp"}


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _percent(fraction: float) -> str:
    """`100%` and `0` exactly, otherwise one decimal (`98.2%`)."""
    if fraction == 1:
        return "100%"
    if fraction == 0:
        return "0"
    return f"{fraction:.1%}"


# --- bench slo -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SloVerdict:
    """`slo.verdict`'s rule, on a `bench slo` JSON (indices into `be_loads`).

    `vanilla_break`: the first load at which vanilla misses an LC SLO (None: it never did);
    `slo_held`: the last load up to which lookahead-aware meets both LC SLOs at every load;
    `held`: the same, with also >= 90% of the warm-ups on time (the target's condition)."""

    loads: tuple[float, ...]
    vanilla_break: int | None
    slo_held: int | None
    held: int | None

    @property
    def ratio(self) -> float | None:
        if self.vanilla_break is None or self.held is None:
            return None
        return self.loads[self.held] / self.loads[self.vanilla_break]

    @property
    def met(self) -> bool:
        """Both SLOs and >= 90% on time at every load up to 2x vanilla's breaking load."""
        if self.vanilla_break is None or self.held is None:
            return False
        return self.loads[self.held] >= LOAD_RATIO_TARGET * self.loads[self.vanilla_break]


def slo_failures(document: Document, policy: str, index: int) -> list[tuple[str, str, float]]:
    """The LC SLOs `policy` misses at load `index`: (series key, label, value)."""
    series = document[policy]
    return [
        (key, label, series[key][index])
        for key, slo, label, _ in SLO_METRICS
        if series[key][index] > document[slo]
    ]


def _on_time(document: Document, index: int) -> float:
    return document["lookahead_aware"]["lookahead_on_time_frac"][index]


def slo_verdict(document: Document) -> SloVerdict:
    """Where vanilla breaks and how far lookahead-aware holds (see `SloVerdict`)."""
    loads = tuple(document["be_loads"])

    def held_up_to(ok: Any) -> int | None:
        held = None
        for index in range(len(loads)):
            if not ok(index):
                break
            held = index
        return held

    def meets(index: int) -> bool:
        return not slo_failures(document, "lookahead_aware", index)

    vanilla_break = next(
        (i for i in range(len(loads)) if slo_failures(document, "vanilla", i)), None
    )
    return SloVerdict(
        loads=loads,
        vanilla_break=vanilla_break,
        slo_held=held_up_to(meets),
        held=held_up_to(lambda i: meets(i) and _on_time(document, i) >= ON_TIME_TARGET),
    )


def _load_index(loads: Sequence[float], load: float) -> int | None:
    return next((i for i, x in enumerate(loads) if math.isclose(x, load)), None)


def _format_metric(key: str, value: float) -> str:
    return next(fmt for k, _, _, fmt in SLO_METRICS if k == key).format(value)


def _vanilla_break_cell(document: Document, verdict: SloVerdict) -> str:
    index = verdict.vanilla_break
    if index is None:
        return f"never (up to {verdict.loads[-1]:g}/s)"
    failures = slo_failures(document, "vanilla", index)
    now = ", ".join(f"{label} {_format_metric(key, value)} ms" for key, label, value in failures)
    if index == 0:
        return f"{verdict.loads[index]:g}/s ({now})"
    before = " / ".join(
        _format_metric(key, document["vanilla"][key][index - 1]) for key, _, _ in failures
    )
    return f"{verdict.loads[index]:g}/s ({now}; {before} at {verdict.loads[index - 1]:g}/s)"


def _why_not(document: Document, index: int) -> str:
    """What lookahead-aware misses at load `index`: an SLO, or the on-time share."""
    misses = [
        f"{label} {_format_metric(key, value)} ms"
        for key, label, value in slo_failures(document, "lookahead_aware", index)
    ]
    if _on_time(document, index) < ON_TIME_TARGET:
        misses.append(_percent(_on_time(document, index)))
    return ", ".join(misses)


def _held_cell(document: Document, verdict: SloVerdict) -> str:
    index = verdict.held
    loads = verdict.loads
    if index is None:
        return f"none ({_why_not(document, 0)} at {loads[0]:g}/s)"
    on_time = _percent(_on_time(document, index))
    if index == len(loads) - 1:
        return f"{loads[index]:g}/s ({on_time}; the last load run)"
    return (
        f"{loads[index]:g}/s ({on_time}; {_why_not(document, index + 1)} at {loads[index + 1]:g}/s)"
    )


def _lc_slo_cell(document: Document, verdict: SloVerdict) -> str:
    loads = verdict.loads
    series = document["lookahead_aware"]
    worst = " / ".join(
        _format_metric(key, max(series[key])) + " ms" for key, _, _, _ in SLO_METRICS
    )
    if verdict.slo_held == len(loads) - 1:
        return f"held at every load to {loads[-1]:g}/s (worst {worst})"
    first = 0 if verdict.slo_held is None else verdict.slo_held + 1
    return f"**missed** from {loads[first]:g}/s ({_why_not(document, first)})"


def slo_targets_table(runs: Runs) -> str:
    """`bench slo`, one row per seed (JSON file): vanilla's breaking load, how far
    lookahead-aware meets both LC SLOs with >= 90% of the warm-ups on time, their ratio, the
    on-time share at 2x vanilla's break, the LC SLOs over all loads, and the target per seed."""
    header = [
        "run",
        "vanilla breaks the SLOs at",
        "lookahead-aware meets everything up to",
        "ratio",
        "on time at 2x vanilla's break",
        "lookahead-aware LC SLOs (worst TTFT p99 / TBT p95)",
        "target (>= 2x)",
    ]
    rows = []
    for stem, document in runs:
        verdict = slo_verdict(document)
        ratio = verdict.ratio
        at_double = "n/a"
        if verdict.vanilla_break is not None:
            double = LOAD_RATIO_TARGET * verdict.loads[verdict.vanilla_break]
            index = _load_index(verdict.loads, double)
            at_double = (
                f"{_percent(_on_time(document, index))} at {double:g}/s"
                if index is not None
                else f"{double:g}/s not run"
            )
        rows.append(
            [
                f"`{stem}`",
                _vanilla_break_cell(document, verdict),
                _held_cell(document, verdict),
                "n/a" if ratio is None else f"{ratio:.2f}x",
                at_double,
                _lc_slo_cell(document, verdict),
                _met(verdict.met)
                if verdict.vanilla_break is not None
                else "n/a (vanilla never broke: raise --be-loads)",
            ]
        )
    return markdown_table(header, rows)


def slo_loads_table(document: Document) -> str:
    """`bench slo`, one seed: both policies at a selection of the loads run (every even load,
    the last, and the loads where the verdict turns: vanilla's break and the load before it,
    2x that, the last load lookahead-aware meets everything and the one after it). The cells
    where vanilla breaks and where lookahead-aware stops meeting everything are in bold."""
    verdict = slo_verdict(document)
    loads = verdict.loads
    chosen = {i for i, load in enumerate(loads) if math.isclose(load % 2, 0)} | {len(loads) - 1}
    if verdict.vanilla_break is not None:
        chosen |= {max(verdict.vanilla_break - 1, 0), verdict.vanilla_break}
        double = _load_index(loads, LOAD_RATIO_TARGET * loads[verdict.vanilla_break])
        chosen |= set() if double is None else {double}
    if verdict.held is not None:
        chosen |= {verdict.held, min(verdict.held + 1, len(loads) - 1)}
    columns = sorted(chosen)
    bold: set[tuple[str, str, int]] = set()
    if verdict.vanilla_break is not None:
        bold |= {
            ("vanilla", key, verdict.vanilla_break)
            for key, _, _ in slo_failures(document, "vanilla", verdict.vanilla_break)
        }
    stop = 0 if verdict.held is None else verdict.held + 1
    if stop < len(loads):
        bold |= {
            ("lookahead_aware", key, stop)
            for key, _, _ in slo_failures(document, "lookahead_aware", stop)
        }
        if _on_time(document, stop) < ON_TIME_TARGET:
            bold.add(("lookahead_aware", "lookahead_on_time_frac", stop))

    def row(label: str, policy: str, key: str, fmt: Any) -> list[str]:
        cells = []
        for index in columns:
            cell = fmt(document[policy][key][index])
            cells.append(f"**{cell}**" if (policy, key, index) in bold else cell)
        return [label, *cells]

    ms = {key: (lambda v, key=key: _format_metric(key, v)) for key, _, _, _ in SLO_METRICS}
    rows = [
        row("vanilla LC TTFT p99 (ms)", "vanilla", "lc_ttft_p99_ms", ms["lc_ttft_p99_ms"]),
        row("vanilla TBT p95 (ms)", "vanilla", "tbt_p95_ms", ms["tbt_p95_ms"]),
        row(
            "lookahead-aware LC TTFT p99 (ms)",
            "lookahead_aware",
            "lc_ttft_p99_ms",
            ms["lc_ttft_p99_ms"],
        ),
        row("lookahead-aware TBT p95 (ms)", "lookahead_aware", "tbt_p95_ms", ms["tbt_p95_ms"]),
        row("lookahead-aware on time", "lookahead_aware", "lookahead_on_time_frac", _percent),
        row("lookahead-aware waste", "lookahead_aware", "lookahead_waste_frac", _percent),
    ]
    return markdown_table(["BE warm-ups/s", *(f"{loads[i]:g}" for i in columns)], rows)


# --- bench estimator -------------------------------------------------------------------------


def _errors(stats: Document) -> str:
    return f"{stats['max_rel_err']:.1%} / {stats['mean_rel_err']:.1%}"


def estimator_table(runs: Runs) -> str:
    """`bench estimator`, one row per source of each run (JSON file): held-out errors of the
    context-aware model (Eq. 1) and the token-only baseline, k-fold cross-validation, and the
    target (context-aware max <= 10%) on the held-out split and under cross-validation."""
    header = [
        "run",
        "source",
        "held-out n",
        "context-aware max / mean",
        "token-only max / mean",
        "k-fold CV context-aware max / mean (n)",
        "held-out max <= 10%",
        "CV max <= 10%",
    ]
    rows = []
    for stem, document in runs:
        cross = document.get("cross_validation") or {}
        for source, heldout in document["sources"].items():
            cv = cross.get(source)
            context_max = heldout["context_aware"]["max_rel_err"]
            rows.append(
                [
                    f"`{stem}`",
                    ESTIMATOR_SOURCES.get(source, source),
                    str(heldout["n_heldout"]),
                    _errors(heldout["context_aware"]),
                    _errors(heldout["token_only"]),
                    "not run"
                    if cv is None
                    else f"{_errors(cv['context_aware'])} ({cv['folds']}-fold, n = {cv['n']})",
                    _met(context_max <= ESTIMATOR_MAX_ERR_TARGET),
                    "n/a"
                    if cv is None
                    else _met(cv["context_aware"]["max_rel_err"] <= ESTIMATOR_MAX_ERR_TARGET),
                ]
            )
    return markdown_table(header, rows)


# --- H200 calibration ------------------------------------------------------------------------


def _by_kind(runs: Runs) -> dict[str, tuple[str, Document]]:
    """The GPU table's three inputs, told apart by their keys."""
    kinds: dict[str, tuple[str, Document]] = {}
    for stem, document in runs:
        if "heldout" in document:
            kind = "report"
        elif "gemm_table_ms" in document:
            kind = "profile"
        elif "batches" in document:
            kind = "measurements"
        else:
            raise ValueError(f"{stem}: neither a calibration report, a profile nor measurements")
        if kind in kinds:
            raise ValueError(f"gpu-calibration takes one {kind} file, got {kinds[kind][0]}, {stem}")
        kinds[kind] = (stem, document)
    missing = {"report", "profile", "measurements"} - set(kinds)
    if missing:
        raise ValueError(f"gpu-calibration needs a {', a '.join(sorted(missing))} file too")
    return kinds


def _stats(errors: Sequence[float]) -> Document:
    return {"max_rel_err": max(errors), "mean_rel_err": sum(errors) / len(errors)}


def gpu_calibration_table(runs: Runs) -> str:
    """The H200 fit: errors of the context-aware model (Eq. 1) and the token-only baseline on
    the held-out split of the fitted run (from `calibrate --report-json`), and of the fitted
    profile on an independent run's mixed batches (decodes and prefill chunks together), all of
    them and those of 20 ms or more. Relative error |est - measured| / measured, as
    `calibrate.relative_errors` computes it."""
    from lookahead_sdk.scheduling.latency_model import (
        LatencyModel,
        LatencyProfile,
        TokenOnlyModel,
    )
    from lookahead_sdk.scheduling.measurements import BatchMeasurement

    kinds = _by_kind(runs)
    report_stem, report = kinds["report"]
    profile_stem, profile_document = kinds["profile"]
    batches_stem, batches_document = kinds["measurements"]
    profile = LatencyProfile.from_json(profile_document)
    if report.get("profile") not in (None, profile.name):
        raise ValueError(
            f"{report_stem} reports profile {report['profile']!r}, "
            f"{profile_stem} is {profile.name!r}"
        )
    if profile.token_only_table is None:
        raise ValueError(f"{profile_stem}: the profile has no token-only table")
    models = (LatencyModel(profile), TokenOnlyModel(profile.token_only_table))
    measured = [
        BatchMeasurement.from_json(record, f"{batches_stem} batches[{index}]")
        for index, record in enumerate(batches_document["batches"])
    ]
    mixed = [m for m in measured if m.batch.decode_contexts and m.batch.prefill_chunks]
    long = [m for m in mixed if m.latency_ms >= GPU_LONG_BATCH_MS]
    heldout = report["heldout"]
    n_all = report["n_train"] + heldout["n_heldout"]
    rows = [
        [
            f"held-out {heldout['n_heldout'] / n_all:.0%} of the fitted run (`{report_stem}`)",
            str(heldout["n_heldout"]),
            _errors(heldout["context_aware"]),
            _errors(heldout["token_only"]),
        ]
    ]
    for label, data in (
        (f"random mixed batches of an independent run (`{batches_stem}`)", mixed),
        (f"the same, batches of {GPU_LONG_BATCH_MS:g} ms or more", long),
    ):
        if not data:
            continue
        errors = [
            _stats([abs(model.est_ms(m.batch) - m.latency_ms) / m.latency_ms for m in data])
            for model in models
        ]
        rows.append([label, str(len(data)), _errors(errors[0]), _errors(errors[1])])
    header = ["test set", "n", "context-aware max / mean", "token-only max / mean"]
    return markdown_table(header, rows)


# --- bench sim-ttft --------------------------------------------------------------------------


def _sim_ttft_documents(runs: Runs) -> tuple[list[tuple[str, Document]], list[Document]]:
    """The summaries (`--json`: per-run percentiles) and raw files (`--raw-json`)."""
    summaries = [(stem, d) for stem, d in runs if "time_scale" not in d]
    raws = [d for _, d in runs if "time_scale" in d]
    if not summaries:
        raise ValueError("sim-ttft needs the bench's --json file (the raw one alone is not enough)")
    return summaries, raws


def _change(sync: float, lookahead: float) -> str:
    if not sync > 0 or math.isnan(lookahead):
        return "n/a"
    return f"{lookahead / sync - 1:+.0%}"


def sim_ttft_table(runs: Runs) -> str:
    """`bench sim-ttft`: transform-turn TTFT per agent count and strategy (simulated seconds),
    sync vs lookahead, p50 and p90, and the p90 change; with the raw JSON beside it, the number
    of transform turns each percentile is over. Below: `sim_ttft.summary`'s verdict line."""
    from lookahead_sdk.bench.sim_ttft import summary

    summaries, raws = _sim_ttft_documents(runs)
    turns: dict[tuple[int, str, str], int] = {
        (r["agents"], r["strategy"], r["mode"]): len(r["transform_ttft_s"])
        for raw in raws
        for r in raw["runs"]
    }
    out = []
    for _stem, document in summaries:
        header = ["agents", "strategy"]
        header += ["transform turns (sync / lookahead)"] if turns else []
        header += ["sync p50", "lookahead p50", "sync p90", "lookahead p90", "p90 change"]
        rows = []
        for r in document["runs"]:
            row = [str(r["agents"]), r["strategy"]]
            if turns:
                sync, ahead = (turns.get((r["agents"], r["strategy"], m)) for m in MODES)
                row.append(str(sync) if sync == ahead else f"{sync} / {ahead}")
            row += [
                f"{r[key]:.3f}"
                for key in ("sync_p50_s", "lookahead_p50_s", "sync_p90_s", "lookahead_p90_s")
            ]
            row.append(_change(r["sync_p90_s"], r["lookahead_p90_s"]))
            rows.append(row)
        out.append(markdown_table(header, rows) + "\n" + summary(document["runs"]) + "\n")
    return "\n".join(out)


def sim_ttft_targets_table(runs: Runs) -> str:
    """`bench sim-ttft`, one row per sweep (JSON file): the mean transform-turn TTFT reduction
    over its runs at p90 (the target, >= 62%) and p50, and how many runs reach 62% on their own."""
    from lookahead_sdk.bench.sim_ttft import reductions

    summaries, _ = _sim_ttft_documents(runs)
    header = [
        "sweep",
        "runs (agents x strategy)",
        "mean p90 reduction",
        "mean p50 reduction",
        "runs with p90 reduction >= 62%",
        "target (mean p90 >= 62%)",
    ]
    rows = []
    for stem, document in summaries:
        p90, p50 = reductions(document["runs"], "p90"), reductions(document["runs"], "p50")
        if not p90:
            rows.append([f"`{stem}`", "0", "n/a", "n/a", "n/a", "n/a (no transform turns)"])
            continue
        mean_p90 = sum(p90) / len(p90)
        rows.append(
            [
                f"`{stem}`",
                str(len(document["runs"])),
                f"{mean_p90:.1%}",
                f"{sum(p50) / len(p50):.1%}" if p50 else "n/a",
                f"{sum(r >= SIM_TTFT_REDUCTION_TARGET for r in p90)} of {len(p90)}",
                _met(mean_p90 >= SIM_TTFT_REDUCTION_TARGET),
            ]
        )
    return markdown_table(header, rows)


# -- decode slack: what background prompt tokens cost beside one decode step --------------------
DECODE_SLACK_EXTRA = (1, 16, 64, 127)  # prompt tokens computed in the same batch as one decode
DECODE_SLACK_BUDGET = 1.25  # "rides along" = the batch takes at most this times the decode step


def tokens_within(gemm_ms: Callable[[float], float], budget: float, limit: int = 8191) -> int:
    """The most prompt tokens a one-token decode batch takes on while its GEMM time stays within
    `budget` x the decode step's (the table is non-decreasing, so a binary search)."""
    ceiling = budget * gemm_ms(1)
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        if gemm_ms(1 + middle) <= ceiling:
            low = middle
        else:
            high = middle - 1
    return low


def decode_slack_table(runs: Runs) -> str:
    """Latency profiles (`calibrate` output): how much a decode step slows when best-effort prompt
    tokens share its batch, from the profile's T_GEMM (the weights part of Eq. 1, no attention)."""
    from lookahead_sdk.scheduling.latency_model import LatencyModel, LatencyProfile

    rows = []
    for stem, document in runs:
        model = LatencyModel(LatencyProfile.from_json(document))
        decode_ms = model.gemm_ms(1)
        rows.append(
            (
                f"`{document.get('name', stem)}`",
                _measured_on(document.get("metadata") or {}),
                f"{decode_ms:.2f} ms",
                *(f"{model.gemm_ms(1 + extra) / decode_ms:.2f}x" for extra in DECODE_SLACK_EXTRA),
                str(tokens_within(model.gemm_ms, DECODE_SLACK_BUDGET)),
            )
        )
    header = (
        "profile",
        "measured",
        "one decode token",
        *(f"+{extra} prompt token{'s' if extra > 1 else ''}" for extra in DECODE_SLACK_EXTRA),
        f"prompt tokens within {DECODE_SLACK_BUDGET:g}x",
    )
    return markdown_table(header, rows)


def _measured_on(metadata: Document) -> str:
    """Where a profile's batches were timed: the provenance stamp `calibrate --measure-embedded`
    records (commit, CPU) and its engine threads, else the device the metadata names, else '-'."""
    stamp = metadata.get("provenance")
    threads = metadata.get("threads")
    parts = []
    if isinstance(stamp, dict):
        machine = stamp.get("machine") or {}
        parts.append(f"`{str(stamp.get('commit') or '?')[:10]}`")
        parts.append(f"{machine.get('cpus', '?')} CPUs ({machine.get('cpu_model', '?')})")
    if threads is not None:
        parts.append(f"{threads} engine thread{'s' if threads != 1 else ''}")
    if not parts and isinstance(metadata.get("device"), str):
        parts.append(metadata["device"])
    return ", ".join(parts) or "-"

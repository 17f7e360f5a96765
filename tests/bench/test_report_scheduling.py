"""The server-side doc tables (`bench slo|estimator|sim-ttft`, the H200 fit) are generated from
their JSON, with every target judged per run: a verdict flips when its number crosses the target."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lookahead_sdk.bench import sim_ttft, slo
from lookahead_sdk.bench.report import RENDERERS, RUNS_RENDERERS, run_report
from lookahead_sdk.bench.report_scheduling import (
    decode_slack_table,
    estimator_table,
    gpu_calibration_table,
    sim_ttft_table,
    sim_ttft_targets_table,
    slo_loads_table,
    slo_targets_table,
    slo_verdict,
    tokens_within,
)
from lookahead_sdk.scheduling.latency_model import PROFILE_SCHEMA, LatencyModel, LatencyProfile
from lookahead_sdk.scheduling.measurements import MEASUREMENTS_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "scheduling"


def rows(markdown: str) -> list[list[str]]:
    """The cells of a markdown table's body rows."""
    table = [line for line in markdown.splitlines() if line.startswith("| ")][2:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table]


# --- bench slo -------------------------------------------------------------------------------


def slo_document(
    loads: list[float],
    vanilla_tbt: list[float],
    on_time: list[float],
    *,
    aware_tbt: list[float] | None = None,
    aware_ttft: list[float] | None = None,
) -> dict[str, Any]:
    """A `bench slo` JSON: vanilla's TTFT is always within its SLO, so its TBT decides."""
    n = len(loads)
    return {
        "slo_ttft_ms": 500,
        "slo_tbt_ms": 50,
        "be_loads": loads,
        "vanilla": {
            "lc_ttft_p99_ms": [100.0] * n,
            "tbt_p95_ms": vanilla_tbt,
            "lookahead_on_time_frac": [1.0] * n,
            "lookahead_waste_frac": [0.0] * n,
            "lookaheads": [10] * n,
        },
        "lookahead_aware": {
            "lc_ttft_p99_ms": aware_ttft or [120.0] * n,
            "tbt_p95_ms": aware_tbt or [45.0] * n,
            "lookahead_on_time_frac": on_time,
            "lookahead_waste_frac": [0.5 * (1 - f) for f in on_time],
            "lookaheads": [1000] * n,
        },
    }


LOADS = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
VANILLA_TBT = [10.0, 40.0, 60.0, 80.0, 90.0, 100.0]  # breaks at 2/s: the target is 4/s


def test_the_slo_target_flips_when_on_time_at_2x_crosses_90_percent() -> None:
    met = slo_document(LOADS, VANILLA_TBT, [1.0, 1.0, 0.95, 0.92, 0.90, 0.5])
    missed = slo_document(LOADS, VANILLA_TBT, [1.0, 1.0, 0.95, 0.92, 0.899, 0.5])
    [row_met, row_missed] = rows(slo_targets_table([("slo", met), ("slo_seed1", missed)]))
    assert row_met[0] == "`slo`" and row_missed[0] == "`slo_seed1`"
    assert row_met[1] == "2/s (TBT p95 60.0 ms; 40.0 at 1/s)"
    assert row_met[2] == "4/s (90.0%; 50.0% at 5/s)" and row_met[3] == "2.00x"
    assert row_met[4] == "90.0% at 4/s" and row_met[-1] == "met"
    assert row_missed[2] == "3/s (92.0%; 89.9% at 4/s)" and row_missed[3] == "1.50x"
    assert row_missed[-1] == "**not met**"


def test_an_lc_slo_miss_of_lookahead_aware_ends_what_it_meets() -> None:
    aware_tbt = [45.0, 45.0, 45.0, 51.0, 45.0, 45.0]
    document = slo_document(LOADS, VANILLA_TBT, [1.0] * 6, aware_tbt=aware_tbt)
    [row] = rows(slo_targets_table([("slo", document)]))
    assert row[2] == "2/s (100%; TBT p95 51.0 ms at 3/s)"
    assert row[5] == "**missed** from 3/s (TBT p95 51.0 ms)" and row[-1] == "**not met**"
    held = slo_document(LOADS, VANILLA_TBT, [1.0] * 6, aware_ttft=[100, 300, 499, 200, 100, 100])
    assert rows(slo_targets_table([("slo", held)]))[0][5] == (
        "held at every load to 5/s (worst 499 ms / 45.0 ms)"
    )


def test_vanilla_that_never_breaks_judges_nothing() -> None:
    document = slo_document(LOADS, [10.0] * 6, [1.0] * 6)
    [row] = rows(slo_targets_table([("slo", document)]))
    assert row[1] == "never (up to 5/s)" and row[3] == "n/a"
    assert row[-1].startswith("n/a") and "raise --be-loads" in row[-1]


@pytest.mark.parametrize(
    ("vanilla_tbt", "on_time", "aware_tbt"),
    [
        (VANILLA_TBT, [1.0, 1.0, 0.95, 0.92, 0.90, 0.5], None),
        (VANILLA_TBT, [1.0, 1.0, 0.95, 0.89, 0.95, 0.5], None),
        (VANILLA_TBT, [1.0] * 6, [45.0, 45.0, 45.0, 51.0, 45.0, 45.0]),
        ([10.0, 40.0, 45.0, 49.0, 51.0, 60.0], [1.0] * 6, None),
        ([60.0] * 6, [0.5] * 6, None),
    ],
)
def test_bench_slo_prints_the_verdict_the_tables_show(
    vanilla_tbt: list[float], on_time: list[float], aware_tbt: list[float] | None
) -> None:
    """`bench slo` prints its verdict from the JSON with the rule the doc tables use."""
    document = slo_document(LOADS, vanilla_tbt, on_time, aware_tbt=aware_tbt)
    printed = slo.verdict(document)
    verdict = slo_verdict(document)

    def load(index: int | None) -> float | None:
        return None if index is None else LOADS[index]

    assert printed.startswith(f"vanilla breaks the SLOs at {load(verdict.vanilla_break):g}/s")
    assert f"holds them up to {load(verdict.slo_held)}/s" in printed
    assert f"on time up to {load(verdict.held)}/s" in printed
    assert printed.endswith(": met)" if verdict.met else ": NOT met)")


def test_the_loads_table_shows_the_json_figures_at_the_loads_where_the_verdict_turns() -> None:
    loads = [x / 2 for x in range(13)]  # 0, 0.5, ..., 6
    vanilla_tbt = [10.0, 11.0, 12.0, 13.0, 14.0, 55.5, 60.0, 61.0, 62.0, 63.0, 64.0, 65.0, 66.0]
    on_time = [1.0] * 10 + [0.912, 0.875, 0.8]
    document = slo_document(loads, vanilla_tbt, on_time)
    document["lookahead_aware"]["lc_ttft_p99_ms"][10] = 234.4
    table = slo_loads_table(document)
    header = table.splitlines()[0]
    # even loads, the last, vanilla's break (2.5) and the load before it, 2x = 5, held 5, next 5.5
    assert header == "| BE warm-ups/s | 0 | 2 | 2.5 | 4 | 5 | 5.5 | 6 |"
    by_label = {row[0]: row[1:] for row in rows(table)}
    assert by_label["vanilla TBT p95 (ms)"][2] == "**55.5**"
    assert by_label["vanilla TBT p95 (ms)"][1] == "14.0"  # load 2 is the fifth point
    assert by_label["lookahead-aware LC TTFT p99 (ms)"][4] == "234"
    assert by_label["lookahead-aware on time"][4:] == ["91.2%", "**87.5%**", "80.0%"]
    assert by_label["lookahead-aware waste"][:2] == ["0", "0"]
    assert by_label["lookahead-aware waste"][5] == "6.2%"


def test_the_committed_slo_tables_show_their_json() -> None:
    documents = [
        (name, json.loads((RESULTS / f"{name}.json").read_text()))
        for name in ("slo", "slo_seed1", "slo_seed2")
    ]
    table = slo_targets_table(documents)
    for (name, document), row in zip(documents, rows(table), strict=True):
        verdict = slo_verdict(document)
        assert row[0] == f"`{name}`"
        assert row[-1] == ("met" if verdict.met else "**not met**")
        assert row[1].startswith(f"{document['be_loads'][verdict.vanilla_break]:g}/s ")
    seed0 = documents[0][1]
    index = seed0["be_loads"].index(16.0)
    by_label = {row[0]: row[1:] for row in rows(slo_loads_table(seed0))}
    header = slo_loads_table(seed0).splitlines()[0].strip("|").split(" | ")[1:]
    column = [cell.strip() for cell in header].index("16")
    expected = seed0["vanilla"]["lc_ttft_p99_ms"][index]
    assert by_label["vanilla LC TTFT p99 (ms)"][column] == f"{expected:.0f}"


# --- bench estimator -------------------------------------------------------------------------


def errors(max_err: float, mean_err: float) -> dict[str, float]:
    return {"max_rel_err": max_err, "mean_rel_err": mean_err}


def estimator_document(embedded_max: float, cv_max: float | None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "sources": {
            "sim": {
                "n_heldout": 180,
                "context_aware": errors(0.05, 0.01),
                "token_only": errors(0.9, 0.6),
            },
            "embedded": {
                "n_heldout": 14,
                "context_aware": errors(embedded_max, 0.02),
                "token_only": errors(1.25, 0.55),
            },
        }
    }
    if cv_max is not None:
        document["cross_validation"] = {
            source: {
                "folds": 5,
                "n": n,
                "context_aware": errors(cv_max, 0.03),
                "token_only": errors(1.5, 0.5),
            }
            for source, n in (("sim", 600), ("embedded", 48))
        }
    return document


def test_the_estimator_target_is_judged_per_run_source_and_split() -> None:
    table = estimator_table(
        [
            ("estimator_run4", estimator_document(0.10, 0.0999)),
            ("estimator_run5", estimator_document(0.1004, 0.1001)),
            ("estimator_run6", estimator_document(0.08, None)),
        ]
    )
    by_run = {(row[0], row[1]): row[2:] for row in rows(table)}
    run4 = by_run[("`estimator_run4`", "embedded llama.cpp")]
    assert run4 == [
        "14",
        "10.0% / 2.0%",
        "125.0% / 55.0%",
        "10.0% / 3.0% (5-fold, n = 48)",
        "met",
        "met",
    ]
    run5 = by_run[("`estimator_run5`", "embedded llama.cpp")]
    assert run5[-2:] == ["**not met**", "**not met**"]
    assert by_run[("`estimator_run5`", "sim (GPU-like truth)")][-2] == "met"
    run6 = by_run[("`estimator_run6`", "embedded llama.cpp")]
    assert run6[3:] == ["not run", "met", "n/a"]


# --- H200 calibration ------------------------------------------------------------------------


def gpu_inputs(report_profile: str = "flat") -> list[tuple[str, dict[str, Any]]]:
    """Eq. 1 predicts 25 ms for every batch, the token-only table 20 ms."""
    profile = {
        "schema": PROFILE_SCHEMA,
        "name": "flat",
        "gemm_table_ms": [[1, 25.0]],
        "alpha_decode_ms": 0.0,
        "alpha_prefill_ms": 0.0,
        "token_only_table_ms": [[1, 20.0]],
    }
    mixed = {"decode_contexts": [1000], "prefill_chunks": [[64, 0]]}
    batches = [
        {**mixed, "latency_ms": 25.0},  # errors: context-aware 0, token-only 20%
        {**mixed, "latency_ms": 50.0},  # 50%, 60%
        {**mixed, "latency_ms": 12.5},  # 100%, 60%; under 20 ms
        {"decode_contexts": [1000], "prefill_chunks": [], "latency_ms": 100.0},  # not mixed
        {"decode_contexts": [], "prefill_chunks": [[64, 0]], "latency_ms": 100.0},  # not mixed
    ]
    report = {
        "profile": report_profile,
        "n_train": 7,
        "heldout": {
            "n_heldout": 3,
            "context_aware": errors(0.481, 0.047),
            "token_only": errors(0.532, 0.233),
        },
    }
    return [
        ("calibration_report", report),
        ("flat_profile", profile),
        ("run_seed1", {"schema": MEASUREMENTS_SCHEMA, "metadata": {}, "batches": batches}),
    ]


def test_the_gpu_table_evaluates_the_profile_on_the_independent_runs_mixed_batches() -> None:
    inputs = gpu_inputs()
    table = gpu_calibration_table(list(reversed(inputs)))  # told apart by keys, not order
    assert rows(table) == [
        ["held-out 30% of the fitted run (`calibration_report`)", "3", "48.1% / 4.7%", "53.2% / 23.3%"],
        ["random mixed batches of an independent run (`run_seed1`)", "3", "100.0% / 50.0%", "60.0% / 46.7%"],
        ["the same, batches of 20 ms or more", "2", "50.0% / 25.0%", "60.0% / 40.0%"],
    ]  # fmt: skip


def test_the_gpu_table_refuses_a_report_of_another_profile_or_a_missing_input() -> None:
    with pytest.raises(ValueError, match="reports profile 'other'"):
        gpu_calibration_table(gpu_inputs(report_profile="other"))
    with pytest.raises(ValueError, match="needs a measurements file"):
        gpu_calibration_table(gpu_inputs()[:2])


# --- bench sim-ttft --------------------------------------------------------------------------


def sim_run(agents: int, strategy: str, sync_p90: float, look_p90: float) -> dict[str, Any]:
    return {
        "agents": agents,
        "strategy": strategy,
        "sync_p50_s": sync_p90 / 2,
        "lookahead_p50_s": look_p90 / 2,
        "sync_p90_s": sync_p90,
        "lookahead_p90_s": look_p90,
    }


def test_the_sim_ttft_table_shows_each_run_and_its_transform_turns() -> None:
    summary = {
        "profile": "p",
        "runs": [sim_run(1, "offload", 0.282, 0.0282), sim_run(4, "isolate", 0.08, 0.06)],
    }
    raw = {
        "time_scale": 2.0,
        "runs": [
            {"agents": 1, "strategy": "offload", "mode": m, "transform_ttft_s": [0.5]}
            for m in ("sync", "lookahead")
        ]
        + [
            {"agents": 4, "strategy": "isolate", "mode": "sync", "transform_ttft_s": [0.1] * 112},
            {"agents": 4, "strategy": "isolate", "mode": "lookahead", "transform_ttft_s": [0.1]},
        ],
    }
    table = sim_ttft_table([("sim_ttft", summary), ("sim_ttft_raw", raw)])
    assert rows(table) == [
        ["1", "offload", "1", "0.141", "0.014", "0.282", "0.028", "-90%"],
        ["4", "isolate", "112 / 1", "0.040", "0.030", "0.080", "0.060", "-25%"],
    ]
    assert table.rstrip().endswith(sim_ttft.summary(summary["runs"]))
    assert "transform turns" not in sim_ttft_table([("sim_ttft", summary)])


@pytest.mark.parametrize(("look_p90", "verdict"), [(0.6198, "met"), (0.6202, "**not met**")])
def test_the_sim_ttft_target_flips_at_a_mean_p90_reduction_of_62_percent(
    look_p90: float, verdict: str
) -> None:
    """Runs reduced by 86% and by 1 - look_p90: a mean of 62.01% is met, 61.99% is not."""
    runs = [sim_run(1, "summarize", 1.0, 0.14), sim_run(16, "offload", 1.0, look_p90)]
    [row] = rows(sim_ttft_targets_table([("sweep", {"profile": "p", "runs": runs})]))
    assert row[0] == "`sweep`" and row[1] == "2" and row[4] == "1 of 2"
    assert row[-1] == verdict
    assert ("(target >= 62% on the tail: met)" in sim_ttft.summary(runs)) == (verdict == "met")


def test_a_sim_ttft_change_with_no_sync_time_is_not_a_number() -> None:
    runs = [sim_run(1, "isolate", 0.0, 0.01), sim_run(1, "offload", 1.0, math.nan)]
    table = sim_ttft_table([("sim_ttft", {"profile": "p", "runs": runs})])
    assert [row[-1] for row in rows(table)] == ["n/a", "n/a"]


# --- registration ----------------------------------------------------------------------------


def test_the_scheduling_renderers_are_registered_and_render_without_numpy(tmp_path: Path) -> None:
    assert "slo-loads" in RENDERERS
    for name in ("slo-targets", "estimator", "gpu-calibration", "sim-ttft", "sim-ttft-targets"):
        assert name in RUNS_RENDERERS
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from lookahead_sdk.bench.report import run_report\n"
        f"root = Path({str(ROOT)!r})\n"
        "stale = run_report(root, [root / 'docs' / 'scheduling.md'], check=True)\n"
        "assert not stale, stale\n"
        "print('numpy' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


def test_an_edited_scheduling_table_is_regenerated_from_its_json(tmp_path: Path) -> None:
    source = tmp_path / "docs" / "results" / "estimator_run4.json"
    source.parent.mkdir(parents=True)
    source.write_text(json.dumps(estimator_document(0.123, 0.05)))
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "<!-- report: estimator docs/results/estimator_run4.json -->\n"
        "| hand-typed | 9.4% |\n<!-- /report -->\n"
    )
    (tmp_path / "README.md").write_text("no tables\n")
    [stale] = run_report(tmp_path, check=True)
    assert stale.name == "estimator"
    run_report(tmp_path)
    text = page.read_text()
    assert "hand-typed" not in text and "12.3% / 2.0%" in text and "**not met**" in text
    assert run_report(tmp_path, check=True) == []


# -- decode slack ------------------------------------------------------------------------------
def _profile_document(name: str, gemm_table_ms: list[list[float]]) -> dict:
    return {
        "schema": "lookahead-sdk/latency-profile/v1",
        "name": name,
        "gemm_table_ms": gemm_table_ms,
        "alpha_decode_ms": 0.0,
        "alpha_prefill_ms": 0.0,
    }


def test_tokens_within_finds_the_last_batch_inside_the_budget() -> None:
    flat_then_linear = _profile_document("gpu-like", [[1, 10.0], [101, 10.0], [201, 20.0]])
    model = LatencyModel(LatencyProfile.from_json(flat_then_linear))
    # Flat to 101 forward tokens, then +0.1 ms per token: 1.25 x 10 ms is reached at 126.
    assert tokens_within(model.gemm_ms, 1.25) == 125
    assert tokens_within(model.gemm_ms, 1.0) == 100


def test_decode_slack_table_contrasts_a_linear_cpu_with_a_flat_gpu() -> None:
    cpu = _profile_document("cpu", [[1, 10.0], [2, 30.0], [128, 330.0]])
    gpu = _profile_document("gpu", [[1, 5.0], [128, 6.0], [1024, 26.0]])
    table = decode_slack_table([("cpu", cpu), ("gpu", gpu)]).splitlines()
    assert table[0].startswith("| profile | measured | one decode token | +1 prompt token |")
    cpu_row, gpu_row = table[2], table[3]
    assert cpu_row.startswith("| `cpu` | - | 10.00 ms | 3.00x |")
    assert cpu_row.endswith("| 0 |")  # one more token already triples the batch
    assert gpu_row.startswith("| `gpu` | - | 5.00 ms | 1.00x |")
    # 6 ms at 128 forward tokens, then 20 ms per 896: 6.25 ms (1.25 x 5) at 139.2 tokens.
    assert gpu_row.endswith("| 138 |")


def test_decode_slack_table_says_where_each_profile_was_measured() -> None:
    cpu = _profile_document("cpu", [[1, 10.0], [2, 30.0], [128, 330.0]])
    cpu["metadata"] = {
        "threads": 2,
        "provenance": {"commit": "0123456789abcdef", "machine": {"cpus": 2, "cpu_model": "EPYC"}},
    }
    gpu = _profile_document("gpu", [[1, 5.0], [128, 6.0], [1024, 26.0]])
    gpu["metadata"] = {"device": "NVIDIA H200"}
    table = decode_slack_table([("cpu", cpu), ("gpu", gpu)]).splitlines()
    assert table[2].startswith("| `cpu` | `0123456789`, 2 CPUs (EPYC), 2 engine threads |")
    assert table[3].startswith("| `gpu` | NVIDIA H200 |")

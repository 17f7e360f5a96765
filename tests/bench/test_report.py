"""Doc tables are generated from their JSON and checked: a committed table can never drift."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lookahead_sdk.bench.report import (
    blocks,
    render_engine_threads,
    render_foreground_behind,
    render_provenance,
    render_router_frontier,
    render_warm_up_batches,
    run_report,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_committed_doc_table_matches_its_json() -> None:
    stale = run_report(ROOT, check=True)
    assert not stale, "regenerate with `lookahead-sdk report`: " + ", ".join(
        f"{b.path.relative_to(ROOT)} {b.name} <- {b.source}" for b in stale
    )
    assert any(blocks(path) for path in (ROOT / "README.md", ROOT / "docs" / "router.md"))


def test_an_edited_table_is_found_and_regenerated(tmp_path: Path) -> None:
    source = tmp_path / "docs" / "results" / "overhead.json"
    source.parent.mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "results" / "router" / "overhead.json", source)
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "Before.\n<!-- report: router-overhead docs/results/overhead.json -->\n"
        "| hand-typed | 1 ms |\n<!-- /report -->\nAfter.\n"
    )
    (tmp_path / "README.md").write_text("no tables\n")
    [stale] = run_report(tmp_path, check=True)
    assert stale.name == "router-overhead" and "hand-typed" in page.read_text()
    run_report(tmp_path)
    text = page.read_text()
    document = json.loads(source.read_text())
    overhead = document["overhead_p50_ms"]
    assert "hand-typed" not in text and f"+{overhead:.1f}" in text
    for measured in document.get("rounds", []):  # every round has its row
        assert f"+{measured['overhead_p50_ms']:.1f} / +{measured['overhead_p99_ms']:.1f}" in text
    assert text.startswith("Before.") and text.endswith("After.\n")
    assert run_report(tmp_path, check=True) == []


def test_an_unknown_table_or_a_missing_source_is_named(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("<!-- report: nope docs/x.json -->\n<!-- /report -->\n")
    with pytest.raises(ValueError, match="no report renderer 'nope'"):
        run_report(tmp_path, check=True)
    (tmp_path / "README.md").write_text("<!-- report: ttft docs/x.json -->\n<!-- /report -->\n")
    with pytest.raises(ValueError, match=r"reads docs/x\.json, missing"):
        run_report(tmp_path, check=True)


def test_the_router_engine_table_shows_every_run_and_its_verdicts() -> None:
    from lookahead_sdk.bench.report import RENDERERS

    document = json.loads((ROOT / "docs/results/router/router_engine.json").read_text())
    text = RENDERERS["router-engine"](document)
    for run in document["runs"]:
        [row] = [
            line
            for line in text.splitlines()
            if line.startswith(run["arm"] + " ") and f" {run['repeat'] + 1} " in line
        ]
        assert f"{run['steps_per_min']:.1f}" in row
    for name, target in document["targets"].items():
        assert f"- {name}: {'met' if target['met'] else 'NOT met'}" in text
    document["targets"]["thunder_over_session"]["met"] = False
    assert "- thunder_over_session: NOT met" in RENDERERS["router-engine"](document)


@pytest.mark.parametrize(
    ("engine_threads", "shown"), [(None, None), (1, "on 1 thread,"), (2, "on 2 threads,")]
)
def test_the_provenance_line_names_the_engine_threads_a_run_used(
    engine_threads: int | None, shown: str | None
) -> None:
    stamp = {"commit": "abcdef1234567", "engine_build": "b1", "machine": {"cpus": 2}}
    line = render_provenance({"provenance": stamp, "engine_threads": engine_threads})
    assert line.startswith("Measured at commit `abcdef1234`, engine build `b1`")
    if shown is None:
        assert "thread" not in line
    else:
        assert shown in line


def test_the_engine_threads_table_compares_each_load_with_the_idle_machine() -> None:
    def row(threads: int, busy: int, prompt: float, decode: float) -> dict[str, float]:
        return {
            "threads": threads,
            "busy_loops": busy,
            "prompt_ms_per_token": prompt,
            "decode_ms_per_token": decode,
        }

    table = render_engine_threads(
        {"rows": [row(1, 0, 3.0, 24.0), row(2, 0, 2.0, 14.0), row(2, 1, 50.0, 2800.0)]}
    )
    lines = table.splitlines()
    assert len(lines) == 5
    assert lines[2] == "| 1 | 0 | 3.00 | 24.0 | 1.0x | 1.0x |"
    assert lines[4] == "| 2 | 1 | 50.00 | 2800.0 | 25.0x | 200.0x |"


def test_the_foreground_behind_table_sets_each_arm_against_the_request_alone() -> None:
    rows = [
        {"arm": arm, "foreground_s": seconds}
        for arm, seconds in [
            ("alone", 0.9),
            ("engine_batches", 1.4),
            ("batches_16", 0.95),
            ("alone", 1.0),
            ("engine_batches", 1.2),
            ("batches_16", 0.85),
        ]
    ]
    medians = {"alone": 0.95, "engine_batches": 1.3, "batches_16": 0.9}
    lines = render_foreground_behind({"median_foreground_s": medians, "rows": rows}).splitlines()
    assert lines[2:] == [
        "| alone | 0.950 | 0.900-1.000 | +0.000 |",
        "| engine batches | 1.300 | 1.200-1.400 | +0.350 |",
        "| batches 16 | 0.900 | 0.850-0.950 | -0.050 |",
    ]


def test_the_router_overhead_runs_table_has_a_row_per_run_counting_rounds_met() -> None:
    from lookahead_sdk.bench.report import RUNS_RENDERERS

    def run(commit: str, overheads: list[float]) -> dict[str, object]:
        rounds = [
            {"direct": {"p50_ms": 5.0 + i}, "overhead_p50_ms": o, "overhead_p99_ms": 2 * o}
            for i, o in enumerate(overheads)
        ]
        return {
            "provenance": {"commit": commit},
            "rounds": rounds,
            "overhead_p50_ms": max(overheads),
            "overhead_p99_ms": 2 * max(overheads),
        }

    text = RUNS_RENDERERS["router-overhead-runs"](
        [("a", run("aaaaaaa1", [1.0, 2.0, 2.5])), ("b", run("bbbbbbb2", [0.5]))]
    )
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `aaaaaaa` | 3 | 5.0-7.0 ms | +2.5 ms | 2 / 3 (<= 2 ms) | +5.0 ms |",
        "| `bbbbbbb` | 1 | 5.0-5.0 ms | +0.5 ms | 1 / 1 (<= 2 ms) | +1.0 ms |",
    ]


def test_runs_that_share_a_file_name_are_told_apart_by_their_folder(tmp_path: Path) -> None:
    """A run beside the one it replaced (kept under history/<commit>/, same file name) gets its
    folder in the table; a name only one source has stays bare."""
    results = tmp_path / "docs" / "results"
    older = results / "history" / "abc1234"
    older.mkdir(parents=True)
    run = ROOT / "docs" / "results" / "ttft_4agents_sim_h200.json"
    shutil.copy(run, results / "run.json")
    shutil.copy(run, older / "run.json")
    shutil.copy(run, results / "other.json")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "<!-- report: ttft-targets docs/results/history/abc1234/run.json,docs/results/run.json,"
        "docs/results/other.json -->\n<!-- /report -->\n"
    )
    (tmp_path / "README.md").write_text("no tables\n")
    run_report(tmp_path)
    rows = page.read_text().splitlines()
    assert any(row.startswith("abc1234/run ") for row in rows)
    assert any(row.startswith("results/run ") for row in rows)
    assert any(row.startswith("other ") for row in rows)
    assert not any(row.startswith("run ") and "offload" in row for row in rows)  # the header aside


def test_the_warm_up_batch_tables_set_each_batch_against_the_engines_and_each_arm_against_serial() -> (
    None
):
    document = {
        "median_tokens_per_s": {
            "1024": {"128": 260.0, "32": 260.0},
            "4096": {"128": 100.0, "32": 130.0},
        },
        "median_mixed_s": {"one_after_the_other": 12.0, "chunks_batches_32": 10.8},
    }
    text = render_warm_up_batches(document)
    assert "| 4096 | 100 | 130 (+30%) |" in text
    assert "| 1024 | 260 | 260 (+0%) |" in text
    assert "| chunks batches 32 | 10.80 | 0.900 |" in text
    assert "| one after the other | 12.00 | 1.000 |" in text


def test_the_router_frontier_table_has_a_row_per_setting_with_each_seed() -> None:
    defaults = {"aging_s": 40.0, "swap_budget": 0.12, "decay_half_life_s": 1.0}
    defaults["pause_order"] = "idle_longest"

    def point(budget: float, seed: int, hold: float, worst: float, forced: int = 0) -> dict:
        both = hold <= 60 and forced == 0 and worst >= 0.9
        knobs = {**defaults, "swap_budget": budget}
        return {
            **knobs, "seed": seed, "worst_hold_p99_s": hold, "forced_admits": forced,
            "worst_over_peak": worst, "reprefill_tokens_at_2x": 10_300_000, "both_met": both,
        }  # fmt: skip

    document = {
        "setup": {"thunder_config": defaults},
        "frontier": [
            point(0.08, 0, 71.2, 0.95), point(0.08, 1, 78.0, 0.90, forced=2),
            point(0.12, 0, 49.0, 0.87), point(0.12, 1, 57.4, 0.91),
        ],
    }  # fmt: skip
    lines = render_router_frontier(document).splitlines()
    assert len(lines) == 4  # header, rule, two settings
    assert (
        lines[2]
        == "| aging 40 s, budget 0.08 | 71 / 78 (2 forced) | 10.3 / 10.3 | 0.95 / 0.90 | 0 of 2 |"
    )
    assert lines[3].startswith("| **aging 40 s, budget 0.12 (default)** | 49 / 57 |")
    assert lines[3].endswith("| 0.87 / 0.91 | 1 of 2 |")

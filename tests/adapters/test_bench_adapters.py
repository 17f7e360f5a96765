"""`bench adapters`: the overhead runs with each framework's fake model, the summary and the plot."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest

from lookahead_sdk.bench.adapters import (
    ExampleRun,
    merge_repeats,
    plot,
    run_overhead,
    summary,
    summary_tables,
)
from lookahead_sdk.bench.common import percentile

TURNS = 12


@pytest.fixture(scope="module")
def overhead_runs() -> list[dict]:
    return [asdict(run) for run in run_overhead(TURNS, ("langchain", "llamaindex", "autogen"))]


def test_every_adapter_reports_its_time_per_turn(overhead_runs: list[dict]) -> None:
    names = [run["framework"] for run in overhead_runs]
    assert names == ["langchain", "langchain (sync hooks)", "llamaindex", "autogen"]
    for run in overhead_runs:
        # one entry per tool-calling turn (the first and the final answer turn are left out)
        assert len(run["hook_ms"]) >= TURNS - 2
        assert all(ms > 0 for ms in run["hook_ms"])
        assert run["turn_ms"] > 0


def test_summary_and_plot_come_from_the_raw_lists(
    overhead_runs: list[dict], tmp_path: Path
) -> None:
    sync = ExampleRun(
        "LangChain agent", "sync", transform_ttft_s=[4.0, 6.0, 5.0], normal_ttft_s=[1.0, 1.2]
    )
    look = ExampleRun(
        "LangChain agent", "lookahead", transform_ttft_s=[1.0, 2.0], normal_ttft_s=[1.1]
    )
    document = {
        "overhead_target_ms": 1.0,
        "overhead_runs": overhead_runs,
        "ttft_runs": [{**asdict(run), "framework_key": "langchain"} for run in (sync, look)],
    }
    result = summary(document)
    row = result["ttft"]["langchain"]
    expected = 1 - percentile(look.transform_ttft_s, 50) / percentile(sync.transform_ttft_s, 50)
    assert row["reduction"] == pytest.approx(expected)
    assert row["sync_transform_turns"] == len(sync.transform_ttft_s)
    for run in overhead_runs:
        assert result["overhead"][run["framework"]]["p50_ms"] == percentile(run["hook_ms"], 50)
    png = plot(document, tmp_path / "adapters.png")
    assert png.stat().st_size > 0 and png.read_bytes()[:4] == b"\x89PNG"


def test_the_turns_waits_are_tabled_per_framework_once_recorded(
    overhead_runs: list[dict],
) -> None:
    causes = dict.fromkeys(
        ("before_request", "warm_up", "background_llm", "slot_copy", "other_foreground"), 0.0
    )
    runs = [
        ExampleRun(
            "LangChain agent",
            mode,
            transform_ttft_s=[2.0],
            normal_ttft_s=[1.0, 1.0],
            turn_wait_s={
                "normal": {**causes, "alone": 1.6, "warm_up": 0.4},
                "transform": {**causes, "alone": 2.0},
            },
            background={
                "warm_up": {"requests": 3, "seconds": 1.5, "during_foreground_wait_s": 0.4}
            },
        )
        for mode in ("sync", "lookahead")
    ]
    document = {
        "overhead_runs": overhead_runs,
        "ttft_runs": [{**asdict(run), "framework_key": "langchain"} for run in runs],
    }
    titles = [table.title for table in summary_tables(document)]
    assert "Where the TTFT went (mean ms per turn)" in titles
    waits = next(t for t in summary_tables(document) if t.title.startswith("Where"))
    cells = {column.header: list(column.cells) for column in waits.columns}
    assert cells["run"][0] == "langchain sync N"
    assert cells["warm-up"][0] == "200" and cells["alone"][0] == "800"  # mean ms per turn
    for run in document["ttft_runs"]:
        del run["turn_wait_s"]  # recorded before the timeline: no such table
    assert not any(t.title.startswith("Where") for t in summary_tables(document))


def test_repeated_runs_pool_their_turns_and_count_wall_time_and_background_per_run() -> None:
    def run(wall_s: float, normal: list[float], requests: int) -> ExampleRun:
        return ExampleRun(
            "Reference agent",
            "lookahead",
            transform_ttft_s=[1.0],
            normal_ttft_s=normal,
            wall_s=wall_s,
            turn_wait_s={"normal": {"alone": sum(normal)}},
            background={"warm_up": {"requests": requests, "seconds": 2.0}},
        )

    merged = merge_repeats([run(60.0, [1.0, 1.2], 4), run(64.0, [0.9], 6)])
    assert merged.repeats == 2 and merged.wall_s_each == [60.0, 64.0]
    assert merged.wall_s == 62.0
    assert merged.normal_ttft_s == [1.0, 1.2, 0.9] and merged.transform_ttft_s == [1.0, 1.0]
    assert merged.turn_wait_s["normal"]["alone"] == pytest.approx(3.1)  # per turn: / 3 turns
    assert merged.background["warm_up"] == {"requests": 5.0, "seconds": 2.0}
    document = {
        "overhead_runs": [],
        "ttft_runs": [
            {**asdict(r), "framework_key": "reference"}
            for r in (
                merge_repeats([replace(run(50.0, [1.0], 0), mode="sync")] * 2),
                merged,
            )
        ],
    }
    row = summary(document)["ttft"]["reference"]
    assert row["lookahead_ttft_sum_s"] == pytest.approx((2.0 + 3.1) / 2)  # per run
    assert row["wall_ratio"] == pytest.approx(62.0 / 50.0)

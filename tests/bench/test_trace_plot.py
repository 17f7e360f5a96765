"""`bench ttft --trace`'s picture: which runs are drawn, in what order, and the file itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lookahead_sdk.bench.trace_plot import plot_trace, runs_to_plot


def traced_run(strategy: str, mode: str, repeat: int) -> dict[str, Any]:
    commit = "sync" if mode == "sync" else "hit"
    return {
        "strategy": strategy,
        "mode": mode,
        "repeat": repeat,
        "duration_s": 12.0,
        "turns": [
            {"program_id": "p0", "commit": "none", "started_s": 0.0, "first_token_s": 0.4},
            {"program_id": "p0", "commit": commit, "started_s": 5.0, "first_token_s": 7.5},
            {"program_id": "p1", "commit": "none", "started_s": 1.0, "first_token_s": 1.3},
        ],
        "requests": [
            {"kind": "foreground", "program_id": "p0", "sent_s": 0.0, "first_output_s": 0.4, "ended_s": 2.0},
            {"kind": "warm_up", "program_id": "p0", "sent_s": 2.5, "first_output_s": 3.0, "ended_s": 3.0},
            {"kind": "background_llm", "program_id": "p0", "sent_s": 3.0, "first_output_s": 3.2, "ended_s": None},
            {"kind": "other", "program_id": "p1", "sent_s": 0.9, "first_output_s": 0.95, "ended_s": 0.95},
            {"kind": "foreground", "program_id": "p1", "sent_s": 1.0, "first_output_s": 1.3, "ended_s": 4.0},
        ],
    }  # fmt: skip


def test_each_strategys_first_repeat_is_drawn_sync_above_lookahead() -> None:
    runs = [
        traced_run("summarize", "lookahead", 0),
        traced_run("summarize", "sync", 0),
        traced_run("offload", "sync", 0),
        traced_run("summarize", "sync", 1),
        traced_run("offload", "lookahead", 0),
    ]
    shown = [(run["strategy"], run["mode"]) for run in runs_to_plot(runs)]
    assert shown == [
        ("summarize", "sync"),
        ("summarize", "lookahead"),
        ("offload", "sync"),
        ("offload", "lookahead"),
    ]


def test_the_timelines_are_written_and_an_empty_trace_is_refused(tmp_path: Path) -> None:
    runs = [traced_run("keep_recent", "sync", 0), traced_run("keep_recent", "lookahead", 0)]
    path = plot_trace(runs, tmp_path / "trace.png")
    assert path.stat().st_size > 10_000
    with pytest.raises(ValueError, match="no runs to plot"):
        plot_trace([traced_run("keep_recent", "sync", 1)], tmp_path / "none.png")

"""`bench router --mode engine` end to end at its smallest: it starts two embedded llama-servers
and a `router serve` per arm, runs 2 programs x 2 steps through each, and writes the JSON and
the plot (the figures themselves are not judged here)."""

from __future__ import annotations

import argparse
import json

import pytest

from lookahead_sdk.bench import router as bench

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]


def test_engine_mode_writes_its_json_and_plot(tmp_path) -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    path, plot = tmp_path / "engine.json", tmp_path / "engine.png"
    args = parser.parse_args(
        ["--mode", "engine", "--json", str(path), "--plot", str(plot), "--programs", "2",
         "--steps", "2", "--repeats", "1", "--arms", "thunder,session", "--tool-latency-s", "0.1"]
    )  # fmt: skip
    assert bench.main(args) == 0
    document = json.loads(path.read_text())
    assert document["mode"] == "engine" and document["provenance"]["machine"]["cpus"] >= 1
    assert document["settings"]["programs"] == 2 and document["setup"]["kv_tokens_per_backend"]
    runs = document["runs"]
    assert [(r["arm"], r["repeat"]) for r in runs] == [("thunder", 0), ("session", 0)]
    for run in runs:
        assert run["programs_completed"] == 2 and run["errors"] == []
        assert run["requests"] == {"ok": 4} and run["context_trims"] == 0
        assert run["steps_per_min"] > 0 and 0 < run["step_p50_s"] <= run["step_p99_s"]
        assert run["prefill_tokens"] > 0 and run["hold_max_s"] >= run["hold_p99_s"] >= 0
        assert {"forced_admits", "reprefill_tokens", "overload", "pauses"} <= set(run)
    targets = document["targets"]
    assert set(targets) == {"thunder_over_session", "every_program_completes"}
    assert targets["every_program_completes"]["met"] is True
    assert set(targets["thunder_over_session"]["per_repeat"]) == {"0"}
    assert plot.stat().st_size > 0

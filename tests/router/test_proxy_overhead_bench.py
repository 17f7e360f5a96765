"""`bench router --mode overhead` end to end at a tiny size: it starts its engine and router
processes, measures both arms and writes the JSON (the figures themselves are not judged here)."""

from __future__ import annotations

import argparse
import json

import pytest

from lookahead_sdk.bench import router as bench

pytestmark = pytest.mark.timeout(180)


def test_overhead_mode_writes_its_json(tmp_path) -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    path = tmp_path / "overhead.json"
    args = parser.parse_args(
        ["--mode", "overhead", "--json", str(path), "--streams", "2",
         "--requests-per-stream", "3", "--time-scale", "0.2", "--rounds", "2"]
    )  # fmt: skip
    assert bench.main(args) == 0
    document = json.loads(path.read_text())
    assert document["mode"] == "overhead" and document["samples_per_arm"] == 12
    for arm in ("direct", "router"):
        assert 0 < document[arm]["p50_ms"] <= document[arm]["p99_ms"]
    assert len(document["rounds"]) == 2
    for measured in document["rounds"]:
        for arm in ("direct", "router"):
            assert 0 < measured[arm]["p50_ms"] <= measured[arm]["p99_ms"]
    # Judged on the worst round, never on the pool.
    assert document["overhead_p50_ms"] == max(r["overhead_p50_ms"] for r in document["rounds"])
    assert document["overhead_p99_ms"] == max(r["overhead_p99_ms"] for r in document["rounds"])
    assert set(document["targets"]) == {"overhead_p50", "overhead_p99"}
    assert document["provenance"]["machine"]["cpus"] >= 1

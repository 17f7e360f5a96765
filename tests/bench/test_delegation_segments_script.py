"""scripts/delegation_segments.py splits an Isolate trace into delegations: each main-agent reply
paired with its own sub-agent's first request, the warm-ups of that program between them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "delegation_segments.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("delegation_segments", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def _request(kind: str, program: str, sent: float, first: float, ended: float) -> dict[str, Any]:
    return {
        "kind": kind,
        "program_id": program,
        "path": "/v1/chat/completions",
        "sent_s": sent,
        "first_output_s": first,
        "ended_s": ended,
        "batch_tokens": None,
    }


def _run() -> dict[str, Any]:
    # Two agents interleaved: a0 delegates twice, a1 once; a1's warm-up falls inside a0's first
    # delegation and must not be counted there. a0's second sub-agent makes two requests.
    return {
        "strategy": "isolate",
        "mode": "lookahead",
        "repeat": 0,
        "duration_s": 20.0,
        "requests": [
            _request("foreground", "a0", 0.0, 0.2, 1.0),
            _request("warm_up", "a0", 0.3, 0.6, 0.6),
            _request("warm_up", "a1", 0.55, 0.7, 0.7),
            _request("warm_up", "a0", 0.6, 0.9, 0.9),
            _request("foreground", "a1", 0.5, 0.8, 2.0),
            _request("foreground", "a0/sub0", 1.1, 1.3, 1.5),
            _request("foreground", "a1/sub0", 2.5, 3.5, 3.6),
            _request("foreground", "a0", 4.0, 4.1, 4.5),
            _request("foreground", "a0/sub1", 4.5, 5.0, 5.2),
            _request("foreground", "a0/sub1", 6.0, 6.1, 6.2),
        ],
        "turns": [],
    }


def test_each_reply_is_paired_with_its_own_subagent_and_warm_ups() -> None:
    rows = _script().delegations(_run())
    assert len(rows) == 3  # a0 twice, a1 once; a sub-agent's second request is no delegation
    first, second, third = rows
    assert first.warm_ups == 2 and first.warm_up_s == pytest.approx(0.6)  # a1's is not a0's
    assert first.reply_ttft_s == pytest.approx(0.2)
    assert first.reply_decode_s == pytest.approx(0.8)
    assert first.gap_s == pytest.approx(0.1)
    assert first.subagent_ttft_s == pytest.approx(0.2)
    assert first.span_s == pytest.approx(1.3)
    assert second.span_s == pytest.approx(3.0)  # a1: sent 0.5, its sub-agent's first token 3.5
    assert second.warm_ups == 1
    assert third.span_s == pytest.approx(1.0) and third.warm_ups == 0


def test_the_command_prints_each_isolate_run(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    other = {**_run(), "strategy": "offload"}
    trace.write_text(json.dumps({"provenance": {}, "runs": [_run(), other]}))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(trace)], capture_output=True, text=True, check=True
    ).stdout
    assert out.count("== lookahead") == 1  # the offload run is skipped
    assert "span_s=5.30" in out

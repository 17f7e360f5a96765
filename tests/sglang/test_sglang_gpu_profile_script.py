"""scripts/gpu_profile_qwen3_8b.py at tiny shapes on the CPU (it needs torch, which only this
environment has): it runs, and `lookahead-sdk calibrate` code accepts and fits its output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lookahead_sdk.scheduling.calibrate import calibrate
from lookahead_sdk.scheduling.measurements import load_measurements

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_profile_qwen3_8b.py"


def test_tiny_profile_run_feeds_the_calibration(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--device", "cpu", "--out", str(out),
         "--warmup", "1", "--repeats", "2"],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    measured = load_measurements(out)
    kinds = {
        (bool(m.batch.decode_contexts), bool(m.batch.prefill_chunks)) for m in measured.batches
    }
    assert kinds == {(True, False), (False, True), (True, True)}
    assert measured.metadata["gemm_only_ms"]
    report = calibrate(measured.batches, name="tiny-cpu", heldout_frac=0.0)
    assert report.profile.alpha_decode_ms >= 0 and report.profile.alpha_prefill_ms >= 0

"""Profile and measurement files with bad values fail with a
ValueError naming the field, and SGLang plugin settings are checked when they are read (at
registration), not at the scheduler's first batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lookahead_sdk.scheduling import LatencyProfile
from lookahead_sdk.scheduling.measurements import MEASUREMENTS_SCHEMA, load_measurements
from lookahead_sdk.sglang_plugin.settings import PluginSettings

PROFILE = {
    "schema": "lookahead-sdk/latency-profile/v1",
    "name": "x",
    "gemm_table_ms": [[1, 1.0], [8, 2.0]],
    "alpha_decode_ms": 0.0,
    "alpha_prefill_ms": 0.0,
}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("gemm_table_ms", [[float("inf"), 1.0]], r"gemm_table_ms\[0\]\[0\] must be a whole"),
        ("gemm_table_ms", [[float("nan"), 1.0]], r"gemm_table_ms\[0\]\[0\] must be a whole"),
        ("gemm_table_ms", [[1, None]], r"gemm_table_ms\[0\]\[1\] must be a finite number"),
        ("gemm_table_ms", [[1, "5"]], r"gemm_table_ms\[0\]\[1\] must be a finite number"),
        ("gemm_table_ms", [[1, True]], r"gemm_table_ms\[0\]\[1\] must be a finite number"),
        ("gemm_table_ms", 5, "gemm_table_ms must be a list of"),
        ("gemm_table_ms", [3], r"gemm_table_ms\[0\] must be a \[tokens, ms\] pair"),
        ("token_only_table_ms", [[1, "x"]], r"token_only_table_ms\[0\]\[1\]"),
        ("alpha_decode_ms", True, "alpha_decode_ms must be a finite number"),
    ],
)
def test_bad_profile_values_raise_value_error_naming_the_field(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LatencyProfile.from_json({**PROFILE, field: value})


def test_whole_float_token_counts_still_load() -> None:
    profile = LatencyProfile.from_json({**PROFILE, "gemm_table_ms": [[1.0, 1], [8.0, 2]]})
    assert profile.gemm_table.tokens == (1, 8) and profile.gemm_table.ms == (1.0, 2.0)


def write_batches(tmp_path: Path, batch: dict[str, Any], **document: Any) -> Path:
    path = tmp_path / "batches.json"
    path.write_text(json.dumps({"schema": MEASUREMENTS_SCHEMA, "batches": [batch], **document}))
    return path


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({"prefill_chunks": [[512.9, 4096]], "latency_ms": 21.5}, r"prefill_chunks\[0\]\[0\]"),
        ({"prefill_chunks": [["64", 0]], "latency_ms": 21.5}, r"prefill_chunks\[0\]\[0\]"),
        ({"prefill_chunks": [[64, True]], "latency_ms": 21.5}, r"prefill_chunks\[0\]\[1\]"),
        ({"prefill_chunks": [[64, 0]], "latency_ms": True}, "latency_ms"),
        ({"prefill_chunks": [[64, 0]], "latency_ms": "21.5"}, "latency_ms"),
    ],
)
def test_measurements_with_bad_values_are_refused(
    tmp_path: Path, batch: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=rf"batches\[0\]: .*{message}"):
        load_measurements(write_batches(tmp_path, batch))


def test_measurement_metadata_must_be_an_object(tmp_path: Path) -> None:
    batch = {"prefill_chunks": [[64, 0]], "latency_ms": 2.0}
    with pytest.raises(ValueError, match="'metadata' must be a JSON object"):
        load_measurements(write_batches(tmp_path, batch, metadata="x"))
    loaded = load_measurements(write_batches(tmp_path, batch, metadata={"gpu": "h200"}))
    assert loaded.metadata == {"gpu": "h200"} and len(loaded.batches) == 1


def test_a_csv_row_with_a_missing_cell_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "batches.csv"
    path.write_text("decode_contexts,prefill_chunks,latency_ms\n4096,64:0,2.5\n4096,\n")
    with pytest.raises(ValueError, match=r"batches.csv line 3: .*latency_ms"):
        load_measurements(path)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LOOKAHEAD_SGLANG_TBT_MS", "0"),
        ("LOOKAHEAD_SGLANG_TTFT_MS", "0"),
    ],
)
def test_plugin_settings_that_no_policy_accepts_fail_when_read(variable: str, value: str) -> None:
    with pytest.raises(ValueError, match=variable):
        PluginSettings.from_env({variable: value})


@pytest.mark.parametrize(
    "fields",
    [
        {"tbt_bound_ms": -5.0},
        {"slo_ttft_ms": float("nan")},
        {"promote_within_ms": -1.0},
        {"min_lc_chunk_tokens": 0},
        {"max_batch_tokens": 0},
        {"be_step_ms": 0.0},
        {"be_beside_lc_prefill": "yes"},
    ],
)
def test_plugin_settings_refuse_bad_values(fields: dict[str, Any]) -> None:
    (name,) = fields
    with pytest.raises(ValueError, match=name):
        PluginSettings(**fields)


def test_valid_plugin_settings_round_trip_and_build() -> None:
    settings = PluginSettings(policy="slack-aware", be_step_ms=None, max_batch_tokens=4096)
    assert PluginSettings.from_env(settings.to_env()) == settings
    assert settings.build_policy(disaggregated_prefill=True, engine_batch_tokens=8192) is not None

"""The "where the time went" tables of `bench ttft` / `bench adapters` (`bench.ttft_waits`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from lookahead_sdk.bench.ttft_waits import waits_tables
from lookahead_sdk.client.timeline import TURN_WAIT_CAUSES


def mode_run(reply_decode_s: float | None, beside_decode_s: float | None) -> dict[str, Any]:
    warm_up: dict[str, float] = {"requests": 4, "seconds": 3.0, "during_foreground_wait_s": 0.5}
    if beside_decode_s is not None:
        warm_up["during_foreground_decode_s"] = beside_decode_s
    run: dict[str, Any] = {
        "normal_ttft_s": [0.5, 0.7],
        "transform_ttft_s": [1.0],
        "turn_wait_s": {
            kind: dict.fromkeys(TURN_WAIT_CAUSES, 0.1) for kind in ("normal", "transform")
        },
        "background": {"warm_up": warm_up},
        "gate_wait_s": 0.3,
    }
    if reply_decode_s is not None:
        run["reply_decode_s"] = reply_decode_s
    return run


def rendered(runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    console = Console(width=200, record=True)
    for table in waits_tables(runs):
        console.print(table)
    return console.export_text()


def test_the_background_table_shows_work_beside_decoding_replies_and_their_decode_time() -> None:
    text = rendered({"isolate": {"sync": mode_run(20.0, None), "lookahead": mode_run(43.0, 2.0)}})
    assert "4/3.0/0.5/2.0" in text  # requests / run / during a wait / beside a decode
    assert "20->43" in text


def test_runs_recorded_before_the_decode_measure_show_a_dash() -> None:
    text = rendered({"offload": {"sync": mode_run(None, None), "lookahead": mode_run(None, None)}})
    assert "4/3.0/0.5/-" in text
    # the background table ends with the gate seconds; decode, idle and client CPU: not measured
    assert "-      0.3" in text
    assert text.split()[-4:] == ["offload", "-", "-", "-"]


def test_the_background_table_shows_the_client_cpu_per_run() -> None:
    sync, look = mode_run(20.0, None), mode_run(43.0, 2.0)
    sync["client_cpu_s"], look["client_cpu_s"] = 1.4, 2.6
    text = rendered({"isolate": {"sync": sync, "lookahead": look}})
    # decode, idle, CPU; no engine counters in these runs, so no columns for them
    assert text.split()[-4:] == ["isolate", "20->43", "-", "1.4->2.6"]


def test_the_background_table_shows_the_engines_idle_time_per_run() -> None:
    sync, look = mode_run(20.0, None), mode_run(43.0, 2.0)
    sync["engine_idle_s"], look["engine_idle_s"] = 31.6, 4.2
    text = rendered({"keep_recent": {"sync": sync, "lookahead": look}})
    assert text.split()[-4:] == ["keep_recent", "20->43", "32->4", "-"]


def test_the_whole_run_table_shows_what_the_engine_counted_and_its_busy_time_per_token() -> None:
    sync, look = mode_run(20.0, None), mode_run(43.0, 2.0)
    sync.update(wall_s=297.5, engine_idle_s=34.4)
    look.update(wall_s=315.5, engine_idle_s=23.7)
    sync["engine_counters"] = {
        "prompt_tokens": 42744, "generated_tokens": 3362, "decode_calls": 1275,
        "busy_slots_per_call": 3.0,
    }  # fmt: skip
    look["engine_counters"] = {
        "prompt_tokens": 43813, "generated_tokens": 3582, "decode_calls": 1170,
        "busy_slots_per_call": 3.5,
    }  # fmt: skip
    text = rendered({"keep_recent": {"sync": sync, "lookahead": look}})
    # 263.1 s busy over 46,106 tokens -> 5.71 ms; 291.8 s over 47,395 -> 6.16 ms
    assert text.split()[-3:] == ["46.1K->47.4K", "1275->1170", "5.71->6.16"]


def test_a_run_without_engine_counters_on_one_side_shows_dashes() -> None:
    sync, look = mode_run(20.0, None), mode_run(43.0, 2.0)
    look.update(wall_s=10.0, engine_idle_s=1.0)
    look["engine_counters"] = {
        "prompt_tokens": 1, "generated_tokens": 1, "decode_calls": 1, "busy_slots_per_call": 1.0
    }  # fmt: skip
    text = rendered({"isolate": {"sync": sync, "lookahead": look}})
    assert text.split()[-3:] == ["-", "-", "-"]


def test_the_prompt_cache_table_shows_saves_their_main_loop_time_and_loads_per_run() -> None:
    sync, look = mode_run(20.0, None), mode_run(43.0, 2.0)
    activity = {
        "saves": 4, "saved_tokens": 12284, "saved_mib": 270.1, "loads": 0, "loaded_tokens": 0,
        "update_s": 3.26, "longest_update_s": 1.037,
    }  # fmt: skip
    sync["prompt_cache"] = activity
    look["prompt_cache"] = {**activity, "saves": 10, "saved_tokens": 27090, "loads": 1,
                            "loaded_tokens": 1732, "update_s": 7.64, "longest_update_s": 1.11}  # fmt: skip
    text = rendered({"keep_recent": {"sync": sync, "lookahead": look}})
    assert "RAM prompt cache" in text
    # Recorded before the engine could skip saves: no discards counted.
    assert text.split()[-8:] == [
        "keep_recent", "4->10", "-", "12284->27090", "3.3->7.6", "1.04->1.11", "0->1", "0->1732"
    ]  # fmt: skip
    sync["prompt_cache"] = {**activity, "discards": 0, "discarded_tokens": 0}
    look["prompt_cache"] = {**look["prompt_cache"], "saves": 1, "discards": 9}
    text = rendered({"keep_recent": {"sync": sync, "lookahead": look}})
    assert text.split()[-8:-5] == ["keep_recent", "4->1", "0->9"]


def test_runs_without_prompt_cache_activity_get_no_prompt_cache_table() -> None:
    text = rendered({"isolate": {"sync": mode_run(20.0, None), "lookahead": mode_run(43.0, 2.0)}})
    assert "RAM prompt cache" not in text

"""bench ttft's targets are judged per run; the pool is shown beside the runs, never instead."""

from __future__ import annotations

from typing import Any

import pytest

from lookahead_sdk.bench.report import _rich_text, render_ttft_targets
from lookahead_sdk.bench.ttft import summary_tables
from lookahead_sdk.bench.ttft_targets import (
    burst_rows,
    commit_size_rows,
    mean_reduction,
    target_rows,
    targets_tables,
    whole_run_rows,
)


def strategy(sync_t: list[float], look_t: list[float], look_n: list[float]) -> dict[str, Any]:
    empty = {"prefilled_prompt_tokens": 0, "normal_new_tokens": [], "transform_new_tokens": []}
    return {
        "sync": {**empty, "transform_ttft_s": sync_t, "normal_ttft_s": [1.0], "wall_s": 60.0},
        "lookahead": {
            **empty,
            "transform_ttft_s": look_t,
            "normal_ttft_s": look_n,
            "transform_turns": len(look_t),
            "lookahead_hits": len(look_t),
            "stale": 0,
            "fallbacks": 0,
            "extra_prompt_tokens": 0,
            "wasted_prompt_tokens": 0,
            "wall_s": 60.0,
        },
    }


def run(offload_look: list[float]) -> dict[str, Any]:
    return {
        "agents": 1,
        "steps": 28,
        "model": "m",
        "strategies": {
            "offload": strategy([4.0] * 5, offload_look, [1.0] * 5),
            "summarize": strategy([10.0, 10.0], [1.0, 1.0], [1.0] * 5),
        },
    }


def test_a_target_is_met_per_run_and_the_pool_never_decides() -> None:
    good, bad = run([1.0] * 5), run([2.0] * 5)  # offload 0.25x and 0.5x of sync
    rows = target_rows([("good", good), ("bad", bad)])
    offload = {row.run: row for row in rows if row.strategy == "offload"}
    assert offload["good"].ratio == pytest.approx(0.25) and offload["good"].ratio_met
    assert offload["bad"].ratio == pytest.approx(0.5) and not offload["bad"].ratio_met
    assert offload["bad"].transform_vs_normal == pytest.approx(2.0)
    assert not offload["bad"].transform_vs_normal_met
    pooled = offload["pool of 2"]
    assert pooled.pooled and pooled.turns == 10 and pooled.turns_label == "10/10"
    table = _rich_text(targets_tables([("good", good), ("bad", bad)])[:1])
    [bad_offload] = [
        line for line in table.splitlines() if line.startswith("bad ") and "offload" in line
    ]
    assert "NO" in bad_offload
    [pool_line] = [line for line in table.splitlines() if "pool of 2" in line and "offload" in line]
    assert "(pooled)" in pool_line and "yes" not in pool_line and "NO" not in pool_line


def test_a_median_of_fewer_than_five_turns_is_marked() -> None:
    document = run([1.0] * 5)
    text = _rich_text(summary_tables(document))
    offload = next(line for line in text.splitlines() if line.startswith("offload"))
    summarize = next(line for line in text.splitlines() if line.startswith("summarize"))
    assert "*" not in offload and "10.00s*" in summarize and "1.00s*" in summarize
    assert "fewer than 5 transform turns" in text
    targets = render_ttft_targets([("one", document)])
    assert any(
        line.startswith("one") and "summarize" in line and "2/2*" in line
        for line in targets.splitlines()
    )


def test_the_mean_reduction_is_over_the_strategies_of_one_run() -> None:
    assert mean_reduction(run([1.0] * 5)) == pytest.approx((0.75 + 0.9) / 2)


def test_the_whole_run_is_judged_beside_the_transform_turn() -> None:
    document = run([1.0] * 5)
    for mode, wall in (("sync", 100.0), ("lookahead", 110.0)):
        for name in document["strategies"]:
            document["strategies"][name][mode]["wall_s"] = wall
    document["strategies"]["offload"]["lookahead"]["normal_ttft_s"] = [1.2] * 5
    [offload] = [row for row in whole_run_rows([("r", document)]) if row.strategy == "offload"]
    assert offload.normal_ratio == pytest.approx(1.2) and not offload.normal_ratio_met
    assert offload.wall_ratio == pytest.approx(1.1) and not offload.wall_ratio_met
    assert offload.sync_ttft_sum_s == pytest.approx(21.0)
    assert offload.lookahead_ttft_sum_s == pytest.approx(11.0) and offload.ttft_sum_met


def test_repeated_runs_show_each_repeats_wall_ratio_beside_the_mean_runs() -> None:
    document = run([1.0] * 5)
    for mode, walls in (("sync", [100.0, 104.0]), ("lookahead", [99.0, 110.0])):
        for strategy in document["strategies"].values():
            strategy[mode].update(repeats=2, wall_s_each=walls, wall_s=sum(walls) / 2)
    [offload] = [row for row in whole_run_rows([("r", document)]) if row.strategy == "offload"]
    assert offload.wall_ratio == pytest.approx(104.5 / 102.0) and not offload.wall_ratio_met
    assert offload.wall_ratio_each == pytest.approx((0.99, 110.0 / 104.0))
    text = " ".join(render_ttft_targets([("r", document)]).split())  # the caption wraps
    assert "each repeat's wall l/s: r offload 0.990, 1.058;" in text
    single = run([1.0] * 5)  # one run: no per-repeat ratios, no caption
    assert all(not row.wall_ratio_each for row in whole_run_rows([("one", single)]))
    assert "each repeat" not in render_ttft_targets([("one", single)])


def test_a_ratio_that_rounds_onto_its_target_shows_the_digit_that_decides() -> None:
    document = run([1.4004] * 5)  # offload 1.4004 / 4.0 = 0.3501: above 0.35
    text = _rich_text(targets_tables([("edge", document)])[:1])
    [offload] = [
        line for line in text.splitlines() if line.startswith("edge") and "offload" in line
    ]
    assert "0.3501" in offload and "NO" in offload


def test_runs_of_different_setups_are_never_pooled() -> None:
    one_thread, two_threads = run([1.0] * 5), run([2.0] * 5)
    one_thread["engine_threads"], two_threads["engine_threads"] = 1, 2
    repeat = {**run([1.5] * 5), "engine_threads": 1}
    rows = target_rows([("t1", one_thread), ("t2", two_threads), ("t1 again", repeat)])
    pools = [row for row in rows if row.pooled and row.strategy == "offload"]
    assert [(row.run, row.turns) for row in pools] == [("pool of 2", 10)]
    assert pools[0].ratio == pytest.approx(1.25 / 4.0)  # t1 and its repeat, not t2
    four_agents = {**run([1.0] * 5), "engine_threads": 1, "agents": 4}
    rows = target_rows([("t1", one_thread), ("four", four_agents)])
    assert not [row for row in rows if row.pooled]
    without_small_batches = {**run([1.0] * 5), "engine_threads": 1, "small_batches": False}
    rows = target_rows(
        [("t1", {**one_thread, "small_batches": True}), ("a/b", without_small_batches)]
    )
    assert not [row for row in rows if row.pooled]


def test_commits_and_the_context_they_leave_are_judged_against_sync_per_run() -> None:
    document = run([1.0] * 5)
    offload, summarize = document["strategies"]["offload"], document["strategies"]["summarize"]
    for mode, contexts in (("sync", [900, 1000, 1100]), ("lookahead", [1000, 1300, 1500])):
        offload[mode]["transform_context_tokens"] = contexts
        offload[mode]["normal_new_tokens"] = [100, 250]
    summarize["lookahead"]["transform_ttft_s"] = [1.0, 1.0, 1.0]  # one commit more than sync
    rows = {row.strategy: row for row in commit_size_rows([("r", document)])}
    # offload: 5 commits each; p50 contexts 1000 vs 1300, one turn is 250 tokens: too large.
    assert (rows["offload"].sync_commits, rows["offload"].lookahead_commits) == (5, 5)
    assert rows["offload"].commits_met and rows["offload"].context_met is False
    offload["lookahead"]["normal_new_tokens"] = [300]
    assert commit_size_rows([("r", document)])[0].context_met is True
    # summarize: 2 against 3 commits; no contexts recorded (an older JSON): not judged.
    assert not rows["summarize"].commits_met and rows["summarize"].context_met is None
    text = _rich_text(targets_tables([("r", document)])[-1:])
    assert "5/5" in text and "1000/1300" in text and "2/3" in text and "NO" in text


def test_burst_commit_turns_are_judged_on_their_own() -> None:
    document = run([1.0] * 5)
    offload = document["strategies"]["offload"]
    for mode in ("sync", "lookahead"):
        offload[mode]["normal_new_tokens"] = [100, 120, 140]  # median 120: bursts from 240
    offload["sync"]["transform_new_tokens"] = [150, 900, 1000, 150, 150]
    offload["lookahead"]["transform_ttft_s"] = [1.0, 3.5, 3.0, 1.0, 1.0]
    offload["lookahead"]["transform_new_tokens"] = [150, 900, 1000, 150, 150]
    (row,) = burst_rows([("r", document)])  # summarize recorded no new tokens: no row
    assert (row.strategy, row.threshold_tokens, row.sync_turns, row.lookahead_turns) == (
        "offload",
        240.0,
        2,
        2,
    )
    assert row.ratio == 3.25 / 4.0 and row.met is False  # the pooled look/sync hid it: 0.25
    text = _rich_text(targets_tables([("r", document)])[-1:])
    assert "Burst commit turns" in text and "0.812" in text and "NO" in text

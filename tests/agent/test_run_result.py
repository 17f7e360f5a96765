"""`RunResult.pooled`: repeated runs of one strategy and mode as one record (`bench ttft --repeats`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_sdk.agent.driver import POOLED_COUNTS, POOLED_LISTS, RunResult


def run(wall_s: float, transform: list[float], hits: int, warm_ups: int, yields: int) -> RunResult:
    return RunResult(
        transform_ttft_s=transform,
        normal_ttft_s=[0.5, 0.6],
        transform_turns=len(transform),
        lookahead_hits=hits,
        extra_prompt_tokens=100 * hits,
        wall_s=wall_s,
        turn_wait_s={"normal": {"alone": 1.0, "warm_up": 0.25}},
        background={"warm_up": {"requests": warm_ups, "seconds": 2.0 * warm_ups}},
        gate_wait_s=float(warm_ups),
        background_yields=yields,
        reply_decode_s=10.0 * yields,
        engine_idle_s=wall_s / 10,
    )


def test_pooled_runs_keep_every_turn_and_each_wall_time() -> None:
    pooled = RunResult.pooled([run(60.0, [1.0, 1.2], 2, 4, 1), run(64.0, [0.9], 1, 6, 2)])

    assert pooled.repeats == 2 and pooled.wall_s_each == [60.0, 64.0]
    assert pooled.wall_s == pytest.approx(62.0)
    assert pooled.transform_ttft_s == [1.0, 1.2, 0.9] and len(pooled.normal_ttft_s) == 4
    assert pooled.transform_turns == 3 and pooled.lookahead_hits == 3
    assert pooled.extra_prompt_tokens == 300
    # Turn waits stay sums (a per-turn mean divides by the pooled turns) ...
    assert pooled.turn_wait_s == {"normal": {"alone": 2.0, "warm_up": 0.5}}
    # ... background load and the gate are per run.
    assert pooled.background == {"warm_up": {"requests": 5.0, "seconds": 10.0}}
    assert pooled.gate_wait_s == pytest.approx(5.0) and pooled.background_yields == 1.5
    assert pooled.reply_decode_s == pytest.approx(15.0)
    assert pooled.engine_idle_s == pytest.approx(6.2)


def test_pooling_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        RunResult.pooled([])


@given(
    st.lists(
        st.tuples(
            st.floats(1, 500),
            st.lists(st.floats(0.01, 30), max_size=6),
            st.integers(0, 6),
            st.integers(0, 50),
            st.integers(0, 9),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_pooling_loses_no_turn_and_no_token(shapes: list) -> None:
    runs = [run(*shape) for shape in shapes]
    pooled = RunResult.pooled(runs)
    for name in POOLED_LISTS:
        assert getattr(pooled, name) == [x for r in runs for x in getattr(r, name)]
    for name in POOLED_COUNTS:
        assert getattr(pooled, name) == sum(getattr(r, name) for r in runs)
    ulps = 1e-9 * max(pooled.wall_s_each)  # the mean of equal walls may round by an ulp
    assert min(pooled.wall_s_each) - ulps <= pooled.wall_s <= max(pooled.wall_s_each) + ulps
    one = RunResult.pooled(runs[:1])
    assert one.to_json() == {**runs[0].to_json(), "wall_s_each": [runs[0].wall_s]}


def test_pooled_engine_counters_are_means_per_run_and_only_when_every_run_has_them() -> None:
    first, second = run(60.0, [1.0], 1, 4, 1), run(64.0, [0.9], 1, 6, 2)
    first.engine_counters = {"prompt_tokens": 100.0, "decode_calls": 10.0}
    second.engine_counters = {"prompt_tokens": 300.0, "decode_calls": 20.0}
    assert RunResult.pooled([first, second]).engine_counters == {
        "prompt_tokens": 200.0,
        "decode_calls": 15.0,
    }
    second.engine_counters = {}  # a server that exports none: no mean of half the runs
    assert RunResult.pooled([first, second]).engine_counters == {}


def test_pooled_prompt_cache_activity_is_a_mean_per_run_only_when_every_run_has_it() -> None:
    first, second = run(60.0, [1.0], 1, 4, 1), run(64.0, [0.9], 1, 6, 2)
    first.prompt_cache = {"saves": 4.0, "update_s": 3.0}
    second.prompt_cache = {"saves": 10.0, "update_s": 8.0}
    assert RunResult.pooled([first, second]).prompt_cache == {"saves": 7.0, "update_s": 5.5}
    second.prompt_cache = {}  # its log was not read: no mean of half the runs
    assert RunResult.pooled([first, second]).prompt_cache == {}

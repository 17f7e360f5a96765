"""`bench ttft` (what `demo` runs): the JSON it writes, from a short run on the real embedded
engine, and the same-size comparison of transform and normal turns."""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import pytest

from lookahead_sdk.agent.loop import TurnRecord
from lookahead_sdk.bench.ttft import (
    TtftBenchConfig,
    plot,
    print_table,
    run_ttft_bench,
    summary_rows,
    transform_vs_same_size_normal,
)
from lookahead_sdk.cli import main as cli_main
from lookahead_sdk.engine.prompt_cache_log import PromptCacheActivity
from tests.support.engine import embedded_engine  # noqa: F401  (session fixture)

RUN_FIELDS = {
    "transform_ttft_s": list,
    "normal_ttft_s": list,
    "transform_turns": int,
    "lookahead_hits": int,
    "stale": int,
    "fallbacks": int,
    "extra_prompt_tokens": int,
    "cached_prompt_tokens": int,
}


def run(transform: list[tuple[float, int]], normal: list[tuple[float, int]]) -> dict:
    return {
        "transform_ttft_s": [t for t, _ in transform],
        "transform_new_tokens": [n for _, n in transform],
        "normal_ttft_s": [t for t, _ in normal],
        "normal_new_tokens": [n for _, n in normal],
    }


def test_transform_turns_are_compared_with_normal_turns_that_brought_as_much() -> None:
    normal = [(0.5, 100), (0.6, 110), (1.8, 340), (2.0, 360), (9.0, 2000)]
    # A 350-token commit turn against the 340/360-token normal turns (p50 1.9 s), not the small ones.
    assert transform_vs_same_size_normal(run([(1.9, 350)], normal)) == pytest.approx(1.0)
    ratios = transform_vs_same_size_normal(run([(3.8, 350), (0.55, 105), (1.1, 105)], normal))
    assert ratios == pytest.approx(2.0)  # p50 of 2.0, 1.0, 2.0
    assert math.isnan(transform_vs_same_size_normal(run([(1.0, 800)], normal)))  # none that size
    legacy = {"transform_ttft_s": [1.0], "normal_ttft_s": [0.5]}  # written before the lists
    assert math.isnan(transform_vs_same_size_normal(legacy))


@pytest.mark.engine
def test_bench_ttft_document_on_the_embedded_engine(embedded_engine, tmp_path: Path) -> None:  # noqa: F811
    config = TtftBenchConfig(
        base_url=embedded_engine.base_url,
        strategies=("keep_recent", "isolate"),
        steps=9,
        isolate_steps=2,
        window_tokens=2048,  # thresholds scale with it: the commit comes within a few steps
        tool_output_tokens=(100, 120),
        large_output_every=0,
        tool_latency_s=0.4,
        max_tokens=4,
    )
    runs_started: list[str] = []
    turns: list[tuple[str, TurnRecord]] = []
    document = asyncio.run(
        run_ttft_bench(
            config,
            on_turn=lambda turn: turns.append((runs_started[-1], turn)),
            on_run=lambda strategy, mode, repeat: runs_started.append(strategy),
        )
    )

    assert document["agents"] == 1 and document["steps"] == 9
    assert "llama.cpp" in document["engine"] and document["window_tokens"] == 2048
    assert set(document["strategies"]) == {"keep_recent", "isolate"}
    for name, runs in document["strategies"].items():
        assert set(runs) == {"sync", "lookahead"}
        for mode, result in runs.items():
            for key, kind in RUN_FIELDS.items():
                assert isinstance(result[key], kind), (name, mode, key)
            assert result["transform_turns"] == len(result["transform_ttft_s"]) >= 1, (name, mode)
            assert len(result["transform_new_tokens"]) == result["transform_turns"]
            assert len(result["normal_new_tokens"]) == len(result["normal_ttft_s"])
            assert all(t > 0 for t in result["transform_ttft_s"] + result["normal_ttft_s"])
            assert result["stale"] == 0
            # llama-server's own count of the run: every turn generated, prompts computed.
            counted = result["engine_counters"]
            turns_run = len(result["transform_ttft_s"]) + len(result["normal_ttft_s"])
            assert counted["generated_tokens"] >= turns_run and counted["prompt_tokens"] > 0
            # (at least one busy slot per call; llama-server's rounded lifetime mean, differenced
            # on the shared test engine, can read a little under 1)
            assert counted["decode_calls"] >= turns_run and counted["busy_slots_per_call"] > 0.95
        sync, look = runs["sync"], runs["lookahead"]
        assert sync["lookahead_hits"] == 0 and sync["extra_prompt_tokens"] == 0
        assert look["lookahead_hits"] + look["fallbacks"] == look["transform_turns"]
        assert look["lookahead_hits"] >= 1 and look["extra_prompt_tokens"] > 0
        # Same seeded workload in both modes: the same number of turns.
        assert len(sync["transform_ttft_s"]) + len(sync["normal_ttft_s"]) == len(
            look["transform_ttft_s"]
        ) + len(look["normal_ttft_s"])
    assert len(turns) == sum(
        len(r["transform_ttft_s"]) + len(r["normal_ttft_s"])
        for runs in document["strategies"].values()
        for r in runs.values()
    )
    # Each normal turn after the first of a reading agent brings its reply and one read.
    main_normal = [
        t for name, t in turns if name == "keep_recent" and not t.is_transform_turn and t.step
    ]
    assert main_normal and all(t.new_tokens >= 100 for t in main_normal)

    rows = summary_rows(document)
    assert [row["strategy"] for row in rows] == ["keep_recent", "isolate"]
    assert all(0 < row["ratio"] for row in rows)
    json.dumps(document, allow_nan=False)  # the JSON file is strict JSON
    assert plot(document, tmp_path / "ttft.png").stat().st_size > 10_000
    print_table(document)


@pytest.mark.engine
def test_bench_ttft_reads_each_runs_prompt_cache_from_its_own_engine_log(free_port: int) -> None:
    """With --log-prompt-cache the bench starts its own engine at trace verbosity, restarts it
    for each run, and records what the RAM prompt cache did in that run alone."""
    config = TtftBenchConfig(
        port=free_port,
        strategies=("keep_recent",),
        steps=6,
        window_tokens=1024,  # the commit comes within a few steps
        tool_output_tokens=(100, 120),
        large_output_every=0,
        tool_latency_s=0.2,
        max_tokens=4,
        log_prompt_cache=True,
    )
    document = asyncio.run(run_ttft_bench(config))
    assert document["log_prompt_cache"] is True
    fields = set(PromptCacheActivity().to_json())
    for mode, result in document["strategies"]["keep_recent"].items():
        activity = result["prompt_cache"]
        assert set(activity) == fields, mode
        assert result["transform_turns"] >= 1, mode
        # Each committed transform replaces the context its slot held. Synchronous, the server
        # places the next request and saves what it replaces; with lookahead, the request in
        # the slot holding the replaced context says it is dead, and the engine skips the save.
        if mode == "sync":
            assert activity["saves"] >= 1 and activity["saved_tokens"] > 0, activity
            assert 0 < activity["longest_update_s"] <= activity["update_s"], activity
        else:
            assert activity["discards"] >= 1 and activity["discarded_tokens"] > 0, activity


def short_sim_config(**fields: Any) -> TtftBenchConfig:
    """A short keep_recent run on the simulated H200: a 2K window and ~110-token reads."""
    return TtftBenchConfig(
        sim_profile="h200-qwen3-8b",
        strategies=("keep_recent",),
        window_tokens=2048,
        tool_output_tokens=(100, 120),
        max_tokens=4,
        **fields,
    )


def test_bench_ttft_runs_the_same_workload_on_the_simulator() -> None:
    """--sim: the simulator started as a child, its cache flushed between runs, the window the
    embedded engine's unless given, the SGLang warmer; both modes of a strategy commit alike.
    --repeats 2: the modes run in ABBA order and each mode's record pools its two runs."""
    config = short_sim_config(repeats=2, steps=9, large_output_every=0, tool_latency_s=0.2)
    order: list[tuple[str, int]] = []
    traces: list[tuple[str, int, dict[str, Any]]] = []
    document = asyncio.run(
        run_ttft_bench(
            config,
            on_run=lambda strategy, mode, repeat: order.append((mode, repeat)),
            on_trace=lambda strategy, mode, repeat, trace: traces.append(
                (mode, repeat, trace.to_json())
            ),
        )
    )

    assert order == [("sync", 0), ("lookahead", 0), ("lookahead", 1), ("sync", 1)]
    assert [(mode, repeat) for mode, repeat, _ in traces] == order
    for mode, _, trace in traces:
        assert trace["duration_s"] > 0 and trace["turns"]
        foreground = [r for r in trace["requests"] if r["kind"] == "foreground"]
        for traced in trace["turns"]:
            # Each turn's request is among the run's requests (the transport stamps it as it
            # goes out, after the loop's stamp), and its wait split adds up to its TTFT.
            assert any(
                r["program_id"] == traced["program_id"]
                and traced["sent_s"] <= r["sent_s"] <= traced["first_token_s"]
                for r in foreground
            )
            assert sum(traced["wait_s"].values()) == pytest.approx(traced["ttft_s"], abs=1e-3)
        commits = [t for t in trace["turns"] if t["commit"] != "none"]
        assert commits and all(
            t["commit"] == ("sync" if mode == "sync" else "hit") for t in commits
        )
        background = {r["kind"] for r in trace["requests"]} - {"foreground", "other"}
        assert bool(background) == (mode == "lookahead")
    assert document["engine"].startswith("simulator (h200-qwen3-8b")
    assert document["warmer"] == "sglang" and document["window_tokens"] == 2048
    assert document["repeats"] == 2
    sync, look = document["strategies"]["keep_recent"].values()
    assert sync["transform_turns"] == look["transform_turns"] >= 2
    assert len(look["transform_ttft_s"]) == look["transform_turns"]
    assert look["lookahead_hits"] >= 2 and look["stale"] == 0
    for pooled in (sync, look):
        assert pooled["repeats"] == 2 and len(pooled["wall_s_each"]) == 2
        assert pooled["engine_counters"] == {}  # the simulator exports no llama.cpp counters
        assert pooled["wall_s"] == pytest.approx(sum(pooled["wall_s_each"]) / 2)
        assert min(pooled["wall_s_each"]) > 0
        # The client's own CPU per run: some, and no more than the wall time on every CPU.
        assert 0 < pooled["client_cpu_s"] < pooled["wall_s"] * (os.cpu_count() or 1)
    with pytest.raises(ValueError, match="base_url and sim_profile"):
        TtftBenchConfig(base_url="http://127.0.0.1:1", sim_profile="h200-qwen3-8b")


@pytest.mark.parametrize(
    "server", [{"base_url": "http://127.0.0.1:1"}, {"sim_profile": "h200-qwen3-8b"}]
)
def test_the_prompt_cache_log_is_only_for_the_embedded_engine(server: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="--log-prompt-cache"):
        TtftBenchConfig(log_prompt_cache=True, **server)
    assert TtftBenchConfig(**server).log_prompt_cache is False


def test_no_agent_turn_waits_behind_another_agents_workload_setup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building a workload's plan sizes every read with the token counter (blocking server
    calls): all plans are built before the clock starts, so no first turn is measured behind
    another agent's setup; the client stack is warmed (and the cache cleared) before run one."""
    from lookahead_sdk.agent import driver
    from lookahead_sdk.agent.workload import CodeAnalysisWorkload

    events: list[tuple[str, float]] = []
    read_plan = CodeAnalysisWorkload.read_plan

    def timed_read_plan(self: CodeAnalysisWorkload) -> list:
        plan = read_plan(self)
        events.append(("plan", time.perf_counter()))
        return plan

    warm = driver.warm_client_stack

    async def recorded_warm(*args: object, **kwargs: object) -> None:
        events.append(("warm", time.perf_counter()))
        await warm(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(CodeAnalysisWorkload, "read_plan", timed_read_plan)
    monkeypatch.setattr("lookahead_sdk.bench.ttft.warm_client_stack", recorded_warm)
    config = short_sim_config(agents=3, modes=("sync",), steps=3, tool_latency_s=0.1)
    turns: list[TurnRecord] = []
    document = asyncio.run(run_ttft_bench(config, on_turn=turns.append))

    assert [kind for kind, _ in events] == ["warm", "plan", "plan", "plan"]
    first_turn = min(turn.started_at for turn in turns)
    assert max(at for kind, at in events if kind == "plan") < first_turn
    run_ = document["strategies"]["keep_recent"]["sync"]
    assert len(run_["normal_ttft_s"]) + run_["transform_turns"] == len(turns) == 9


def test_bench_ttft_trace_flag_writes_every_runs_turns_and_requests(tmp_path: Path) -> None:
    """`bench ttft --trace PATH`: one record per run beside the results, stamped like them."""
    results, trace_path = tmp_path / "ttft.json", tmp_path / "trace.json"
    argv = [
        "bench", "ttft", "--sim", "h200-qwen3-8b", "--strategies", "keep_recent",
        "--steps", "3", "--window-tokens", "2048", "--tool-output-tokens", "100,120",
        "--max-tokens", "4", "--tool-latency", "0.1",
        "--json", str(results), "--trace", str(trace_path),
    ]  # fmt: skip
    assert cli_main(argv) == 0

    trace = json.loads(trace_path.read_text())
    assert trace_path.with_suffix(".png").stat().st_size > 10_000  # the runs' timelines
    assert {"commit", "engine_build", "machine", "command"} <= set(trace["provenance"])
    assert [(r["strategy"], r["mode"], r["repeat"]) for r in trace["runs"]] == [
        ("keep_recent", "sync", 0),
        ("keep_recent", "lookahead", 0),
    ]
    document = json.loads(results.read_text())
    assert document["small_batches"] is True  # the default, recorded beside the setup
    pooled = document["strategies"]["keep_recent"]
    for run_trace in trace["runs"]:
        recorded = pooled[run_trace["mode"]]
        turns = len(recorded["transform_ttft_s"]) + len(recorded["normal_ttft_s"])
        assert len(run_trace["turns"]) == turns == 3
        assert sorted(t["ttft_s"] for t in run_trace["turns"]) == pytest.approx(
            sorted(recorded["transform_ttft_s"] + recorded["normal_ttft_s"]), abs=1e-4
        )


def test_small_batches_near_the_next_request_can_be_turned_off_for_an_a_b_run() -> None:
    """`--no-small-batches` (bench ttft and demo) reaches the run's llama.cpp warmer, and the
    document records it, so the two arms of an A/B run are never pooled."""
    from lookahead_sdk.agent.driver import run_warmer
    from lookahead_sdk.cli import build_parser
    from lookahead_sdk.client.session import ServerFacts, ServerSession
    from lookahead_sdk.client.slack import BatchSizer
    from lookahead_sdk.client.warmers import LlamaCppWarmer, OpenAIWarmer

    parser = build_parser()
    for command in (["bench", "ttft", "--json", "x.json"], ["demo"]):
        assert parser.parse_args(command).small_batches is True
        assert parser.parse_args([*command, "--no-small-batches"]).small_batches is False
    assert TtftBenchConfig().small_batches is True

    session = ServerSession(
        "http://127.0.0.1:1", wire="llamacpp", facts=ServerFacts(llamacpp=True, total_slots=4)
    )
    gate = session.gate()
    with_them = run_warmer("llamacpp", session, gate)
    assert isinstance(with_them, LlamaCppWarmer) and isinstance(with_them.yield_batches, BatchSizer)
    without = run_warmer("llamacpp", session, gate, small_batches=False)
    assert isinstance(without, LlamaCppWarmer)
    assert without.yield_batches is None and without.gate is gate
    assert isinstance(run_warmer("openai", ServerSession("http://127.0.0.1:1"), None), OpenAIWarmer)


def test_the_warm_up_batch_reaches_the_warmer_and_the_document_records_it() -> None:
    """`--warm-up-batch N` (bench ttft and demo; 0, the default: the engine's batches) reaches
    the run's llama.cpp warmer; the A/B arms differ in the setup, so they are never pooled."""
    from lookahead_sdk.agent.driver import run_warmer
    from lookahead_sdk.bench.ttft_targets import setup_of
    from lookahead_sdk.cli import build_parser
    from lookahead_sdk.client.session import ServerFacts, ServerSession
    from lookahead_sdk.client.warmers import LlamaCppWarmer

    parser = build_parser()
    for command in (["bench", "ttft", "--json", "x.json"], ["demo"]):
        assert parser.parse_args(command).warm_up_batch_tokens == 0
        assert parser.parse_args([*command, "--warm-up-batch", "32"]).warm_up_batch_tokens == 32
    assert TtftBenchConfig().warm_up_batch_tokens is None

    session = ServerSession(
        "http://127.0.0.1:1", wire="llamacpp", facts=ServerFacts(llamacpp=True, total_slots=4)
    )
    warmer = run_warmer("llamacpp", session, session.gate(), warm_up_batch_tokens=32)
    assert isinstance(warmer, LlamaCppWarmer) and warmer.warm_up_batch_tokens == 32
    default = run_warmer("llamacpp", session, session.gate())
    assert isinstance(default, LlamaCppWarmer) and default.warm_up_batch_tokens is None
    assert setup_of({"warm_up_batch_tokens": 32}) != setup_of({"warm_up_batch_tokens": None})

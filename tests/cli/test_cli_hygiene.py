"""The command line's hygiene: a bad value is one line on stderr naming the flag, exit code 2, no
traceback and nothing written; renamed flags keep their old spelling with a deprecation note;
report tables fit 80 columns; the example agents ship in the package and report every turn."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from lookahead_sdk.bench import adapters as adapters_bench
from lookahead_sdk.bench import ttft as ttft_bench
from lookahead_sdk.bench.examples import TurnRow, turn_feed, turns_table
from lookahead_sdk.cli import build_parser
from lookahead_sdk.core.runtime import CommitKind
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]


# (command line, the flag the error must name); OUT is replaced by a scratch directory.
REJECTED: list[tuple[str, str]] = [
    ("demo --strategies bogus --out OUT/demo", "--strategies"),
    ("demo --strategies offload,bogus --out OUT/demo", "--strategies"),
    ("demo --agents 0 --out OUT/demo", "--agents"),
    ("demo --tool-latency -1 --out OUT/demo", "--tool-latency"),
    ("demo --out OUT/file.txt", "--out"),
    ("calibrate --profile-data /nonexistent --save-profile OUT/p.json", "--profile-data"),
    ("calibrate --measure-embedded", "--save-profile"),
    ("calibrate --measure-embedded --save-profile OUT/p.json --heldout-frac 1", "--heldout-frac"),
    ("calibrate --measure-embedded --save-profile OUT/p.json --new-tokens 16,0", "--new-tokens"),
    ("sim serve --profile nope --kv-tokens 1000", "--profile"),
    ("sim serve --kv-tokens 0", "--kv-tokens"),
    ("sim serve --kv-tokens 1000 --port 65536", "--port"),
    ("sim serve --kv-tokens 1000 --time-scale 0", "--time-scale"),
    ("bench overhead --turns -3 --json OUT/o.json", "--turns"),
    ("bench overhead --turns 0 --json OUT/o.json", "--turns"),
    ("bench overhead --json OUT", "--json"),
    ("bench ttft --window-tokens -1 --json OUT/t.json", "--window-tokens"),
    ("bench ttft --tool-latency nan --json OUT/t.json", "--tool-latency"),
    ("bench ttft --base-url localhost:8080 --json OUT/t.json", "--base-url"),
    ("bench ttft --tool-output-tokens 650,600 --json OUT/t.json", "--tool-output-tokens"),
    ("bench adapters --frameworks langchain,bogus --json OUT/a.json", "--frameworks"),
    ("bench adapters --examples /nonexistent --json OUT/a.json", "--examples"),
    ("bench adapters --turns -3 --json OUT/a.json", "--turns"),
    ("bench sim-ttft --agents 1,0 --json OUT/s.json", "--agents"),
    ("bench sim-ttft --strategies bogus --json OUT/s.json", "--strategies"),
    ("bench slo --be-loads 1,-2 --json OUT/s.json", "--be-loads"),
    ("bench slo --duration-s 0 --json OUT/s.json", "--duration-s"),
    ("bench estimator --embedded-data /nonexistent --json OUT/e.json", "--embedded-data"),
    ("bench estimator --cv-folds 1 --json OUT/e.json", "--cv-folds"),
    ("engine start --port 0", "--port"),
    ("engine start --slots 0", "--slots"),
    ("engine start --context-length -8", "--context-length"),
    ("engine build --sdist /nonexistent.tar.gz", "--sdist"),
    ("sglang launch --dry-run --tbt-bound-ms 0", "--tbt-bound-ms"),
    ("sglang launch --dry-run --be-step-ms -1", "--be-step-ms"),
    ("sim serve --kv-tokens 1000 --be-step-ms nan", "--be-step-ms"),
    ("bench slo --be-step-ms -5 --json OUT/s.json", "--be-step-ms"),
    ("sglang launch --dry-run --profile nope", "--profile"),
    ("router serve --backends localhost:8000", "--backends"),
    ("router serve --backends http://a:1,gpu1:2", "--backends"),
    ("router serve --backends http://a:1 --port 0", "--port"),
    ("router serve --backends http://a:1 --capacity http://a:1=0", "--capacity"),
    ("router serve --backends http://a:1 --capacity a:1=5", "--capacity"),
    ("router serve --backends http://a:1 --tick-s 0", "--tick-s"),
    ("router serve --backends http://a:1 --decay-half-life-s nan", "--decay-half-life-s"),
    ("router serve --backends http://a:1 --aging-s -1", "--aging-s"),
    ("router serve --backends http://a:1 --swap-budget -0.1", "--swap-budget"),
    ("router serve --backends http://a:1 --hold-timeout-s 0", "--hold-timeout-s"),
    ("router serve --backends http://a:1 --pause-at 0", "--pause-at"),
    ("router serve --backends http://a:1 --max-body-bytes 0", "--max-body-bytes"),
    ("bench router --json OUT", "--json"),
    ("bench router --programs 16,0 --json OUT/r.json", "--programs"),
    ("bench router --seeds -1 --json OUT/r.json", "--seeds"),
    ("bench router --arms thunder,bogus --json OUT/r.json", "--arms"),
    ("bench router --profile nope --json OUT/r.json", "--profile"),
    ("bench router --jobs 0 --json OUT/r.json", "--jobs"),
    ("bench router --duration-s 0 --json OUT/r.json", "--duration-s"),
    ("bench router --mode overhead --streams 0 --json OUT/r.json", "--streams"),
    ("bench router --mode engine --steps 0 --json OUT/r.json", "--steps"),
    ("bench router --mode engine --repeats 0 --json OUT/r.json", "--repeats"),
    ("bench router --mode engine --context-length 1000 --json OUT/r.json", "--context-length"),
    ("bench router --mode engine --read-tokens 40,20 --json OUT/r.json", "--read-tokens"),
    ("bench router --mode engine --tool-latency-s -1 --json OUT/r.json", "--tool-latency-s"),
]

# Values each fine alone that do not work together, found before anything runs: one line naming
# the flags, exit code 2.
REJECTED_TOGETHER: list[tuple[str, str]] = [
    ("router serve --backends http://a:1 --pause-to 1.5", "--pause-to"),
    ("router serve --backends http://a:1 --pause-at 0.95 --restore-to 0.97", "--restore-to"),
    ("router serve --backends http://a:1,http://a:1/", "--backends"),
    ("router serve --backends http://a:1 --capacity http://b:2=5", "--capacity"),
    ("bench router --mode engine --programs 4,8 --json OUT/r.json", "--programs"),
    ("bench router --mode engine --seeds 0,1 --json OUT/r.json", "--seeds"),
    ("bench router --mode engine --arms thunder-no-queue --json OUT/r.json", "--arms"),
]


@pytest.mark.parametrize(("line", "flag"), REJECTED, ids=[line for line, _ in REJECTED])
def test_a_bad_value_is_one_line_naming_the_flag_and_exit_code_2(
    line: str, flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file.txt").write_text("not a directory")
    code, _, err = run_cli(line.replace("OUT", str(tmp_path)).split(), capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert flag in err and "error:" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]  # nothing written


@pytest.mark.parametrize(
    ("line", "flag"), REJECTED_TOGETHER, ids=[line for line, _ in REJECTED_TOGETHER]
)
def test_values_that_do_not_work_together_are_one_line_naming_the_flag(
    line: str, flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(line.replace("OUT", str(tmp_path)).split(), capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert flag in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_real_command_rejects_a_non_positive_count_without_writing(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    argv = ["bench", "overhead", "--turns", "-3", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "lookahead_sdk.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().splitlines() == [
        "lookahead-sdk bench overhead: error: argument --turns: expected an integer >= 1, "
        "got '-3' (see lookahead-sdk bench overhead --help)"
    ]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from lookahead_sdk import __version__

    assert run_cli(["--version"], capsys)[:2] == (0, f"lookahead-sdk {__version__}\n")


def test_a_setting_found_unusable_at_run_time_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing answers on port 1, so no context window is reported: the bench names the flag."""
    out = tmp_path / "ttft.json"
    code, _, err = run_cli(
        ["bench", "ttft", "--base-url", "http://127.0.0.1:1", "--json", str(out)], capsys
    )
    assert code == 2 and "--window-tokens" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


# (old spelling, new spelling, value, the Namespace field, its parsed value, the command, the
# other arguments it needs)
RENAMED = [
    ("--ctx", "--context-length", "4096", "context_length", 4096, "engine start", ""),
    ("--window", "--window-tokens", "4096", "window_tokens", 4096, "bench ttft", "--json t.json"),
    ("--tbt-ms", "--tbt-bound-ms", "40", "tbt_bound_ms", 40.0, "sglang launch", ""),
    ("--ttft-ms", "--slo-ttft-ms", "400", "slo_ttft_ms", 400.0, "sglang launch", ""),
    ("--out", "--save-profile", "p.json", "save_profile", Path("p.json"), "calibrate", "--measure-embedded"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "value", "field", "parsed", "command", "extra"), RENAMED)
def test_a_renamed_flag_keeps_its_old_spelling_hidden_with_a_note(
    old: str,
    new: str,
    value: str,
    field: str,
    parsed: object,
    command: str,
    extra: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    argv = [*command.split(), *extra.split()]
    assert getattr(parser.parse_args([*argv, new, value]), field) == parsed
    assert capsys.readouterr().err == ""
    assert getattr(parser.parse_args([*argv, old, value]), field) == parsed
    note = capsys.readouterr().err.strip().splitlines()
    assert note == [f"lookahead-sdk {command}: warning: {old} is deprecated, use {new}"]
    code, shown, _ = run_cli([*command.split(), "--help"], capsys)
    assert code == 0 and new in shown
    assert f"{old} " not in shown.replace(new, "") and f"{old}\n" not in shown.replace(new, "")


# -- tables at 80 columns ----------------------------------------------------------------------


def render(print_report: object, *args: object) -> str:
    buffer = io.StringIO()
    print_report(*args, console=Console(file=buffer, width=80))  # type: ignore[operator]
    return buffer.getvalue()


def ttft_run(transform: list[float], normal: list[float], hits: int) -> dict:
    return {
        "transform_ttft_s": transform,
        "transform_new_tokens": [640] * len(transform),
        "normal_ttft_s": normal,
        "normal_new_tokens": [630] * len(normal),
        "transform_turns": len(transform),
        "lookahead_hits": hits,
        "stale": 1,
        "fallbacks": len(transform) - hits,
        "extra_prompt_tokens": 123_456,
        "prefilled_prompt_tokens": 1_234_567,
        "wasted_prompt_tokens": 98_765,
    }


def test_the_demo_table_fits_80_columns_with_every_figure_whole() -> None:
    document = {
        "agents": 4,
        "steps": 28,
        "model": "SmolLM2-135M-Instruct (embedded llama.cpp engine, Q8_0)",
        "strategies": {
            name: {
                "sync": ttft_run([12.345, 17.5], [1.25, 1.5], 0),
                "lookahead": ttft_run([1.4, 1.6], [1.2, 1.3], 2),
            }
            for name in ("offload", "keep_recent", "summarize", "isolate")
        },
    }
    text = render(ttft_bench.print_table, document)
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    for figure in ("14.92s", "1.50s", "90%", "2/2", "123456", "98765", "keep_recent"):
        assert figure in text, figure


def test_the_adapters_report_fits_80_columns() -> None:
    document = {
        "ttft_runs": [
            {
                "framework_key": name,
                "mode": mode,
                "transform_ttft_s": [10.25, 11.5] if mode == "sync" else [1.25],
                "normal_ttft_s": [1.0, 1.1],
            }
            for name in adapters_bench.FRAMEWORKS
            for mode in adapters_bench.MODES
        ],
        "overhead_runs": [
            {"framework": name, "hook_ms": [0.412, 0.5, 0.75], "turn_ms": 12.34}
            for name in ("langchain", "langchain (sync hooks)", "llamaindex", "autogen")
        ],
    }
    text = render(adapters_bench.print_summary, document)
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    assert "langchain (sync hooks)" in text and "10.88s" in text and "0.500 ms" in text


def test_the_example_report_fits_80_columns() -> None:
    rows = [TurnRow(i, kind, 12_345, 1.234) for i, kind in enumerate(CommitKind)]
    buffer = io.StringIO()
    Console(file=buffer, width=80).print(
        turns_table("AutoGen AssistantAgent, lookahead mode, SmolLM2-135M-Instruct", rows)
    )
    assert "…" not in buffer.getvalue() and "fallback" in buffer.getvalue()


def test_the_simulator_bench_tables_fit_80_columns() -> None:
    from lookahead_sdk.bench import sim_ttft, slo

    point = slo.SloPoint(lc_ttft_ms=[123.4, 4567.8], tbt_ms=[12.5, 99.9], lookaheads=10)
    slo_table = slo._table([0.0, 16.0], {"vanilla": [point, point], "lookahead": [point, point]})
    runs = [
        {"agents": 16, "strategy": "keep_recent", "sync_p50_s": 12.345, "lookahead_p50_s": 1.234}
        | {"sync_p90_s": 23.456, "lookahead_p90_s": 2.345}
    ]
    for table, name in ((slo_table, "lookahead_aware"), (sim_ttft._table(runs), "keep_recent")):
        buffer = io.StringIO()
        Console(file=buffer, width=80).print(table)
        assert "…" not in buffer.getvalue() and name in buffer.getvalue()


def test_the_router_engine_bench_table_fits_80_columns() -> None:
    from lookahead_sdk.bench import router_engine

    runs = [
        {"arm": arm, "repeat": 1, "programs": 16, "steps": 12, "overload": 1.37,
         "slot_overload": 2.0, "steps_per_min": 1234.5, "step_p50_s": 12.34, "step_p99_s": 123.4,
         "hold_p99_s": 123.4, "hold_max_s": 300.2, "forced_admits": 12,
         "reprefill_tokens": 1_234_567, "programs_completed": 16}
        for arm in ("thunder", "session", "round-robin", "least-loaded")
    ]  # fmt: skip
    targets = router_engine.evaluate_targets(runs)
    text = render(router_engine.print_summary, {"runs": runs, "targets": targets})
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    for figure in ("least-loaded", "1234.5", "12.3/123.4", "123/300", "1234567", "16/16"):
        assert figure in text, figure


def test_router_serve_flags_set_the_policy() -> None:
    from lookahead_sdk.cli.router import config_from_args

    args = build_parser().parse_args(
        ["router", "serve", "--backends", "http://a:1,http://b:2/v1", "--aging-s", "60",
         "--swap-budget", "0.08", "--capacity", "http://a:1=5000,http://b:2=6000",
         "--capacity", "http://a:1=7000", "--decay-half-life-s", "0"]
    )  # fmt: skip
    config = config_from_args(args)
    assert config.backends == ("http://a:1", "http://b:2")
    assert config.capacities == {"http://a:1": 7000, "http://b:2": 6000}
    assert (config.thunder.aging_s, config.thunder.swap_budget) == (60.0, 0.08)
    assert config.thunder.decay_half_life_s == 0.0


# -- the example agents ------------------------------------------------------------------------


def test_the_turn_feed_reports_each_turn_once_it_is_complete() -> None:
    rows: list[TurnRow] = []
    seen: list[tuple[int, float | None]] = []

    async def agent() -> None:
        async with turn_feed(lambda: list(rows), lambda r: seen.append((r.turn, r.ttft_s)), 0.01):
            rows.append(TurnRow(0, CommitKind.NONE, 100, None))  # waiting for its first token
            await asyncio.sleep(0.05)
            assert seen == []
            rows[0] = TurnRow(0, CommitKind.NONE, 100, 0.5)
            await asyncio.sleep(0.05)
            assert seen == [(0, 0.5)]
            rows.append(TurnRow(1, CommitKind.HIT, 200, None))  # never gets a first token
            rows.append(TurnRow(2, CommitKind.NONE, 300, None))
            await asyncio.sleep(0.05)
            assert seen == [(0, 0.5), (1, None)]

    asyncio.run(agent())
    assert seen == [(0, 0.5), (1, None), (2, None)]  # the last one when the run ended


def test_bench_adapters_runs_the_packaged_examples() -> None:
    for framework in adapters_bench.FRAMEWORKS:
        command = adapters_bench.example_command(framework, None)
        assert command[:2] == [sys.executable, "-m"]
        assert importlib.util.find_spec(command[2]) is not None


@pytest.mark.parametrize("framework", adapters_bench.FRAMEWORKS)
def test_each_example_script_is_a_wrapper_importing_public_names(framework: str) -> None:
    tree = ast.parse((ROOT / "examples" / f"{framework}_agent.py").read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert [(node.module, [a.name for a in node.names]) for node in imports] == [  # type: ignore[union-attr]
        (f"lookahead_sdk.bench.examples.{framework}_agent", ["main", "run"])
    ]


def test_an_example_script_runs_and_rejects_a_bad_value() -> None:
    script = str(ROOT / "examples" / "reference_agent.py")
    shown = subprocess.run(
        [sys.executable, script, "--help"], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0 and "--tool-latency" in shown.stdout
    rejected = subprocess.run(
        [sys.executable, script, "--steps", "0"], capture_output=True, text=True, timeout=120
    )
    assert rejected.returncode == 2 and "Traceback" not in rejected.stderr
    assert len(rejected.stderr.strip().splitlines()) == 1 and "--steps" in rejected.stderr

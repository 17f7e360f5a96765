"""`bench adapters`: the framework adapters' figures.

1. Transform-turn TTFT, sync vs lookahead, for each framework example
   (`lookahead_sdk.bench.examples`, which `examples/*.py` run) on the embedded engine, run back to back in one invocation. Each run gets a freshly started engine,
   so no run inherits another's prefix cache; both modes run the same agent on the same task
   (temperature 0), so they see the same contexts up to the first commit. Tool calls take
   `--tool-latency` seconds (a remote sandbox, as in `bench ttft`): on llama.cpp, lookahead work
   only runs while no foreground request waits for its first token (`SlackGate`), mostly while
   tools run.
2. Each adapter's own per-turn overhead: the time spent in its hooks per model turn, measured
   with the framework's own fake model (no server) and a policy that never fires, so what is
   timed is the adapter (history sync, boundary, commit check, tag merging), not a transform.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lookahead_sdk.base.args import (
    comma_list,
    existing_dir,
    non_negative_float,
    one_of,
    output_file,
    port,
    positive_int,
)
from lookahead_sdk.bench.common import (
    compact_table,
    new_figure,
    percentile,
    progress,
    save_figure,
    write_json,
)
from lookahead_sdk.bench.ttft import DEFAULT_TOOL_LATENCY_S
from lookahead_sdk.bench.ttft_targets import FEW_TURNS, safe_ratio
from lookahead_sdk.bench.ttft_waits import WAITS_LEGEND, has_waits, waits_tables
from lookahead_sdk.client.timeline import mean_background, summed_turn_waits

FRAMEWORKS: tuple[str, ...] = ("reference", "langchain", "llamaindex", "autogen")
MODES = ("sync", "lookahead")
OVERHEAD_TARGET_MS = 1.0
TOOL_OUTPUT_WORDS = 480  # about 650 tokens, one workload step
HUGE_WINDOW = 10_000_000  # no trigger ever fires: the overhead run times the adapter alone


# -- 1. TTFT of the framework examples ---------------------------------------------------------
@dataclass
class ExampleRun:
    framework: str
    mode: str
    transform_ttft_s: list[float] = field(default_factory=list)
    normal_ttft_s: list[float] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    context_tokens: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    load_average: tuple[float, float] = (0.0, 0.0)  # 1-minute load before and after the run
    # Where the turns' TTFT went and the background requests (`examples.write_turns`), as in
    # `bench ttft`: per turn kind and cause, per background request kind.
    turn_wait_s: dict[str, dict[str, float]] = field(default_factory=dict)
    background: dict[str, dict[str, float]] = field(default_factory=dict)
    reply_decode_s: float | None = None  # foreground replies' decoding, summed (None: older)
    # Runs pooled into this record (`merge_repeats`): turns from all of them; wall time and
    # background per run (means); each run's wall time.
    repeats: int = 1
    wall_s_each: list[float] = field(default_factory=list)


def merge_repeats(runs: list[ExampleRun]) -> ExampleRun:
    """Repeated runs of one framework and mode as one record: their turns pooled (so p50s and
    per-turn waits are over all of them), wall time and background requests per run."""
    first, count = runs[0], len(runs)
    merged = ExampleRun(
        first.framework,
        first.mode,
        wall_s=sum(run.wall_s for run in runs) / count,
        load_average=(first.load_average[0], runs[-1].load_average[1]),
        repeats=count,
        wall_s_each=[run.wall_s for run in runs],
    )
    for run in runs:
        merged.transform_ttft_s += run.transform_ttft_s
        merged.normal_ttft_s += run.normal_ttft_s
        merged.commits += run.commits
        merged.context_tokens += run.context_tokens
    merged.turn_wait_s = summed_turn_waits(run.turn_wait_s for run in runs)
    merged.background = mean_background([run.background for run in runs])
    decodes = [run.reply_decode_s for run in runs if run.reply_decode_s is not None]
    merged.reply_decode_s = sum(decodes) / len(decodes) if decodes else None
    return merged


def example_command(framework: str, examples: Path | None) -> list[str]:
    """How to run a framework's example: the packaged module, or a script in `examples`."""
    if examples is None:
        return [sys.executable, "-m", f"lookahead_sdk.bench.examples.{framework}_agent"]
    return [sys.executable, str(examples / f"{framework}_agent.py")]


def run_example(
    example: list[str], base_url: str, mode: str, steps: int, tool_latency_s: float
) -> ExampleRun:
    with tempfile.TemporaryDirectory(prefix="lookahead-bench-") as scratch:
        out = Path(scratch) / "rows.json"
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        command = [
            *example,
            "--quiet",
            "--base-url",
            base_url,
            "--mode",
            mode,
            "--steps",
            str(steps),
            "--tool-latency",
            str(tool_latency_s),
            "--json",
            str(out),
        ]
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"{' '.join(example[1:])} --mode {mode} failed ({completed.returncode}):\n"
                f"{completed.stderr[-3000:]}"
            )
        document = json.loads(out.read_text())
    run = ExampleRun(
        document["framework"],
        mode,
        wall_s=time.perf_counter() - started,
        load_average=(load_before, os.getloadavg()[0]),
        turn_wait_s=document.get("turn_wait_s", {}),
        background=document.get("background", {}),
        reply_decode_s=document.get("reply_decode_s"),
    )
    for row in document["rows"]:
        run.commits.append(row["commit"])
        run.context_tokens.append(row["context_tokens"])
        if row["ttft_s"] is not None:
            (run.normal_ttft_s if row["commit"] == "none" else run.transform_ttft_s).append(
                row["ttft_s"]
            )
    return run


def run_ttft(
    frameworks: tuple[str, ...],
    steps: int,
    tool_latency_s: float,
    examples: Path | None,
    port: int,
    on_run: Callable[[str, str, int], None],
    repeats: int = 1,
) -> list[ExampleRun]:
    """Per framework, one record per mode (sync, lookahead) pooling `repeats` runs. The modes
    alternate in ABBA order (sync, lookahead, lookahead, sync, ...), so a machine that slows
    down or speeds up during the runs weighs on both alike."""
    from lookahead_sdk.bench.ttft import EmbeddedEngine

    engine = EmbeddedEngine(agents=1, port=port)
    runs = []
    try:
        for framework in frameworks:
            example = example_command(framework, examples)
            done: dict[str, list[ExampleRun]] = {mode: [] for mode in MODES}
            for repeat in range(repeats):
                for mode in MODES if repeat % 2 == 0 else MODES[::-1]:
                    on_run(framework, mode, repeat)
                    base_url = engine.restart()  # a clean prefix cache for every run
                    done[mode].append(run_example(example, base_url, mode, steps, tool_latency_s))
            runs.extend(merge_repeats(done[mode]) for mode in MODES)
    finally:
        engine.stop()
    return runs


# -- 2. adapter overhead with each framework's fake model ---------------------------------------
@dataclass
class OverheadRun:
    framework: str
    turns: int
    hook_ms: list[float]  # adapter time per model turn
    turn_ms: float  # the framework's whole turn with the fake model, adapter included (mean)

    @property
    def p50_ms(self) -> float:
        return percentile(self.hook_ms, 50)

    @property
    def p99_ms(self) -> float:
        return percentile(self.hook_ms, 99)


def tool_output(n: int) -> str:
    """A distinct ~650-token output per call, so no count or digest is served from a cache."""
    return f"[{n}] " + " ".join(f"def f{n}_{k}(x): return x" for k in range(TOOL_OUTPUT_WORDS // 5))


def _kept(turns: int) -> int:
    """Records an overhead run keeps: every turn of it (the adapters keep the recent 1,000)."""
    return turns + 2


def _steady(clock_turns_ms: list[float]) -> list[float]:
    """Drop the first turn (it creates the runtime and its thread) and the final answer turn."""
    return clock_turns_ms[1:-1] if len(clock_turns_ms) > 2 else clock_turns_ms


def overhead_langchain(turns: int, *, sync: bool) -> OverheadRun:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import StructuredTool

    from lookahead_sdk.adapters.langchain import LookaheadMiddleware
    from lookahead_sdk.strategies import Summarize

    class ToolCallingFake(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:
            return self

    replies = [
        AIMessage("", tool_calls=[{"name": "read", "args": {"n": i}, "id": f"c{i}"}])
        for i in range(turns)
    ]
    replies.append(AIMessage("done"))
    read = StructuredTool.from_function(func=tool_output, name="read", description="read chunk n")
    middleware = LookaheadMiddleware(
        Summarize(), window_tokens=HUGE_WINDOW, keep_calls=_kept(turns)
    )
    agent = create_agent(
        ToolCallingFake(messages=iter(replies)),
        [read],
        system_prompt="Analyze.",
        middleware=[middleware],
    )
    state = {"messages": [{"role": "user", "content": "go"}]}
    config = {"recursion_limit": 4 * turns + 10}
    started = time.perf_counter()
    try:
        if sync:
            agent.invoke(state, config)
        else:
            asyncio.run(agent.ainvoke(state, config))
    finally:
        middleware.close()
    wall_ms = (time.perf_counter() - started) * 1000
    return OverheadRun(
        "langchain" if not sync else "langchain (sync hooks)",
        turns,
        _steady(middleware.clock.turns_ms),
        wall_ms / (turns + 1),
    )


def overhead_llamaindex(turns: int) -> OverheadRun:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ToolCallBlock
    from llama_index.core.llms import ChatMessage
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    from lookahead_sdk.adapters.llamaindex import LookaheadLLM
    from lookahead_sdk.strategies import Summarize

    calls = iter(range(turns + 1))

    def respond(messages: Any, **kwargs: Any) -> ChatMessage:
        i = next(calls)
        if i == turns:
            return ChatMessage(role="assistant", content="done")
        return ChatMessage(
            role="assistant",
            blocks=[ToolCallBlock(tool_call_id=f"c{i}", tool_name="read", tool_kwargs={"n": i})],
        )

    def read(n: int) -> str:
        """read chunk n"""
        return tool_output(n)

    llm = LookaheadLLM(
        MockFunctionCallingLLM(response_generator=respond, is_chat_model=True),
        Summarize(),
        window_tokens=HUGE_WINDOW,
        keep_calls=_kept(turns),
    )
    agent = FunctionAgent(tools=[read], llm=llm, system_prompt="Analyze.")

    async def go() -> None:
        try:
            await agent.run("go", memory=llm.memory(), max_iterations=turns + 5)
        finally:
            await llm.aclose()

    started = time.perf_counter()
    asyncio.run(go())
    wall_ms = (time.perf_counter() - started) * 1000
    return OverheadRun("llamaindex", turns, _steady(llm.clock.turns_ms), wall_ms / (turns + 1))


def overhead_autogen(turns: int) -> OverheadRun:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import EVENT_LOGGER_NAME, FunctionCall
    from autogen_core.models import CreateResult, ModelFamily, RequestUsage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext
    from lookahead_sdk.strategies import Summarize

    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    results: list[CreateResult | str] = [
        CreateResult(
            finish_reason="function_calls",
            content=[FunctionCall(id=f"c{i}", name="read", arguments=json.dumps({"n": i}))],
            usage=usage,
            cached=False,
        )
        for i in range(turns)
    ]
    results.append(CreateResult(finish_reason="stop", content="done", usage=usage, cached=False))
    info = {
        "vision": False,
        "function_calling": True,
        "json_output": False,
        "structured_output": False,
        "family": ModelFamily.UNKNOWN,
    }
    client = ReplayChatCompletionClient(results, model_info=info)  # type: ignore[arg-type]

    def read(n: int) -> str:
        """read chunk n"""
        return tool_output(n)

    context = LookaheadChatCompletionContext(
        Summarize(),
        model_client=client,
        system_message="Analyze.",
        window_tokens=HUGE_WINDOW,
        keep_calls=_kept(turns),
    )
    agent = AssistantAgent(
        "analyst",
        client,
        tools=[read],
        system_message="Analyze.",
        model_context=context,
        max_tool_iterations=turns + 1,
    )

    async def go() -> None:
        try:
            await agent.run(task="go")
        finally:
            await context.aclose()

    events = logging.getLogger(EVENT_LOGGER_NAME)
    level = events.level
    events.setLevel(logging.ERROR)  # the replay client warns on every token count
    started = time.perf_counter()
    try:
        asyncio.run(go())
    finally:
        events.setLevel(level)
    wall_ms = (time.perf_counter() - started) * 1000
    return OverheadRun("autogen", turns, _steady(context.clock.turns_ms), wall_ms / (turns + 1))


def run_overhead(turns: int, frameworks: tuple[str, ...]) -> list[OverheadRun]:
    runners: dict[str, list[Callable[[], OverheadRun]]] = {
        "langchain": [
            lambda: overhead_langchain(turns, sync=False),
            lambda: overhead_langchain(turns, sync=True),
        ],
        "llamaindex": [lambda: overhead_llamaindex(turns)],
        "autogen": [lambda: overhead_autogen(turns)],
    }
    return [runner() for name in frameworks for runner in runners.get(name, [])]


# -- report --------------------------------------------------------------------------------------
def summary(document: dict[str, Any]) -> dict[str, Any]:
    ttft: dict[str, dict[str, float]] = {}
    for run in document["ttft_runs"]:
        row = ttft.setdefault(run["framework_key"], {})
        row[f"{run['mode']}_transform_p50_s"] = percentile(run["transform_ttft_s"], 50)
        row[f"{run['mode']}_normal_p50_s"] = percentile(run["normal_ttft_s"], 50)
        row[f"{run['mode']}_transform_turns"] = len(run["transform_ttft_s"])
        row[f"{run['mode']}_ttft_sum_s"] = (
            sum(run["transform_ttft_s"]) + sum(run["normal_ttft_s"])
        ) / run.get("repeats", 1)  # per run
        row[f"{run['mode']}_wall_s"] = run.get("wall_s", math.nan)
    for row in ttft.values():
        sync, look = row.get("sync_transform_p50_s"), row.get("lookahead_transform_p50_s")
        row["reduction"] = (
            1 - look / sync if sync and look == look and sync == sync else float("nan")
        )
        row["normal_ratio"] = safe_ratio(
            row.get("lookahead_normal_p50_s"), row.get("sync_normal_p50_s")
        )
        row["wall_ratio"] = safe_ratio(row.get("lookahead_wall_s"), row.get("sync_wall_s"))
    overhead = {
        run["framework"]: {
            "p50_ms": percentile(run["hook_ms"], 50),
            "p99_ms": percentile(run["hook_ms"], 99),
            "turn_ms": run["turn_ms"],
        }
        for run in document["overhead_runs"]
    }
    return {"ttft": ttft, "overhead": overhead}


def plot(document: dict[str, Any], path: str | Path) -> Path:
    figure, axes = new_figure(1, 2, size=(13, 4.5))
    left, right = axes[0]
    by_key: dict[str, dict[str, dict[str, Any]]] = {}
    for run in document["ttft_runs"]:
        by_key.setdefault(run["framework_key"], {})[run["mode"]] = run
    names = list(by_key)
    for x, name in enumerate(names):
        for offset, mode, color in ((-0.15, "sync", "tab:blue"), (0.15, "lookahead", "tab:orange")):
            run = by_key[name].get(mode)
            if run is None:
                continue
            values = run["transform_ttft_s"]
            left.scatter(
                [x + offset] * len(values),
                values,
                color=color,
                alpha=0.7,
                label=f"{mode} transform turn" if x == 0 else None,
            )
            if values:
                left.hlines(percentile(values, 50), x + offset - 0.1, x + offset + 0.1, color=color)
            normal = run["normal_ttft_s"]
            if normal:
                left.hlines(
                    percentile(normal, 50),
                    x + offset - 0.1,
                    x + offset + 0.1,
                    color="gray",
                    linestyles="dotted",
                    label="normal turn p50" if x == 0 and mode == "sync" else None,
                )
    left.set_xticks(range(len(names)), names)
    left.set(ylabel="TTFT (s)", title="transform-turn TTFT per framework example (bar: p50)")
    if names:
        left.legend(fontsize=8)
    else:
        left.text(
            0.5,
            0.5,
            "TTFT runs not measured (--skip-ttft)",
            ha="center",
            va="center",
            transform=left.transAxes,
        )
    runs = document["overhead_runs"]
    xs = range(len(runs))
    right.bar([x - 0.2 for x in xs], [percentile(r["hook_ms"], 50) for r in runs], 0.4, label="p50")
    right.bar([x + 0.2 for x in xs], [percentile(r["hook_ms"], 99) for r in runs], 0.4, label="p99")
    right.axhline(document["overhead_target_ms"], color="red", linestyle="--", label="p50 target")
    right.set_xticks(list(xs), [r["framework"] for r in runs], fontsize=8)
    right.set(ylabel="adapter time per turn (ms)", title="adapter overhead per turn (fake model)")
    right.legend(fontsize=8)
    return save_figure(figure, path)


ADAPTERS_LEGEND = (
    "p50 TTFT of T: transform turns (a commit or a synchronous transform), N: normal turns; "
    "cut: 1 - look T / sync T; N l/s: look N / sync N; wall l/s: the lookahead runs' mean wall "
    "time / the sync runs'. Each mode runs --repeats times in ABBA order, turns pooled. "
    "Overhead: the adapter's own time per model turn (fake model), and the framework's whole "
    "turn."
)


def summary_tables(document: dict[str, Any]) -> list[Table]:
    """The summary in tables that fit 80 columns (ADAPTERS_LEGEND explains the headers)."""
    result = summary(document)
    tables = []
    if result["ttft"]:
        ttft = compact_table(
            "Transform-turn TTFT p50 (framework examples, embedded engine)",
            ("framework", "sync T", "look T", "cut", "sync N", "look N", "N l/s", "wall l/s"),
        )
        few_turns = False
        for name, row in result["ttft"].items():
            sync_few = row.get("sync_transform_turns", 0) < FEW_TURNS
            look_few = row.get("lookahead_transform_turns", 0) < FEW_TURNS
            few_turns |= sync_few or look_few
            ttft.add_row(
                name,
                _seconds(row.get("sync_transform_p50_s"))
                + (f"*{row.get('sync_transform_turns', 0)}" if sync_few else ""),
                _seconds(row.get("lookahead_transform_p50_s"))
                + (f"*{row.get('lookahead_transform_turns', 0)}" if look_few else ""),
                "-" if math.isnan(row["reduction"]) else f"{row['reduction']:.0%}",
                _seconds(row.get("sync_normal_p50_s")),
                _seconds(row.get("lookahead_normal_p50_s")),
                _times(row["normal_ratio"]),
                _times(row["wall_ratio"]),
            )
        if few_turns:
            ttft.caption = f"*n: p50 of n < {FEW_TURNS} transform turns"
        tables.append(ttft)
    if result["overhead"]:
        target = document.get("overhead_target_ms", OVERHEAD_TARGET_MS)
        overhead = compact_table(
            f"Adapter overhead per model turn (target p50 <= {target} ms, this run)",
            ("adapter", "p50", "met", "p99", "framework turn"),
        )
        for name, row in result["overhead"].items():
            overhead.add_row(
                name,
                f"{row['p50_ms']:.3f} ms",
                "yes" if row["p50_ms"] <= target else "NO",
                f"{row['p99_ms']:.3f} ms",
                f"{row['turn_ms']:.2f} ms",
            )
        tables.append(overhead)
    return [*tables, *waits_tables(runs_by_framework(document), name="framework")]


def runs_by_framework(document: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """The example runs as `bench ttft` has its strategies': framework -> mode -> run."""
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    for run in document["ttft_runs"]:
        runs.setdefault(run["framework_key"], {})[run["mode"]] = run
    return runs


def _times(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def _seconds(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}s"


def print_summary(document: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    for table in summary_tables(document):
        console.print(table)
    console.print(ADAPTERS_LEGEND, markup=False, highlight=False)
    if has_waits(runs_by_framework(document)):
        console.print(WAITS_LEGEND, markup=False, highlight=False)


def main(args: argparse.Namespace) -> int:
    frameworks: tuple[str, ...] = args.frameworks
    document: dict[str, Any] = {
        "overhead_target_ms": OVERHEAD_TARGET_MS,
        "steps": args.steps,
        "repeats": args.repeats,
        "tool_latency_s": args.tool_latency,
        "overhead_turns": args.turns,
        "ttft_runs": [],
        "overhead_runs": [],
    }
    with progress() as bar:
        task = bar.add_task("adapter overhead (fake models)", total=None)
        document["overhead_runs"] = [asdict(run) for run in run_overhead(args.turns, frameworks)]
        if not args.skip_ttft:

            def on_run(framework: str, mode: str, repeat: int) -> None:
                bar.update(
                    task,
                    description=f"{framework} example, {mode} mode ({repeat + 1}/{args.repeats})",
                )

            runs = run_ttft(
                frameworks,
                args.steps,
                args.tool_latency,
                args.examples,
                args.port,
                on_run,
                repeats=args.repeats,
            )
            document["ttft_runs"] = [
                {**asdict(run), "framework_key": key}
                for run, key in zip(runs, [f for f in frameworks for _ in MODES], strict=True)
            ]
            document["model"] = "SmolLM2-135M-Instruct (embedded llama.cpp engine)"
    document["summary"] = summary(document)
    write_json(args.json, document)
    if args.plot:
        plot(document, args.plot)
    print_summary(document)
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "adapters", help="framework adapters: transform-turn TTFT sync vs lookahead, hook overhead"
    )
    parser.add_argument(
        "--json", type=output_file, required=True, metavar="PATH", help="the JSON results"
    )
    parser.add_argument("--plot", type=output_file, metavar="PATH", help="a PNG plot")
    parser.add_argument(
        "--frameworks",
        type=comma_list(one_of(FRAMEWORKS)),
        default=FRAMEWORKS,
        metavar="F,F,...",
        help=f"comma-separated, among {','.join(FRAMEWORKS)} (default: all)",
    )
    parser.add_argument(
        "--steps", type=positive_int, default=16, help="model calls per example run"
    )
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=2,
        help="runs per framework and mode, in ABBA order; turns are pooled (a noisy machine "
        "drifts by more than the effect measured from one run to the next)",
    )
    parser.add_argument(
        "--tool-latency",
        type=non_negative_float,
        default=DEFAULT_TOOL_LATENCY_S,
        help="mean seconds a tool call takes in the examples (a remote sandbox; 0.5x-1.5x per call)",
    )
    parser.add_argument(
        "--turns", type=positive_int, default=200, help="turns per overhead run (fake models)"
    )
    parser.add_argument(
        "--examples",
        type=existing_dir,
        metavar="DIR",
        help="run NAME_agent.py scripts from DIR (e.g. edited copies) instead of the packaged "
        "examples (lookahead_sdk.bench.examples)",
    )
    parser.add_argument(
        "--port", type=port, default=8095, help="embedded engine port (restarted for every run)"
    )
    parser.add_argument(
        "--skip-ttft", action="store_true", help="only the overhead part (no engine)"
    )
    parser.set_defaults(func=main)

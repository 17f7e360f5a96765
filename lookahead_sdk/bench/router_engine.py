"""`lookahead-sdk bench router --mode engine`: agent programs on real engines, one arm per routing
policy. Two embedded llama-servers with few slots and a small context per slot, with the
host-memory prompt cache off (`--cache-ram 0`: a prompt evicted from a slot is computed again, as
on a GPU engine without KV offload), behind `lookahead-sdk router serve` (its own process, fresh
for every run). Each arm runs the same programs: seeded reference agents on the code-analysis
workload, each starting with source handed over with its task and reading more at every step,
with tool latency. Arms are interleaved within each repeat, and every run starts from empty
slots.

Sizing: a llama.cpp slot holds one sequence, so the fleet holds `backends` x `slots` programs'
contexts; the defaults keep each context between ~0.55 and ~0.9 of a slot, so 8 programs need
twice the 2 x 2 slots (in tokens a KV overload of ~1.4x: each run records its `overload` from the
engine's prompt sizes). Past the slots, the engine gives a waiting request a slot that holds
another program's context and computes the whole prompt again; the program-aware router instead
pauses whole programs until there is room.

Per run: steps/min (all programs' model calls over the run's wall time), step latency (the
client's time from wanting a model call to its last token, waits at the router included), holds
(`x-router-held-ms` on each answer), forced admits, pauses, restores and migrations (the router's
`/metrics`), re-prefilled tokens (per step, the part of the program's previous prompt the engine
did not serve from its cache, from llama.cpp's usage), and whether every program completed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from rich.progress import Progress

from lookahead_sdk.agent.driver import run_program
from lookahead_sdk.agent.loop import AgentRun, TurnRecord
from lookahead_sdk.agent.workload import CodeAnalysisWorkload
from lookahead_sdk.base.args import (
    Number,
    non_negative_float,
    non_negative_int,
    positive_int,
    positive_int_range,
)
from lookahead_sdk.base.tokens import TokenCounter, auto_token_counter
from lookahead_sdk.bench.common import (
    compact_table,
    free_port,
    new_figure,
    percentile,
    progress,
    save_figure,
    write_json,
)
from lookahead_sdk.bench.router_overhead import serve_process
from lookahead_sdk.client.transport import tagged_async_http_client
from lookahead_sdk.engine.config import DEFAULT_PORT, KV_PAD, MODEL_CONTEXT, EngineConfig
from lookahead_sdk.engine.model import DEFAULT_QUANTIZATION, MODEL_NAME
from lookahead_sdk.engine.server import EngineHandle, ensure_engine
from lookahead_sdk.errors import ConfigurationError
from lookahead_sdk.router.policies import POLICY_NAMES
from lookahead_sdk.router.proxy_call import HELD_HEADER
from lookahead_sdk.strategies import KeepRecent

TARGET_RATIO = 1.2  # thunder's steps/min over session affinity's, in each repeat
DEFAULT_ARMS = ("thunder", "session", "round-robin")
METRIC = "lookahead_router_"


@dataclass(frozen=True, slots=True)
class EngineBenchSettings:
    programs: int = 8
    steps: int = 8  # model calls per program
    repeats: int = 2
    arms: tuple[str, ...] = DEFAULT_ARMS
    seed: int = 0  # program i runs seed + i, in every arm and repeat
    backends: int = 2
    slots: int = 2  # per engine
    context_length: int = 1536  # tokens per slot
    task_tokens: int = 680  # source handed over with each program's task
    read_tokens: tuple[int, int] = (24, 32)  # per step
    tool_latency_s: float = 1.0  # mean; each call 0.5x-1.5x
    max_tokens: int = 8
    threads: int | None = None  # per engine; None: the machine's CPUs shared out
    cache_ram_mib: int = 0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.arms) - set(POLICY_NAMES))
        if unknown or not self.arms:
            raise ValueError(f"arms must be router policies ({', '.join(POLICY_NAMES)}): {unknown}")
        for name in ("programs", "steps", "repeats", "backends", "slots", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.engine_config()  # the engine's own checks (context length, threads, ...)

    @property
    def engine_threads(self) -> int:
        return self.threads or max(1, (os.cpu_count() or 1) // self.backends)

    @property
    def slot_overload(self) -> float:
        return self.programs / (self.backends * self.slots)

    def engine_config(self, port: int = DEFAULT_PORT) -> EngineConfig:
        return EngineConfig(
            port=port,
            slots=self.slots,
            ctx_per_slot=self.context_length,
            threads=self.engine_threads,
            cache_ram_mib=self.cache_ram_mib,
        )

    def workload(self, index: int, counter: TokenCounter) -> CodeAnalysisWorkload:
        return CodeAnalysisWorkload(
            seed=self.seed + index,
            steps=self.steps,
            token_counter=counter,
            tokens_per_output=self.read_tokens,
            large_output_every=0,
            tool_latency_s=self.tool_latency_s,
            task_tokens=self.task_tokens,
        )

    def context_policy(self) -> KeepRecent:
        """A guard, not part of the measurement: with the defaults no context reaches its limit
        (runs count `context_trims`); more steps are trimmed before they overflow the slot (our
        count of a context, message overhead included, is within ~10% of the engine's)."""
        return KeepRecent(
            budget=int(0.55 * self.context_length),
            hard_limit=int(0.9 * self.context_length),
            commit_ahead=False,
        )


@dataclass(frozen=True, slots=True)
class ProgramOutcome:
    run: AgentRun | None
    error: str | None


# --- one run -----------------------------------------------------------------------------------


@contextlib.contextmanager
def engines_running(settings: EngineBenchSettings) -> Iterator[list[EngineHandle]]:
    handles: list[EngineHandle] = []
    try:
        for _ in range(settings.backends):
            config = settings.engine_config(free_port())
            handles.append(ensure_engine(config, show_progress=False))
        yield handles
    finally:
        for handle in handles:
            if not handle.reused:
                handle.stop()


def erase_slots(engine: EngineHandle) -> None:
    """Every run starts from empty slots: no arm finds another arm's contexts cached."""
    with httpx.Client(timeout=60) as client:
        for slot in range(engine.config.slots):
            response = client.post(f"{engine.base_url}/slots/{slot}", params={"action": "erase"})
            response.raise_for_status()


def program_id(seed: int) -> str:
    return f"program-{seed}"


async def run_programs(
    settings: EngineBenchSettings, router_url: str, on_turn: Callable[[TurnRecord], None]
) -> tuple[list[ProgramOutcome], list[float], float]:
    """Every program at once through the router: outcomes, each answer's hold (ms), wall s."""
    counter = auto_token_counter()
    held_ms: list[float] = []
    header = HELD_HEADER.decode()

    async def record_hold(response: httpx.Response) -> None:
        if (value := response.headers.get(header)) is not None:
            held_ms.append(float(value))

    async def one(index: int) -> ProgramOutcome:
        try:
            run = await run_program(
                router_url,
                program_id(settings.seed + index),
                settings.workload(index, counter),
                settings.context_policy(),
                release_to=(router_url,),
                max_tokens=settings.max_tokens,
                http_client=tagged_async_http_client(event_hooks={"response": [record_hold]}),
                on_turn=on_turn,
                window_tokens=settings.context_length,
            )
        except Exception as error:  # a program that fails is a result of the run
            return ProgramOutcome(None, f"{program_id(settings.seed + index)}: {error!r}")
        return ProgramOutcome(run, None)

    started = time.perf_counter()
    outcomes = await asyncio.gather(*(one(i) for i in range(settings.programs)))
    return list(outcomes), held_ms, time.perf_counter() - started


def read_metrics(router_url: str, requests: int, timeout_s: float = 60.0) -> dict[str, float]:
    """The router's `/metrics` samples (`name{labels}` -> value) once it has counted `requests`
    requests: it counts one when its work ends, which can be just after the client has the
    answer (the rest of the backend's stream is read to its end)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = httpx.get(f"{router_url}/metrics", timeout=30).text
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        counted = sum(v for k, v in samples.items() if k.startswith(f"{METRIC}requests_total{{"))
        if counted >= requests or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


def run_arm(
    settings: EngineBenchSettings,
    arm: str,
    repeat: int,
    engines: Sequence[EngineHandle],
    bar: Progress,
) -> dict[str, Any]:
    task = bar.add_task(f"{arm}, repeat {repeat + 1}", total=settings.programs * settings.steps)
    for engine in engines:
        erase_slots(engine)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    backends = ",".join(engine.base_url for engine in engines)
    command = ["router", "serve", "--backends", backends, "--policy", arm, "--port", str(port)]
    with serve_process(command, url):
        outcomes, held_ms, wall_s = asyncio.run(
            run_programs(settings, url, lambda _: bar.advance(task))
        )
        calls = sum(len(o.run.turns) for o in outcomes if o.run is not None)
        metrics = read_metrics(url, calls)
    return run_row(settings, arm, repeat, outcomes, held_ms, wall_s, metrics)


def reprefill_tokens(turns: Sequence[TurnRecord]) -> int:
    """Of each step's predecessor prompt, the tokens the engine computed again (its slot no
    longer held them) instead of serving them from the prefix cache."""
    return sum(
        max(0, previous.prompt_tokens - turn.cached_tokens)
        for previous, turn in itertools.pairwise(turns)
    )


def run_row(
    settings: EngineBenchSettings,
    arm: str,
    repeat: int,
    outcomes: Sequence[ProgramOutcome],
    held_ms: Sequence[float],
    wall_s: float,
    metrics: dict[str, float],
) -> dict[str, Any]:
    runs = [o.run for o in outcomes if o.run is not None]
    turns = [turn for run in runs for turn in run.turns]
    latencies = [turn.total_s for turn in turns]
    holds = [ms / 1000 for ms in held_ms]
    mean_prompt = statistics.fmean(t.prompt_tokens for t in turns) if turns else 0.0
    kv_tokens = settings.backends * settings.slots * settings.context_length
    outcomes_by_kind = {
        key.split('outcome="', 1)[1].split('"', 1)[0]: int(value)
        for key, value in metrics.items()
        if key.startswith(f"{METRIC}requests_total{{")
    }

    def counter(name: str) -> int:
        return int(metrics.get(f"{METRIC}{name}_total", 0))

    return {
        "arm": arm,
        "seed": settings.seed,
        "repeat": repeat,
        "programs": settings.programs,
        "steps": settings.steps,
        "overload": round(settings.programs * mean_prompt / kv_tokens, 3),
        "slot_overload": settings.slot_overload,
        "steps_per_min": round(len(turns) / wall_s * 60, 2),
        "step_p50_s": _round(percentile(latencies, 50)),
        "step_p99_s": _round(percentile(latencies, 99)),
        "hold_p99_s": _round(percentile(holds, 99)) if holds else 0.0,
        "hold_max_s": _round(max(holds, default=0.0)),
        "held_fraction": round(sum(h > 0 for h in holds) / len(holds), 4) if holds else 0.0,
        "forced_admits": counter("forced_admits"),
        "pauses": counter("pauses"),
        "restores": counter("restores"),
        "migrations": counter("migrations"),
        "reprefill_tokens": sum(reprefill_tokens(run.turns) for run in runs),
        "prefill_tokens": sum(max(0, t.prompt_tokens - t.cached_tokens) for t in turns),
        "cached_tokens": sum(t.cached_tokens for t in turns),
        "mean_prompt_tokens": round(mean_prompt, 1),
        "context_trims": sum(t.is_transform_turn for t in turns),
        "programs_completed": sum(len(run.turns) == settings.steps for run in runs),
        "errors": [o.error for o in outcomes if o.error is not None],
        "requests": outcomes_by_kind,
        "wall_s": round(wall_s, 1),
    }


def _round(value: float) -> float:
    return round(value, 3)


# --- all runs, targets, output -----------------------------------------------------------------


def run_engine_bench(
    settings: EngineBenchSettings,
    json_path: str | None = None,
    plot_path: str | None = None,
    *,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Start the engines, run every arm `repeats` times (arms interleaved), return the JSON
    document; write it and the plot when paths are given."""
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with progress(disable=not show_progress) as bar, engines_running(settings) as engines:
        for repeat in range(settings.repeats):
            for arm in settings.arms:
                rows.append(run_arm(settings, arm, repeat, engines, bar))
        setup = _setup(settings, engines)
    document = {
        "mode": "engine",
        "settings": asdict(settings),
        "setup": {**setup, "wall_s": round(time.perf_counter() - started, 1)},
        "runs": rows,
        "targets": evaluate_targets(rows),
    }
    if json_path:
        write_json(json_path, document)
    if plot_path:
        plot_runs(plot_path, rows)
    return document


def _setup(settings: EngineBenchSettings, engines: Sequence[EngineHandle]) -> dict[str, Any]:
    return {
        "engines": [engine.base_url for engine in engines],
        "model": f"{MODEL_NAME} ({DEFAULT_QUANTIZATION})",
        "threads_per_engine": settings.engine_threads,
        "kv_tokens_per_backend": settings.slots * settings.context_length,
        "router": "lookahead-sdk router serve, its own process, default settings, fresh per run",
        "load_average_1m": os.getloadavg()[0],
    }


def evaluate_targets(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    by = {(r["arm"], r["repeat"]): r for r in runs}
    repeats = sorted({r["repeat"] for r in runs})
    targets: dict[str, Any] = {}
    ratios = {
        repeat: round(thunder["steps_per_min"] / session["steps_per_min"], 3)
        for repeat in repeats
        if (thunder := by.get(("thunder", repeat)))
        and (session := by.get(("session", repeat)))
        and session["steps_per_min"] > 0
    }
    if ratios:
        targets["thunder_over_session"] = {
            "target": f">= {TARGET_RATIO}x session affinity's steps/min in each repeat",
            "per_repeat": ratios,
            "met": all(ratio >= TARGET_RATIO for ratio in ratios.values()),
        }
    targets["every_program_completes"] = {
        "target": "every program completes in every run",
        "per_run": {
            f"{r['arm']} #{r['repeat'] + 1}": f"{r['programs_completed']}/{r['programs']}"
            for r in runs
        },
        "met": all(r["programs_completed"] == r["programs"] for r in runs),
    }
    return targets


def plot_runs(path: str, runs: Sequence[dict[str, Any]]) -> None:
    figure, axes = new_figure(1, 2, size=(11, 4))
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    repeats = sorted({r["repeat"] for r in runs})
    by = {(r["arm"], r["repeat"]): r for r in runs}
    width = 0.8 / len(repeats)
    panels = (
        ("steps_per_min", "steps / min", 1.0),
        ("reprefill_tokens", "re-prefilled tokens (thousands)", 1e-3),
    )
    for axis, (key, label, scale) in zip(axes[0], panels, strict=True):
        for k, repeat in enumerate(repeats):
            xs = [i + (k - (len(repeats) - 1) / 2) * width for i in range(len(arms))]
            values = [by[(arm, repeat)][key] * scale if (arm, repeat) in by else 0 for arm in arms]
            axis.bar(xs, values, width, label=f"repeat {repeat + 1}")
        axis.set_xticks(range(len(arms)), arms)
        axis.set_ylabel(label)
        axis.legend()
    first = runs[0]
    figure.suptitle(
        f"{first['programs']} reference agents on 2 llama-servers "
        f"(KV overload {first['overload']:.1f}x, {first['slot_overload']:g}x the slots)"
    )
    save_figure(figure, path)


ENGINE_LEGEND = (
    "#: repeat; step s: step latency p50/p99; hold s: wait at the router p99/max; "
    "reprefill: tokens of a program's previous prompt computed again"
)


def summary_table(document: dict[str, Any]) -> Any:
    """Every run (arm x repeat) of an engine-mode document, in one 80-column table."""
    runs = document["runs"]
    first = runs[0]
    table = compact_table(
        f"{first['programs']} programs x {first['steps']} steps through `router serve`, "
        f"KV overload {first['overload']:.2f}x ({first['slot_overload']:g}x the slots)",
        ("arm", "#", "steps/min", "step s", "hold s", "forced", "reprefill", "done"),
    )
    for r in runs:
        table.add_row(
            r["arm"],
            str(r["repeat"] + 1),
            f"{r['steps_per_min']:.1f}",
            f"{r['step_p50_s']:.1f}/{r['step_p99_s']:.1f}",
            f"{r['hold_p99_s']:.0f}/{r['hold_max_s']:.0f}",
            str(r["forced_admits"]),
            str(r["reprefill_tokens"]),
            f"{r['programs_completed']}/{r['programs']}",
        )
    return table


def verdict_lines(document: dict[str, Any]) -> list[str]:
    return [
        f"{name}: {'met' if target['met'] else 'NOT met'}  ({target['target']})"
        for name, target in document["targets"].items()
    ]


def print_summary(document: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console

    console = console or Console()
    console.print(summary_table(document))
    console.print(ENGINE_LEGEND)
    for line in verdict_lines(document):
        console.print(line)


# --- command line ------------------------------------------------------------------------------


def context_length(text: str) -> int:
    """Tokens per slot: a multiple of llama.cpp's padding, up to the model's context."""
    value = Number(int, low=KV_PAD, high=MODEL_CONTEXT)(text)
    if value % KV_PAD:
        raise argparse.ArgumentTypeError(f"expected a multiple of {KV_PAD}, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = EngineBenchSettings()
    group = parser.add_argument_group("--mode engine (also --programs, --seeds, --arms)")
    group.add_argument(
        "--steps", type=positive_int, default=defaults.steps, help="model calls per program"
    )
    group.add_argument("--repeats", type=positive_int, default=defaults.repeats)
    group.add_argument(
        "--slots", type=positive_int, default=defaults.slots, help="parallel slots per engine"
    )
    group.add_argument(
        "--context-length", type=context_length, default=defaults.context_length,
        help="context tokens per slot",
    )  # fmt: skip
    group.add_argument(
        "--task-tokens", type=non_negative_int, default=defaults.task_tokens,
        help="source handed over with each program's task (its starting context)",
    )  # fmt: skip
    group.add_argument(
        "--read-tokens", type=positive_int_range, default=defaults.read_tokens,
        metavar="LOW,HIGH", help="tokens each step's read adds",
    )  # fmt: skip
    group.add_argument(
        "--tool-latency-s", type=non_negative_float, default=defaults.tool_latency_s,
        help="mean seconds per tool call (each 0.5x-1.5x of it, seeded)",
    )  # fmt: skip
    group.add_argument(
        "--threads", type=positive_int, default=None,
        help="CPU threads per engine (default: the CPUs shared out)",
    )  # fmt: skip
    group.add_argument(
        "--cache-ram", type=non_negative_int, default=defaults.cache_ram_mib,
        help="llama.cpp host-memory prompt cache in MiB (default 0: KV is scarce)",
    )  # fmt: skip


def settings_from_args(args: argparse.Namespace) -> EngineBenchSettings:
    defaults = EngineBenchSettings()
    programs = args.programs or (defaults.programs,)
    seeds = args.seeds or (defaults.seed,)
    if len(programs) != 1:
        raise ConfigurationError(f"--programs: engine mode runs one count, got {len(programs)}")
    if len(seeds) != 1:
        raise ConfigurationError(
            f"--seeds: engine mode takes one seed (program i runs seed + i), got {len(seeds)}"
        )
    arms = args.arms or DEFAULT_ARMS
    unknown = [arm for arm in arms if arm not in POLICY_NAMES]
    if unknown:
        raise ConfigurationError(
            f"--arms: engine mode runs router policies ({', '.join(POLICY_NAMES)}), not {unknown}"
        )
    try:
        return EngineBenchSettings(
            programs=programs[0],
            steps=args.steps,
            repeats=args.repeats,
            arms=tuple(arms),
            seed=seeds[0],
            slots=args.slots,
            context_length=args.context_length,
            task_tokens=args.task_tokens,
            read_tokens=args.read_tokens,
            tool_latency_s=args.tool_latency_s,
            threads=args.threads,
            cache_ram_mib=args.cache_ram,
        )
    except ValueError as error:
        raise ConfigurationError(str(error)) from None


def main(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    document = run_engine_bench(settings, args.json, args.plot)
    print_summary(document)
    return 0

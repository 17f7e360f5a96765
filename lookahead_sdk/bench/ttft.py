"""`bench ttft`: transform-turn TTFT, synchronous vs lookahead, per strategy, side by side.

Each (strategy, mode) run drives the reference agents over the same seeded workload. On the
embedded engine every run starts from a freshly started server, so no run inherits another's
prefix cache (same seeds mean same prompts). On the simulator (--sim PROFILE: the same run on a
simulated GPU, e.g. an H200, where the engine leaves slack) the server's cache is flushed
between runs. Against --base-url, llama.cpp slots are erased between runs when the server allows
it.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import platform
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from rich.console import Console
from rich.table import Table

from lookahead_sdk.agent.driver import STRATEGIES, RunResult, run_agents, warm_client_stack
from lookahead_sdk.agent.loop import TurnRecord
from lookahead_sdk.agent.run_trace import RunTrace
from lookahead_sdk.agent.workload import DEFAULT_LARGE_OUTPUT_EVERY, default_read_tokens
from lookahead_sdk.base.args import (
    add_renamed,
    comma_list,
    http_url,
    non_negative_float,
    non_negative_int,
    one_of,
    output_file,
    port,
    positive_int,
    positive_int_range,
)
from lookahead_sdk.bench.common import (
    compact_table,
    free_port,
    new_figure,
    p50,
    progress,
    save_figure,
    write_json,
)
from lookahead_sdk.bench.sim_ttft import SimServerProcess
from lookahead_sdk.bench.trace_plot import plot_trace
from lookahead_sdk.bench.ttft_targets import FEW_TURNS, TurnLists, targets_tables
from lookahead_sdk.bench.ttft_waits import WAITS_LEGEND, has_waits, waits_tables
from lookahead_sdk.client.slack import DEFAULT_GATE_ADMISSION, GATE_ADMISSIONS, GateAdmission
from lookahead_sdk.engine.abort_log import batch_aborts
from lookahead_sdk.engine.config import MODEL_CONTEXT
from lookahead_sdk.engine.prompt_cache_log import TRACE_VERBOSITY_ARGS, prompt_cache_activity
from lookahead_sdk.errors import ConfigurationError
from lookahead_sdk.scheduling.profiles import latency_profile

if TYPE_CHECKING:
    from lookahead_sdk.engine.errors import EngineExitedError

MODES = ("sync", "lookahead")
# Mean time a tool call takes to come back (the workload draws 0.5x-1.5x of it per call): a
# sandbox round trip plus execution. It is the slack lookahead work can use on an engine that,
# like llama.cpp on a CPU, is saturated while it serves a request.
DEFAULT_TOOL_LATENCY_S = 2.0
DEFAULT_STEPS = 28  # the paper's workload length
DEFAULT_SIM_KV_TOKENS = 400_000  # an 8B model's KV pool on one 80-141 GB GPU, as `bench sim-ttft`


@dataclass(frozen=True)
class TtftBenchConfig:
    base_url: str | None = None  # None: the embedded engine, or the simulator with `sim_profile`
    sim_profile: str | None = None  # a latency profile: run on `lookahead-sdk sim serve`
    sim_kv_tokens: int = DEFAULT_SIM_KV_TOKENS
    agents: int = 1
    steps: int = DEFAULT_STEPS
    # Each isolate step is a delegation: a transform turn, and twice a read step's time (the
    # sub-agent's turns and tool wait). None: half of `steps`, as many samples in half the time.
    isolate_steps: int | None = None
    strategies: tuple[str, ...] = STRATEGIES
    warmer: str | None = None  # None: llamacpp on the embedded engine, else openai
    window_tokens: int | None = None  # None: read from the server (llama.cpp /props)
    seed: int = 0
    max_tokens: int = 32
    port: int = 8089
    engine_threads: int | None = None  # embedded engine threads; None: its default
    tool_latency_s: float = DEFAULT_TOOL_LATENCY_S
    # Tokens a read adds; None: the paper's growth scaled to the window (agent/workload.py).
    tool_output_tokens: tuple[int, int] | None = None
    large_output_every: int = DEFAULT_LARGE_OUTPUT_EVERY
    gate: GateAdmission = DEFAULT_GATE_ADMISSION  # client-side slack admission on llama.cpp
    # LlamaCppWarmer(yield_batches=...): a chunk that may meet the next request in small batches.
    small_batches: bool = True
    # LlamaCppWarmer(warm_up_batch_tokens=...): other chunks past 1K cached tokens; None: the
    # engine's batches.
    warm_up_batch_tokens: int | None = None
    modes: tuple[str, ...] = MODES  # one mode alone only to trace it (no side-by-side figures)
    # Runs per strategy and mode, the modes in ABBA order (sync, lookahead, lookahead, sync, ...)
    # so that a machine slowing down or speeding up over the run weighs on both alike.
    repeats: int = 1
    # Embedded engine only: llama-server at trace verbosity, and each run's `prompt_cache`
    # (engine.prompt_cache_log) read from its log.
    log_prompt_cache: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.strategies) - set(STRATEGIES)
        if unknown:
            raise ValueError(f"strategies must be among {STRATEGIES}, got {sorted(unknown)}")
        if self.large_output_every < 0:
            raise ValueError(
                f"large_output_every must be >= 0 (0: no large reads), got {self.large_output_every}"
            )
        if self.agents < 1 or self.steps < 1:
            raise ValueError(
                f"agents and steps must be >= 1, got agents={self.agents} steps={self.steps}"
            )
        if not self.modes or set(self.modes) - set(MODES):
            raise ValueError(f"modes must be among {MODES}, got {list(self.modes)}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.isolate_steps is not None and self.isolate_steps < 1:
            raise ValueError(f"isolate_steps must be >= 1, got {self.isolate_steps}")
        if self.sim_profile is not None and self.base_url is not None:
            raise ValueError("base_url and sim_profile exclude each other: pick one server")
        if self.log_prompt_cache and (self.base_url is not None or self.sim_profile is not None):
            raise ValueError(
                "log_prompt_cache reads the embedded engine's log: drop it (--log-prompt-cache) "
                "or run on the embedded engine"
            )

    def run_order(self) -> list[tuple[int, str]]:
        """(repeat, mode) in the order they run: ABBA, so each mode's mean run sits at the same
        point of the whole run."""
        return [
            (repeat, mode)
            for repeat in range(self.repeats)
            for mode in (self.modes if repeat % 2 == 0 else self.modes[::-1])
        ]

    def steps_for(self, strategy: str) -> int:
        if strategy != "isolate":
            return self.steps
        return self.isolate_steps or max(1, self.steps // 2)


class EmbeddedEngine:
    """Starts (and restarts, for a clean cache) the embedded llama-server sized for the agents."""

    warmer = "llamacpp"
    default_window_tokens = None  # llama.cpp says (/props)

    def __init__(
        self, agents: int, port: int, threads: int | None = None, *, log_prompt_cache: bool = False
    ) -> None:
        from lookahead_sdk.engine.config import EngineConfig

        # Per agent: its main context, its lookahead branch, and a sub-agent / summary slot.
        self.config = EngineConfig(
            port=port,
            slots=max(4, 3 * agents),
            threads=threads,
            extra_args=TRACE_VERBOSITY_ARGS if log_prompt_cache else (),
        ).resolved()
        self.handle: Any = None

    def log_size(self) -> int:
        """Bytes in the engine's log now: where a run's lines start (0: no log)."""
        log = Path(self.handle.log_path)
        return log.stat().st_size if log.is_file() else 0

    def log_since(self, offset: int) -> str:
        """The engine's log from `offset` (`log_size`) on ("": no log)."""
        try:
            with open(self.handle.log_path, "rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def restart(self) -> str:
        """A fresh engine. One left on the port (an earlier bench's, or a killed one's) would
        hand the first run its prompt cache: erasing its slots leaves llama.cpp's RAM prompt
        cache (`--cache-ram`) in place."""
        from lookahead_sdk.engine.server import ensure_engine, stop_engine

        stop_engine(self.config.port)
        self.handle = ensure_engine(self.config)
        return self.handle.base_url

    def clear_cache(self) -> None:
        if self.handle is not None:
            erase_llamacpp_slots(self.handle.base_url)

    def stop(self) -> None:
        from lookahead_sdk.engine.server import stop_engine

        if self.handle is not None:
            stop_engine(self.config.port)
            self.handle = None

    def exit_error(self) -> EngineExitedError | None:
        """The error saying the engine stopped (naming its log) if it has exited, else None."""
        return self.handle.exit_error() if self.handle is not None else None

    @property
    def description(self) -> str | None:
        return None  # the server says what it is (llama.cpp /props)

    @property
    def threads(self) -> int | None:
        return self.config.threads


class SimulatedEngine:
    """`lookahead-sdk sim serve` with a latency profile, in real time (one simulated second per
    wall second, so tool waits and engine time share a clock); its cache is flushed between
    runs."""

    warmer = "sglang"
    threads = None
    # The embedded engine's per-slot context by default, so that --sim repeats its run.
    default_window_tokens = MODEL_CONTEXT

    def __init__(self, profile: str, kv_tokens: int, max_tokens: int) -> None:
        self.profile, self.kv_tokens, self.max_tokens = profile, kv_tokens, max_tokens
        self.server: SimServerProcess | None = None

    @property
    def description(self) -> str:
        return f"simulator ({self.profile}, {self.kv_tokens} KV tokens, real time)"

    def restart(self) -> str:
        if self.server is None:
            self.server = SimServerProcess.start(
                profile=self.profile,
                kv_tokens=self.kv_tokens,
                port=free_port(),
                time_scale=1.0,
                max_tokens=self.max_tokens,
            )
        else:
            self.server.flush()
        return self.server.base_url

    def clear_cache(self) -> None:
        if self.server is not None:
            self.server.flush()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def exit_error(self) -> RuntimeError | None:
        if self.server is None or (code := self.server.process.poll()) is None:
            return None
        return RuntimeError(f"the simulator (sim serve) exited with code {code}")


def server_facts(base_url: str) -> dict[str, Any]:
    """Model name and per-slot context from the server, where it says."""
    facts: dict[str, Any] = {
        "model": "default",
        "window_tokens": None,
        "engine": "openai-compatible",
    }
    with httpx.Client(timeout=10) as client:
        try:
            models = client.get(f"{base_url}/v1/models").json().get("data") or []
            if models:
                facts["model"] = models[0]["id"]
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        try:
            props = client.get(f"{base_url}/props").json()
            facts["window_tokens"] = props["default_generation_settings"]["n_ctx"]
            facts["engine"] = f"llama.cpp llama-server ({props.get('build_info', 'unknown build')})"
        except (httpx.HTTPError, ValueError, KeyError):
            pass
    return facts


def erase_llamacpp_slots(base_url: str) -> bool:
    try:
        with httpx.Client(timeout=30) as client:
            slots = client.get(f"{base_url}/slots").json()
            for slot in slots:
                client.post(
                    f"{base_url}/slots/{slot['id']}", params={"action": "erase"}
                ).raise_for_status()
        return True
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return False


async def run_ttft_bench(
    config: TtftBenchConfig,
    on_turn: Callable[[TurnRecord], None] | None = None,
    on_run: Callable[[str, str, int], None] | None = None,
    on_trace: Callable[[str, str, int, RunTrace], None] | None = None,
) -> dict[str, Any]:
    """Every strategy in both modes (`config.run_order`); `on_run(strategy, mode, repeat)` as
    each run starts, `on_turn` per model turn, `on_trace(strategy, mode, repeat, trace)` as each
    run ends. Returns the result document (`RunResult.pooled` per strategy and mode)."""
    engine: EmbeddedEngine | SimulatedEngine | None = None
    if config.sim_profile is not None:
        engine = SimulatedEngine(config.sim_profile, config.sim_kv_tokens, config.max_tokens)
    elif config.base_url is None:
        engine = EmbeddedEngine(
            config.agents,
            config.port,
            config.engine_threads,
            log_prompt_cache=config.log_prompt_cache,
        )
    # The engine whose log each run's aborted batches (and, asked, prompt-cache activity) are
    # read from; None: not read.
    engine_log = engine if isinstance(engine, EmbeddedEngine) else None
    base_url = engine.restart() if engine else str(config.base_url).rstrip("/").removesuffix("/v1")
    try:
        facts = server_facts(base_url)
        window = (
            config.window_tokens
            or facts["window_tokens"]
            or (engine.default_window_tokens if engine else None)
        )
        if window is None:
            raise ConfigurationError(
                "the server does not report its context window: pass --window-tokens N"
            )
        warmer = config.warmer or (
            engine.warmer if engine else "llamacpp" if "llama.cpp" in facts["engine"] else "openai"
        )
        document: dict[str, Any] = {
            "engine": (engine and engine.description) or facts["engine"],
            "engine_threads": engine.threads if engine else None,
            "model": facts["model"],
            "agents": config.agents,
            "steps": config.steps,
            "isolate_steps": config.steps_for("isolate"),
            "window_tokens": window,
            "warmer": warmer,
            "seed": config.seed,
            "max_tokens": config.max_tokens,
            "tool_latency_s": config.tool_latency_s,
            "tool_output_tokens": list(config.tool_output_tokens or default_read_tokens(window)),
            "large_output_every": config.large_output_every,
            "gate": config.gate,
            "small_batches": config.small_batches,
            "warm_up_batch_tokens": config.warm_up_batch_tokens,
            "repeats": config.repeats,
            "log_prompt_cache": config.log_prompt_cache,
            "machine": f"{platform.machine()}, {__import__('os').cpu_count()} CPUs",
            "strategies": {},
        }
        await warm_client_stack(base_url, model=facts["model"], warmer=warmer)
        if engine is not None:
            engine.clear_cache()
        fresh = True  # the engine's cache holds nothing of a run yet
        for strategy in config.strategies:
            done: dict[str, list[RunResult]] = {mode: [] for mode in config.modes}
            for repeat, mode in config.run_order():
                if on_run:
                    on_run(strategy, mode, repeat)
                if engine is not None and not fresh:
                    base_url = engine.restart()
                elif engine is None:
                    erase_llamacpp_slots(base_url)
                fresh = False
                log_offset = engine_log.log_size() if engine_log is not None else 0
                result = await run_agents(
                    base_url,
                    strategy=strategy,
                    mode=mode,
                    agents=config.agents,
                    steps=config.steps_for(strategy),
                    window_tokens=window,
                    warmer=warmer,
                    seed=config.seed,
                    model=facts["model"],
                    max_tokens=config.max_tokens,
                    on_turn=on_turn,
                    tool_latency_s=config.tool_latency_s,
                    tool_output_tokens=config.tool_output_tokens,
                    large_output_every=config.large_output_every,
                    slack_admit=config.gate,
                    small_batches=config.small_batches,
                    warm_up_batch_tokens=config.warm_up_batch_tokens,
                    on_trace=(
                        None if on_trace is None else partial(on_trace, strategy, mode, repeat)
                    ),
                )
                if engine_log is not None:
                    log_text = engine_log.log_since(log_offset)
                    result.batch_aborts = batch_aborts(log_text).to_json()
                    if config.log_prompt_cache:
                        result.prompt_cache = prompt_cache_activity(log_text).to_json()
                done[mode].append(result)
            document["strategies"][strategy] = {
                mode: RunResult.pooled(results).to_json() for mode, results in done.items()
            }
        return document
    except Exception as error:
        # A dead engine surfaces as whatever request noticed first (a dropped connection); say
        # what happened instead.
        if engine is not None and (stopped := engine.exit_error()) is not None:
            raise stopped from error
        raise
    finally:
        if engine is not None:
            engine.stop()


# Normal turns within this fraction of a transform turn's new tokens count as the same size.
SAME_SIZE_TOLERANCE = 0.25


def transform_vs_same_size_normal(run: dict[str, Any]) -> float:
    """p50 over transform turns of TTFT / (p50 TTFT of the normal turns that brought as many new
    tokens, within SAME_SIZE_TOLERANCE). A commit tends to fall on the turn whose large tool output
    pushed the context over the limit; that output is prefilled in either mode, so this is what
    the physical limit "a transform turn costs what a normal turn costs" compares. NaN where no
    normal turn matches (or the run predates the token lists)."""
    normal = list(zip(run.get("normal_new_tokens", []), run["normal_ttft_s"], strict=False))
    ratios = []
    for ttft, new in zip(
        run["transform_ttft_s"], run.get("transform_new_tokens", []), strict=False
    ):
        same_size = [
            n_ttft for n_new, n_ttft in normal if abs(n_new - new) <= SAME_SIZE_TOLERANCE * new
        ]
        if same_size:
            ratios.append(ttft / p50(same_size))
    return p50(ratios)


def summary_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, runs in document["strategies"].items():
        sync, look = runs["sync"], runs["lookahead"]
        lists = TurnLists.of(runs)
        rows.append(
            {
                "strategy": name,
                "sync_transform_p50_s": p50(lists.sync_transform),
                "lookahead_transform_p50_s": p50(lists.lookahead_transform),
                "ratio": lists.ratio,
                "reduction": 1 - lists.ratio,
                "sync_normal_p50_s": p50(sync["normal_ttft_s"]),
                "lookahead_normal_p50_s": p50(lists.lookahead_normal),
                "transform_vs_normal": lists.transform_vs_normal,
                "transform_vs_same_size_normal": transform_vs_same_size_normal(look),
                "transform_turns": look["transform_turns"],
                "hits": look["lookahead_hits"],
                "hit_rate": look["lookahead_hits"] / look["transform_turns"]
                if look["transform_turns"]
                else float("nan"),
                "stale": look["stale"],
                "fallbacks": look["fallbacks"],
                "extra_prompt_tokens": look["extra_prompt_tokens"],
                "net_extra_prompt_tokens": look["prefilled_prompt_tokens"]
                - sync["prefilled_prompt_tokens"],
                "wasted_prompt_tokens": look["wasted_prompt_tokens"],
            }
        )
    return rows


TTFT_LEGEND = (
    "T: transform turn (a commit or a synchronous transform), N: normal turn; p50 TTFT. "
    "cut: 1 - look T / sync T. T/N: look T / look N; T/N~: against normal turns that brought "
    "as many new tokens. hits: commits a ready lookahead served, of all transform turns. "
    "extra: prompt tokens of lookahead work; net: prefilled tokens vs sync; wasted: lookahead "
    "work thrown away. Every figure in full: the JSON."
)


def summary_tables(document: dict[str, Any]) -> list[Table]:
    """The summary in two tables that fit 80 columns (TTFT_LEGEND explains the headers)."""
    rows = summary_rows(document)
    ttft = compact_table(
        f"Transform-turn TTFT, {document['agents']} agent(s), {document['steps']} steps, "
        f"{document['model']}",
        ("strategy", "sync T", "look T", "cut", "sync N", "look N", "T/N", "T/N~"),
    )
    work = compact_table(
        "Lookahead work (lookahead runs)"
        + (f", {repeats} runs pooled" if (repeats := document.get("repeats", 1)) > 1 else ""),
        ("strategy", "hits", "stale", "fallbacks", "extra tok", "net tok", "wasted tok"),
    )
    few_turns = False
    for row, runs in zip(rows, document["strategies"].values(), strict=True):
        sync_few = len(runs["sync"]["transform_ttft_s"]) < FEW_TURNS
        look_few = len(runs["lookahead"]["transform_ttft_s"]) < FEW_TURNS
        few_turns |= sync_few or look_few
        ttft.add_row(
            row["strategy"],
            _seconds(row["sync_transform_p50_s"]) + ("*" if sync_few else ""),
            _seconds(row["lookahead_transform_p50_s"]) + ("*" if look_few else ""),
            _share(row["reduction"]),
            _seconds(row["sync_normal_p50_s"]),
            _seconds(row["lookahead_normal_p50_s"]),
            _times(row["transform_vs_normal"]),
            _times(row["transform_vs_same_size_normal"]),
        )
        work.add_row(
            row["strategy"],
            f"{row['hits']}/{row['transform_turns']}",
            str(row["stale"]),
            str(row["fallbacks"]),
            str(row["extra_prompt_tokens"]),
            str(row["net_extra_prompt_tokens"]),
            str(row["wasted_prompt_tokens"]),
        )
    if few_turns:
        ttft.caption = f"*: p50 of fewer than {FEW_TURNS} transform turns"
    return [ttft, work, *waits_tables(document["strategies"])]


def _seconds(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}s"


def _share(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0%}"


def _times(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def print_table(document: dict[str, Any], console: Console | None = None) -> None:
    """The summary, then each target judged on this run, the whole run beside the transform turn."""
    console = console or Console()
    for table in summary_tables(document):
        console.print(table)
    console.print(TTFT_LEGEND, markup=False, highlight=False)
    if has_waits(document["strategies"]):
        console.print(WAITS_LEGEND, markup=False, highlight=False)
    for table in targets_tables([("this run", document)]):
        console.print(table)


def plot(document: dict[str, Any], path: str | Path) -> Path:
    figure, axes = new_figure(1, 2, size=(12, 4.5))
    left, right = axes[0]
    rows = summary_rows(document)
    names = [row["strategy"] for row in rows]
    xs = range(len(names))
    left.bar(
        [x - 0.2 for x in xs],
        [row["sync_transform_p50_s"] for row in rows],
        0.4,
        label="sync transform turn",
    )
    left.bar(
        [x + 0.2 for x in xs],
        [row["lookahead_transform_p50_s"] for row in rows],
        0.4,
        label="lookahead transform turn",
    )
    left.scatter(
        [x + 0.2 for x in xs],
        [row["lookahead_normal_p50_s"] for row in rows],
        color="black",
        marker="_",
        s=400,
        label="lookahead normal turn",
        zorder=3,
    )
    for x, row in zip(xs, rows, strict=True):
        left.annotate(
            f"{-row['reduction']:+.0%}",
            (x, max(row["sync_transform_p50_s"], row["lookahead_transform_p50_s"])),
            ha="center",
            va="bottom",
        )
    left.set_xticks(list(xs), names)
    left.set(ylabel="TTFT p50 (s)", title=f"{document['model']}, {document['agents']} agent(s)")
    left.legend(fontsize=8)
    for x, name in zip(xs, names, strict=True):
        runs = document["strategies"][name]
        right.scatter(
            [x - 0.1] * len(runs["sync"]["transform_ttft_s"]),
            runs["sync"]["transform_ttft_s"],
            color="tab:blue",
            alpha=0.6,
        )
        right.scatter(
            [x + 0.1] * len(runs["lookahead"]["transform_ttft_s"]),
            runs["lookahead"]["transform_ttft_s"],
            color="tab:orange",
            alpha=0.6,
        )
    right.set_xticks(list(xs), names)
    right.set(
        ylabel="transform-turn TTFT (s)", title="every transform turn (blue sync, orange lookahead)"
    )
    return save_figure(figure, path)


async def run_with_progress(
    config: TtftBenchConfig, traces: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """`traces`: each run's trace is appended to it (`RunTrace.to_json`, with its strategy,
    mode and repeat)."""

    def on_trace(strategy: str, mode: str, repeat: int, trace: RunTrace) -> None:
        if traces is not None:
            traces.append({"strategy": strategy, "mode": mode, "repeat": repeat, **trace.to_json()})

    with progress() as bar:
        task = bar.add_task("starting", total=None)

        def on_run(strategy: str, mode: str, repeat: int) -> None:
            of = f" ({repeat + 1}/{config.repeats})" if config.repeats > 1 else ""
            bar.update(task, description=f"{strategy} / {mode}{of}", completed=0)

        def on_turn(turn: TurnRecord) -> None:
            bar.advance(task)

        return await run_ttft_bench(config, on_turn=on_turn, on_run=on_run, on_trace=on_trace)


def main(args: argparse.Namespace) -> int:
    config = TtftBenchConfig(
        base_url=None if args.embedded else args.base_url,
        sim_profile=args.sim,
        sim_kv_tokens=args.sim_kv_tokens,
        agents=args.agents,
        steps=args.steps,
        isolate_steps=args.isolate_steps,
        strategies=args.strategies,
        warmer=args.warmer,
        window_tokens=args.window_tokens,
        seed=args.seed,
        max_tokens=args.max_tokens,
        port=args.port,
        engine_threads=args.engine_threads,
        tool_latency_s=args.tool_latency,
        tool_output_tokens=args.tool_output_tokens,
        large_output_every=args.large_output_every,
        gate=args.gate,
        small_batches=args.small_batches,
        warm_up_batch_tokens=args.warm_up_batch_tokens or None,
        repeats=args.repeats,
        log_prompt_cache=args.log_prompt_cache,
    )
    traces: list[dict[str, Any]] | None = [] if args.trace else None
    document = asyncio.run(run_with_progress(config, traces))
    write_json(args.json, document)
    if args.trace and traces:
        write_json(args.trace, {"runs": traces})
        plot_trace(traces, Path(args.trace).with_suffix(".png"))
    if args.plot:
        plot(document, args.plot)
    print_table(document)
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "ttft", help="transform-turn TTFT, sync vs lookahead, per strategy"
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--base-url",
        type=http_url,
        help="any OpenAI-compatible server (default: the embedded engine)",
    )
    target.add_argument(
        "--embedded", action="store_true", help="the embedded llama.cpp engine (default)"
    )
    target.add_argument(
        "--sim",
        type=latency_profile,
        metavar="PROFILE",
        help="the simulator with this latency profile (e.g. h200-qwen3-8b), in real time: the "
        "same run on a GPU-class engine; the window defaults to the embedded engine's",
    )
    parser.add_argument(
        "--sim-kv-tokens",
        type=positive_int,
        default=DEFAULT_SIM_KV_TOKENS,
        help=f"the simulator's KV pool in tokens (default: {DEFAULT_SIM_KV_TOKENS})",
    )
    add_run_arguments(parser, tool_latency_s=DEFAULT_TOOL_LATENCY_S)
    parser.add_argument("--warmer", choices=("openai", "llamacpp", "sglang"))
    add_renamed(
        parser,
        "--window-tokens",
        "--window",
        type=positive_int,
        metavar="N",
        help="model context window in tokens (default: from the server)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-tokens", type=positive_int, default=32, help="tokens generated per normal turn"
    )
    parser.add_argument(
        "--tool-output-tokens",
        type=positive_int_range,
        metavar="LOW,HIGH",
        help="tokens a read adds (default: scaled to the window, 110,120 at 8K; with the large "
        "reads ~170 per step, the paper's ~600-650 per step at 32K scaled down)",
    )
    parser.add_argument(
        "--large-output-every",
        type=non_negative_int,
        default=DEFAULT_LARGE_OUTPUT_EVERY,
        metavar="K",
        help="every K-th read is 3x larger (what Offload's threshold selects); 0: none",
    )
    parser.add_argument("--json", type=output_file, required=True, metavar="PATH")
    parser.add_argument("--plot", type=output_file, metavar="PATH")
    parser.add_argument(
        "--trace",
        type=output_file,
        metavar="PATH",
        help="also write every run's turns (each TTFT split by cause) and requests, on one "
        "clock, to this JSON file, and their timelines beside it (PATH with .png): to see where "
        "one slow turn's time went",
    )
    parser.add_argument(
        "--log-prompt-cache",
        action="store_true",
        help="embedded engine: run llama-server at trace verbosity and record per run what its "
        "RAM prompt cache did (saves, loads, the main-loop time they took), read from its log",
    )
    parser.set_defaults(func=main)


def add_run_arguments(parser: argparse.ArgumentParser, *, tool_latency_s: float) -> None:
    """What `bench ttft` and `demo` both take: the agents, their workload and the engine port."""
    parser.add_argument("--agents", type=positive_int, default=1)
    parser.add_argument("--steps", type=positive_int, default=DEFAULT_STEPS)
    parser.add_argument(
        "--isolate-steps",
        type=positive_int,
        help="delegations per isolate run, each a transform turn (default: half of --steps)",
    )
    parser.add_argument(
        "--strategies",
        type=comma_list(one_of(STRATEGIES)),
        default=STRATEGIES,
        metavar="S,S,...",
        help=f"comma-separated, among {','.join(STRATEGIES)} (default: all)",
    )
    parser.add_argument("--port", type=port, default=8089, help="embedded engine port")
    parser.add_argument(
        "--engine-threads",
        type=positive_int,
        help="embedded engine threads (default: $LOOKAHEAD_SDK_ENGINE_THREADS, else all CPUs)",
    )
    parser.add_argument(
        "--tool-latency",
        type=non_negative_float,
        default=tool_latency_s,
        help="mean seconds a tool call takes (0.5x-1.5x per call)",
    )
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=1,
        help="runs per strategy and mode, in ABBA order (sync, lookahead, lookahead, sync, ...); "
        "turns are pooled, the wall time is the mean run's (a noisy machine wants 2 or more)",
    )
    parser.add_argument(
        "--gate",
        choices=GATE_ADMISSIONS,
        default=DEFAULT_GATE_ADMISSION,
        help="when background work may use llama.cpp: idle (no foreground request in flight), "
        "decode (none waiting for its first token) or idle-first (idle, and beside decoding "
        "replies for work whose commit is due, or while the engine was idle under 25%% of the last 20 s)",
    )
    parser.add_argument(
        "--no-small-batches",
        dest="small_batches",
        action="store_false",
        help="llama.cpp warmer: send a chunk that may meet the next request in the engine's usual "
        "batches too (LlamaCppWarmer(yield_batches=False)); by default it goes in small ones",
    )
    parser.add_argument(
        "--warm-up-batch",
        dest="warm_up_batch_tokens",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="llama.cpp warmer: tokens per engine batch of a warm-up chunk extending 1K or more "
        "cached tokens (default 0: the engine's; 32 measured faster alone, slower with four agents)",
    )

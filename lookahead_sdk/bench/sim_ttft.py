"""`lookahead-sdk bench sim-ttft`: transform-turn TTFT on a simulated H100 engine, driving the real
client SDK (the reference agents of `lookahead_sdk.agent.driver`) against `lookahead-sdk sim
serve` with lookahead-aware admission, for 1/4/8/16 agents x the four strategies, synchronous vs
lookahead. Times are simulated seconds: wall seconds measured by the client / --time-scale.

The server runs in a child process (its own CPU core), is flushed between runs so that no run
finds another run's prefixes cached, and is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from lookahead_sdk.base.args import (
    comma_list,
    one_of,
    output_file,
    port_or_zero,
    positive_float,
    positive_int,
    positive_int_range,
)
from lookahead_sdk.bench.common import (
    compact_table,
    free_port,
    new_figure,
    percentile,
    progress,
    save_figure,
    write_json,
)
from lookahead_sdk.scheduling.profiles import latency_profile

STRATEGIES = ("offload", "keep_recent", "summarize", "isolate")
DEFAULT_AGENTS = (1, 4, 8, 16)


@dataclass(frozen=True, slots=True)
class SimServerProcess:
    process: subprocess.Popen[bytes]
    base_url: str

    @classmethod
    def start(
        cls,
        *,
        profile: str,
        kv_tokens: int,
        port: int,
        time_scale: float,
        max_tokens: int,
        mode: str = "colocated",
    ) -> SimServerProcess:
        """`lookahead-sdk sim serve` with lookahead-aware admission, once it answers /health."""
        command = [
            sys.executable, "-m", "lookahead_sdk.cli", "sim", "serve",
            "--profile", profile, "--kv-tokens", str(kv_tokens),
            "--port", str(port), "--mode", mode, "--policy", "lookahead",
            "--time-scale", str(time_scale), "--default-max-tokens", str(max_tokens),
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        server = cls(process, f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                error = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"sim serve exited with {process.returncode}: {error[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.base_url}/health", timeout=1).status_code == 200:
                    return server
            time.sleep(0.2)
        server.stop()
        raise RuntimeError("sim serve did not become healthy within 60 s")

    def flush(self) -> None:
        deadline = time.monotonic() + 60
        while httpx.post(f"{self.base_url}/flush_cache", timeout=5).status_code == 409:
            if time.monotonic() > deadline:
                raise RuntimeError("the simulated engine stayed busy; cannot flush its cache")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "sim-ttft",
        help="transform-turn TTFT, sync vs lookahead, real SDK agents on a simulated H100 engine",
    )
    parser.add_argument("--json", type=output_file, required=True, metavar="PATH")
    parser.add_argument("--plot", type=output_file, metavar="PATH")
    parser.add_argument(
        "--raw-json",
        type=output_file,
        metavar="PATH",
        help="also write every run's raw RunResult",
    )
    parser.add_argument("--profile", type=latency_profile, default="h100-qwen3-8b")
    parser.add_argument(
        "--agents",
        type=comma_list(positive_int),
        default=DEFAULT_AGENTS,
        metavar="N,N,...",
        help=f"agent counts to sweep (default: {','.join(map(str, DEFAULT_AGENTS))})",
    )
    parser.add_argument(
        "--strategies",
        type=comma_list(one_of(STRATEGIES)),
        default=STRATEGIES,
        metavar="S,S,...",
        help=f"comma-separated, among {','.join(STRATEGIES)} (default: all)",
    )
    parser.add_argument("--steps", type=positive_int, default=28)
    parser.add_argument("--window-tokens", type=positive_int, default=32_768)
    parser.add_argument(
        "--tool-output-tokens",
        type=positive_int_range,
        metavar="LOW,HIGH",
        help="tokens a read adds (default: scaled to --window-tokens, 440,480 at 32K)",
    )
    parser.add_argument("--max-tokens", type=positive_int, default=32)
    parser.add_argument("--kv-tokens", type=positive_int, default=400_000)
    parser.add_argument("--mode", choices=("colocated", "disagg"), default="colocated")
    parser.add_argument(
        "--time-scale",
        type=positive_float,
        default=2.0,
        help="wall seconds per simulated second on the server (client overhead shrinks by it)",
    )
    parser.add_argument("--port", type=port_or_zero, default=0, help="server port (0: a free one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lookahead_sdk.agent.driver import run_agents

    console = Console()
    agent_counts, strategies = list(args.agents), list(args.strategies)
    server = SimServerProcess.start(
        profile=args.profile,
        kv_tokens=args.kv_tokens,
        port=args.port or free_port(),
        time_scale=args.time_scale,
        max_tokens=args.max_tokens,
        mode=args.mode,
    )
    runs: list[dict[str, Any]] = []
    raw: list[dict[str, Any]] = []
    try:
        with progress() as bar:
            task = bar.add_task("agent runs", total=len(agent_counts) * len(strategies) * 2)
            for agents in agent_counts:
                for strategy in strategies:
                    ttft: dict[str, list[float]] = {}
                    for mode in ("sync", "lookahead"):
                        bar.update(task, description=f"{agents} agents, {strategy}, {mode}")
                        server.flush()
                        result = asyncio.run(
                            run_agents(
                                server.base_url,
                                strategy=strategy,
                                mode=mode,
                                agents=agents,
                                steps=args.steps,
                                window_tokens=args.window_tokens,
                                warmer="sglang",
                                seed=args.seed,
                                model="sim",
                                max_tokens=args.max_tokens,
                                tool_output_tokens=args.tool_output_tokens,
                            )
                        )
                        ttft[mode] = [t / args.time_scale for t in result.transform_ttft_s]
                        raw.append(
                            {
                                "agents": agents,
                                "strategy": strategy,
                                "mode": mode,
                                **result.to_json(),
                            }
                        )
                        bar.advance(task)
                    runs.append(_run_row(agents, strategy, ttft))
        server_stats = httpx.get(f"{server.base_url}/stats", timeout=5).json()
    finally:
        server.stop()
    profile_name = server_stats.get("profile", args.profile)
    write_json(args.json, {"profile": profile_name, "runs": runs})
    if args.raw_json:
        write_json(
            args.raw_json,
            {"time_scale": args.time_scale, "runs": raw, "server_stats": server_stats},
        )
    console.print(_table(runs))
    console.print(summary(runs))
    if args.plot:
        _plot(args.plot, runs, agent_counts, strategies)
    return 0


def _run_row(agents: int, strategy: str, ttft: dict[str, list[float]]) -> dict[str, Any]:
    return {
        "agents": agents,
        "strategy": strategy,
        "sync_p50_s": percentile(ttft["sync"], 50),
        "lookahead_p50_s": percentile(ttft["lookahead"], 50),
        "sync_p90_s": percentile(ttft["sync"], 90),
        "lookahead_p90_s": percentile(ttft["lookahead"], 90),
    }


def reductions(runs: list[dict[str, Any]], stat: str) -> list[float]:
    return [
        1 - r[f"lookahead_{stat}_s"] / r[f"sync_{stat}_s"]
        for r in runs
        if r[f"sync_{stat}_s"] > 0 and r[f"lookahead_{stat}_s"] == r[f"lookahead_{stat}_s"]
    ]


def summary(runs: list[dict[str, Any]]) -> str:
    p90 = reductions(runs, "p90")
    p50 = reductions(runs, "p50")
    if not p90:
        return "no transform turns were measured (raise --steps?)"
    mean_p90 = sum(p90) / len(p90)
    verdict = "met" if mean_p90 >= 0.62 else "NOT met"
    return (
        f"mean transform-turn TTFT reduction over {len(p90)} runs: p90 {mean_p90:.1%}, "
        f"p50 {sum(p50) / len(p50):.1%} (target >= 62% on the tail: {verdict})"
    )


def _table(runs: list[dict[str, Any]]) -> Table:
    table = compact_table(
        "transform-turn TTFT (simulated seconds)",
        ("agents", "strategy", "sync p50", "la p50", "sync p90", "la p90", "p90 cut"),
    )
    for r in runs:
        cut = 1 - r["lookahead_p90_s"] / r["sync_p90_s"] if r["sync_p90_s"] > 0 else float("nan")
        table.add_row(
            str(r["agents"]),
            r["strategy"],
            f"{r['sync_p50_s']:.3f}",
            f"{r['lookahead_p50_s']:.3f}",
            f"{r['sync_p90_s']:.3f}",
            f"{r['lookahead_p90_s']:.3f}",
            f"{cut:.0%}",
        )
    return table


def _plot(
    path: str, runs: list[dict[str, Any]], agent_counts: list[int], strategies: list[str]
) -> None:
    figure, axes = new_figure(1, len(strategies), size=(4 * len(strategies), 4))
    for axis, strategy in zip(axes[0], strategies, strict=True):
        rows = {r["agents"]: r for r in runs if r["strategy"] == strategy}
        xs = range(len(agent_counts))
        for offset, mode in ((-0.2, "sync"), (0.2, "lookahead")):
            axis.bar(
                [x + offset for x in xs],
                [rows[a][f"{mode}_p90_s"] for a in agent_counts],
                width=0.4,
                label=f"{mode} p90",
            )
        axis.set_xticks(list(xs), [str(a) for a in agent_counts])
        axis.set_xlabel("agents")
        axis.set_ylabel("transform-turn TTFT p90 (s)")
        axis.set_title(strategy)
        axis.legend()
    save_figure(figure, path)


def load_runs(path: str | Path) -> list[dict[str, Any]]:
    return json.loads(Path(path).read_text())["runs"]

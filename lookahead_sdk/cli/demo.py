"""`lookahead-sdk demo`: the main job. The reference agent runs the code-analysis workload with each
strategy, synchronous and lookahead, on the embedded llama.cpp engine; prints the TTFT table and
writes JSON + PNG."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from lookahead_sdk.agent.driver import STRATEGIES
from lookahead_sdk.bench.common import write_json
from lookahead_sdk.bench.ttft import (
    TtftBenchConfig,
    add_gate_argument,
    add_steps_arguments,
    plot,
    print_table,
    run_with_progress,
)

# The demo is the main job and should take about 10 minutes on a 2-core machine: tool calls come
# back in 0.5-1.5 s (mean 1 s, a local sandbox) instead of `bench ttft`'s 2 s, which also leaves
# the background work less slack.
DEMO_TOOL_LATENCY_S = 1.0


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    config = TtftBenchConfig(
        tool_latency_s=args.tool_latency,
        agents=args.agents,
        steps=args.steps,
        isolate_steps=args.isolate_steps,
        strategies=tuple(args.strategies.split(",")),
        port=args.port,
        gate=args.gate,
    )
    print(
        f"lookahead-sdk demo: {len(config.strategies)} strategies x (sync, lookahead) on the embedded engine"
    )
    document = asyncio.run(run_with_progress(config))
    json_path = write_json(out / "demo.json", document)
    plot_path = plot(document, out / "demo.png")
    print_table(document)
    print(f"wrote {json_path} and {plot_path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the reference agent, sync vs lookahead, on the embedded engine"
    )
    parser.add_argument(
        "--out", default="lookahead-demo", help="directory for demo.json and demo.png"
    )
    parser.add_argument("--agents", type=int, default=1)
    add_steps_arguments(parser)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--port", type=int, default=8089, help="embedded engine port")
    parser.add_argument(
        "--tool-latency",
        type=float,
        default=DEMO_TOOL_LATENCY_S,
        help="mean seconds a tool call takes (0.5x-1.5x per call)",
    )
    add_gate_argument(parser)
    parser.set_defaults(func=main)

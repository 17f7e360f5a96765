"""`lookahead-sdk demo`: the main job. The reference agent runs the code-analysis workload with each
strategy, synchronous and lookahead, on the embedded llama.cpp engine; prints the TTFT table and
writes JSON + PNG."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from lookahead_sdk.base.args import output_dir
from lookahead_sdk.bench.common import write_json
from lookahead_sdk.bench.trace_plot import plot_trace
from lookahead_sdk.bench.ttft import (
    TtftBenchConfig,
    add_run_arguments,
    plot,
    print_table,
    run_with_progress,
)

# The demo is the main job and should take about 10 minutes on a 2-core machine: tool calls come
# back in 0.5-1.5 s (mean 1 s, a local sandbox) instead of `bench ttft`'s 2 s, which also leaves
# the background work less slack.
DEMO_TOOL_LATENCY_S = 1.0


def main(args: argparse.Namespace) -> int:
    config = TtftBenchConfig(
        tool_latency_s=args.tool_latency,
        agents=args.agents,
        steps=args.steps,
        isolate_steps=args.isolate_steps,
        strategies=args.strategies,
        port=args.port,
        engine_threads=args.engine_threads,
        gate=args.gate,
        small_batches=args.small_batches,
        warm_up_batch_tokens=args.warm_up_batch_tokens or None,
        repeats=args.repeats,
    )
    print(
        f"lookahead-sdk demo: {len(config.strategies)} strategies x (sync, lookahead) "
        "on the embedded engine"
    )
    traces: list[dict[str, Any]] = []
    document = asyncio.run(run_with_progress(config, traces))
    json_path = write_json(args.out / "demo.json", document)
    plot_path = plot(document, args.out / "demo.png")
    trace_path = write_json(args.out / "trace.json", {"runs": traces})
    timeline_path = plot_trace(traces, args.out / "trace.png")
    print_table(document)
    print(
        f"wrote {json_path}, {plot_path}, {trace_path} (every turn and request) and "
        f"{timeline_path} (their timelines)"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the reference agent, sync vs lookahead, on the embedded engine"
    )
    parser.add_argument(
        "--out",
        type=output_dir,
        default="lookahead-demo",
        metavar="DIR",
        help="directory for demo.json, demo.png, trace.json (every run's turns and requests) "
        "and trace.png (their timelines)",
    )
    add_run_arguments(parser, tool_latency_s=DEMO_TOOL_LATENCY_S)
    parser.set_defaults(func=main)

"""`lookahead-sdk bench NAME`: every benchmark writes raw JSON (and a plot where it has one)."""

from __future__ import annotations

import argparse
import importlib

BENCH_MODULES: tuple[str, ...] = (
    "lookahead_sdk.bench.overhead",
    "lookahead_sdk.bench.ttft",
    "lookahead_sdk.bench.slo",
    "lookahead_sdk.bench.estimator",
    "lookahead_sdk.bench.sim_ttft",
    "lookahead_sdk.bench.adapters",
    "lookahead_sdk.bench.router",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="run a benchmark, write JSON (+ plot)")
    bench_subparsers = bench.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for module_name in BENCH_MODULES:
        importlib.import_module(module_name).register(bench_subparsers)

#!/usr/bin/env python3
"""Print every model turn of one `bench ttft` strategy, sync then lookahead, on the embedded
engine: TTFT, the commit on that turn, and how many prompt tokens the engine had to compute.

It shows what a transform turn costs against normal turns that prefill as much: a hit computes
only the newest tool output, as a normal turn does. (With `commit_ahead=False` the commit of a
limit-triggered strategy tends to fall on the turn whose large output pushed the context over
the limit, and that output is prefilled in either mode.)

    python scripts/trace_turns.py keep_recent [--steps 28] [--agents 1] [--tool-latency S]
        [--modes lookahead] [--debug]

With several agents each line names its program; --debug adds the runtime's and the warmer's
timestamped debug log (commits, warm-up chunks, slot copies).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

from lookahead_sdk.agent.driver import STRATEGIES
from lookahead_sdk.agent.loop import TurnRecord
from lookahead_sdk.base.tags import current_tags
from lookahead_sdk.bench.ttft import (
    DEFAULT_STEPS,
    DEFAULT_TOOL_LATENCY_S,
    MODES,
    TtftBenchConfig,
    run_ttft_bench,
)

STARTED = time.time()


class SinceStart(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        record.since = record.created - STARTED
        return super().format(record)


def print_turn(turn: TurnRecord) -> None:
    computed = turn.prompt_tokens - turn.cached_tokens
    tags = current_tags()
    program = tags.program_id if tags is not None else "-"
    print(
        f"{time.time() - STARTED:7.2f} {program:<12} {turn.agent:>4} step {turn.step:>2}  ttft {turn.ttft_s:5.2f} s  commit {turn.commit.value:<8}"
        f" context {turn.context_tokens:>5}  prompt {turn.prompt_tokens:>5}"
        f"  cached {turn.cached_tokens:>5}  computed {computed:>4}  new {turn.new_tokens:>4}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("strategy", choices=STRATEGIES)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--agents", type=int, default=1)
    parser.add_argument("--tool-latency", type=float, default=DEFAULT_TOOL_LATENCY_S)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args()
    if args.debug:
        handler = logging.StreamHandler()
        handler.setFormatter(SinceStart("%(since)7.2f %(name)s %(message)s"))
        logging.getLogger("lookahead_sdk").addHandler(handler)
        logging.getLogger("lookahead_sdk").setLevel(logging.DEBUG)
    config = TtftBenchConfig(
        strategies=(args.strategy,),
        steps=args.steps,
        agents=args.agents,
        tool_latency_s=args.tool_latency,
        modes=tuple(args.modes),
    )
    asyncio.run(
        run_ttft_bench(
            config,
            on_turn=print_turn,
            on_run=lambda strategy, mode, repeat: print(f"=== {strategy} {mode}", flush=True),
        )
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Any `lookahead-sdk` command with the demo's KeepRecent and Summarize started `--lead N`
turns ahead of their commits every time (`lead_turns`; KeepRecent's paced lead off) instead
of their defaults: how the lead was chosen.

    python scripts/lead_turns_pilot.py --lead 6 --strategy keep_recent -- \
        bench ttft --embedded --agents 4 --strategies keep_recent --json out.json

The policies are swapped where the reference agent builds them (`agent.driver.make_policy`);
everything else is the command as the CLI runs it. The JSON's provenance records this script's
command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lookahead_sdk.agent import driver
from lookahead_sdk.agent.workload import Delegation
from lookahead_sdk.cli import main
from lookahead_sdk.core.policy import ContextPolicy
from lookahead_sdk.strategies import KeepRecent, Summarize

LEAD_POLICIES = {"keep_recent": KeepRecent, "summarize": Summarize}


def fixed_lead(strategy: str, lead_turns: float) -> ContextPolicy:
    """The strategy's policy started `lead_turns` ahead every time (KeepRecent's paced lead off)."""
    if strategy == "keep_recent":
        return KeepRecent(lead_turns=lead_turns, min_lead_turns=None)
    return LEAD_POLICIES[strategy](lead_turns=lead_turns)


def with_lead(lead_turns: float, strategies: set[str]) -> None:
    """Fails here, before any engine starts, on a lead the policies reject."""
    for strategy in strategies:
        fixed_lead(strategy, lead_turns)
    default = driver.make_policy

    def make_policy(
        strategy: str, *, store_dir: Path, plan: Sequence[Delegation] = ()
    ) -> ContextPolicy:
        if strategy in strategies:
            return fixed_lead(strategy, lead_turns)
        return default(strategy, store_dir=store_dir, plan=plan)

    driver.make_policy = make_policy


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lead", type=float, required=True, help="lead_turns for the policies")
    parser.add_argument(
        "--strategy",
        action="append",
        choices=sorted(LEAD_POLICIES),
        required=True,
        help="a strategy to start --lead turns ahead (repeatable)",
    )
    if "--" not in argv:
        parser.error("put the lookahead-sdk command after --")
    split = argv.index("--")
    return parser.parse_args(argv[:split]), argv[split + 1 :]


if __name__ == "__main__":
    args, command = parse(sys.argv[1:])
    try:
        with_lead(args.lead, set(args.strategy))
    except ValueError as error:
        sys.exit(f"--lead: {error}")
    sys.exit(main(command))

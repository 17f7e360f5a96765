#!/usr/bin/env python3
"""Where an Isolate run's delegations spent their time, from a trace (`demo --out DIR`'s
trace.json, or `bench ttft --trace PATH`).

A delegation is the main agent's reply that writes it and the sub-agent's first request. Per
delegation and run: the reply's TTFT and decoding, the gap before the sub-agent's request, the
sub-agent's TTFT, the warm-up requests sent in between (count and seconds), and the whole span
from the reply's request to the sub-agent's first token. Synchronously the sub-agent's prefill
follows the reply; with lookahead it runs beside the reply (warm-up), so the reply decodes
slower and the sub-agent's first token comes sooner: the span says which wins.

    python scripts/delegation_segments.py docs/results/diagnostics/isolate_demo_run1_trace.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

SUBAGENT_MARK = "/sub"  # a sub-agent's program id: "<parent>/sub<step>"


@dataclass
class Delegation:
    reply_ttft_s: float
    reply_decode_s: float
    gap_s: float
    subagent_ttft_s: float
    warm_ups: int
    warm_up_s: float
    span_s: float


def delegations(run: dict[str, Any]) -> list[Delegation]:
    requests = sorted(run["requests"], key=lambda request: request["sent_s"])
    foreground = [r for r in requests if r["kind"] == "foreground"]
    found = []
    for index, reply in enumerate(foreground):
        if SUBAGENT_MARK in reply["program_id"]:
            continue
        child = f"{reply['program_id']}{SUBAGENT_MARK}"
        first = next(
            (r for r in foreground[index + 1 :] if r["program_id"].startswith(child)), None
        )
        if first is None:
            continue
        warm_ups = [
            r
            for r in requests
            if r["kind"] == "warm_up"
            and r["program_id"] == reply["program_id"]
            and reply["sent_s"] <= r["sent_s"] < first["sent_s"]
        ]
        found.append(
            Delegation(
                reply_ttft_s=reply["first_output_s"] - reply["sent_s"],
                reply_decode_s=reply["ended_s"] - reply["first_output_s"],
                gap_s=first["sent_s"] - reply["ended_s"],
                subagent_ttft_s=first["first_output_s"] - first["sent_s"],
                warm_ups=len(warm_ups),
                warm_up_s=sum(r["ended_s"] - r["sent_s"] for r in warm_ups),
                span_s=first["first_output_s"] - reply["sent_s"],
            )
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    args = parser.parse_args()
    document = json.loads(args.trace.read_text())
    names = [field.name for field in fields(Delegation)]
    for run in document["runs"]:
        if run.get("strategy") != "isolate":
            continue
        rows = delegations(run)
        print(f"== {run['mode']} repeat {run.get('repeat', 0)}: {run['duration_s']:.1f} s")
        print("  ".join(names))
        for row in rows:
            print(
                "  ".join(
                    f"{value:.2f}" if isinstance(value, float) else str(value)
                    for value in astuple(row)
                )
            )
        totals = [sum(values) for values in zip(*(astuple(row) for row in rows), strict=True)]
        print(
            "sum  "
            + "  ".join(f"{name}={total:.2f}" for name, total in zip(names, totals, strict=True))
        )


if __name__ == "__main__":
    main()

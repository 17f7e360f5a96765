"""`bench overhead`: the runtime's own bookkeeping per turn, no LLM involved.

One turn = append the new messages (copy, count, hash each), signal the segment boundary (policy
trigger checks), and prepare the next request (commit check). Histories of 2K / 32K / 128K tokens
in 200 messages get the same new messages each turn, so a flat p50 across sizes shows the cost
grows with new messages, not with history length; a second sweep varies the new-message count.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lookahead_sdk.base.args import output_file, positive_int
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tokens import auto_token_counter
from lookahead_sdk.bench.common import (
    markdown_table,
    new_figure,
    percentile,
    progress,
    save_figure,
    write_json,
)
from lookahead_sdk.core.runtime import LookaheadRuntime
from lookahead_sdk.strategies import Summarize

CONTEXTS = (2048, 32768, 131072)
HISTORY_MESSAGES = 200
NEW_MESSAGE_COUNTS = (1, 2, 4, 8)
TOOL_OUTPUT_WORDS = 480  # ~650 tokens of code-like text, like one workload step


def filler(tokens: int, seed: int) -> str:
    words = max(1, int(tokens * 0.75))
    return " ".join(f"v{seed}_{i % 97}" for i in range(words))


def history(context_tokens: int, messages: int) -> list[Message]:
    per_message = max(1, context_tokens // messages)
    built: list[Message] = [{"role": "system", "content": filler(per_message, -1)}]
    for i in range(1, messages):
        built.append({"role": "user" if i % 2 else "assistant", "content": filler(per_message, i)})
    return built


def new_messages(turn: int, count: int) -> list[Message]:
    """The messages of one turn; unique text per turn so no count is served from a cache."""
    base: list[Message] = [{"role": "assistant", "content": f"turn {turn}: reading the next chunk"}]
    tools = [
        {
            "role": "user",
            "content": f"[{turn}.{j}] "
            + " ".join(f"def f{turn}_{j}_{k}(x): return x" for k in range(TOOL_OUTPUT_WORDS // 5)),
        }
        for j in range(count - 1)
    ]
    return base + tools


@dataclass
class OverheadResult:
    context_tokens: int
    history_messages: int
    new_messages: int
    turns: int
    p50_ms: float
    p99_ms: float
    samples_ms: list[float]


async def measure(context_tokens: int, new_count: int, turns: int) -> OverheadResult:
    counter = auto_token_counter()
    messages = history(context_tokens, HISTORY_MESSAGES)
    # A window so large that no trigger fires: this measures bookkeeping, not transforms.
    runtime = LookaheadRuntime(
        Summarize(), messages=messages, window_tokens=context_tokens * 8, token_counter=counter
    )
    size = len(runtime.main)
    samples: list[float] = []
    for turn in range(turns):
        turn_messages = new_messages(turn, new_count)
        started = time.perf_counter()
        runtime.append(*turn_messages)
        await runtime.boundary()
        await runtime.prepare()
        samples.append((time.perf_counter() - started) * 1000)
        runtime.main.truncate(size)  # keep the history at its size (not timed)
    await runtime.aclose()
    return OverheadResult(
        context_tokens=context_tokens,
        history_messages=HISTORY_MESSAGES,
        new_messages=new_count,
        turns=turns,
        p50_ms=percentile(samples, 50),
        p99_ms=percentile(samples, 99),
        samples_ms=samples,
    )


async def run(turns: int) -> dict:
    by_context: list[OverheadResult] = []
    by_new: list[OverheadResult] = []
    with progress() as bar:
        task = bar.add_task("bookkeeping per turn", total=len(CONTEXTS) + len(NEW_MESSAGE_COUNTS))
        for context in CONTEXTS:
            by_context.append(await measure(context, 2, turns))
            bar.advance(task)
        for count in NEW_MESSAGE_COUNTS:
            by_new.append(await measure(32768, count, turns))
            bar.advance(task)
    return {
        "target_p50_ms": 0.5,
        "by_context": [asdict(r) for r in by_context],
        "by_new_messages": [asdict(r) for r in by_new],
        "token_counter": auto_token_counter().name,
    }


def plot(document: dict, path: Path) -> None:
    figure, axes = new_figure(1, 2)
    left, right = axes[0]
    contexts = document["by_context"]
    labels = [f"{r['context_tokens'] // 1024}K" for r in contexts]
    left.bar(
        [i - 0.2 for i in range(len(labels))], [r["p50_ms"] for r in contexts], 0.4, label="p50"
    )
    left.bar(
        [i + 0.2 for i in range(len(labels))], [r["p99_ms"] for r in contexts], 0.4, label="p99"
    )
    left.axhline(document["target_p50_ms"], color="red", linestyle="--", label="p50 target")
    left.set_xticks(range(len(labels)), labels)
    left.set(
        title="per turn vs history (200 messages, 2 new)", xlabel="history tokens", ylabel="ms"
    )
    left.legend()
    news = document["by_new_messages"]
    right.plot(
        [r["new_messages"] for r in news], [r["p50_ms"] for r in news], marker="o", label="p50"
    )
    right.plot(
        [r["new_messages"] for r in news], [r["p99_ms"] for r in news], marker="o", label="p99"
    )
    right.set(
        title="per turn vs new messages (32K history)", xlabel="new messages per turn", ylabel="ms"
    )
    right.legend()
    save_figure(figure, path)


TARGET_CONTEXT_TOKENS = 32768  # the target is judged at 32K / 200 messages, 2 new messages


def summary_rows(document: dict) -> list[tuple[str, float, float]]:
    """(configuration, p50 ms, p99 ms) for every measured point."""
    rows = [
        (
            f"{r['context_tokens'] // 1024}K-token history, {r['new_messages']} new messages",
            r["p50_ms"],
            r["p99_ms"],
        )
        for r in document["by_context"]
    ]
    rows += [
        (
            f"32K, {r['new_messages']} new message{'s' if r['new_messages'] > 1 else ''}",
            r["p50_ms"],
            r["p99_ms"],
        )
        for r in document["by_new_messages"]
    ]
    return rows


def target_point(document: dict) -> dict:
    return next(
        r
        for r in document["by_context"]
        if r["context_tokens"] == TARGET_CONTEXT_TOKENS and r["new_messages"] == 2
    )


def summary_markdown(document: dict) -> str:
    table = markdown_table(
        ("configuration", "p50", "p99"),
        [
            (label, f"{p50_ms:.3f} ms", f"{p99_ms:.3f} ms")
            for label, p50_ms, p99_ms in summary_rows(document)
        ],
    )
    lines = [table.rstrip("\n")]
    point, target = target_point(document), document["target_p50_ms"]
    met = "met" if point["p50_ms"] <= target else "**not met**"
    lines.append("")
    lines.append(
        f"Target p50 <= {target} ms per turn at 32K / {point['history_messages']} messages, "
        f"2 new: {point['p50_ms']:.3f} ms, {met}. Token counter: {document['token_counter']}; "
        f"{point['turns']} turns per point."
    )
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    document = asyncio.run(run(args.turns))
    write_json(args.json, document)
    if args.plot:
        plot(document, args.plot)
    print(summary_markdown(document), end="")
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser("overhead", help="runtime bookkeeping per turn (no LLM)")
    parser.add_argument(
        "--json", type=output_file, required=True, metavar="PATH", help="the JSON results"
    )
    parser.add_argument("--plot", type=output_file, metavar="PATH", help="a PNG plot")
    parser.add_argument(
        "--turns", type=positive_int, default=500, help="turns measured per configuration"
    )
    parser.set_defaults(func=main)

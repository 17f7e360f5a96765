"""The example agents (`reference_agent`, `langchain_agent`, `llamaindex_agent`,
`autogen_agent`, each `python -m lookahead_sdk.bench.examples.NAME` or `python
examples/NAME.py`) and what they share: their task, a real tool, the per-turn report.

They live in the package so that `lookahead-sdk bench adapters` finds them in any install. The
tool reads the running interpreter's standard-library sources (the reference workload's
corpus, through its own reader). Its `path` is a Literal of file names, which every framework
turns into a JSON-schema enum: a small model writing calls under constrained decoding can then
only name files that exist.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from rich.console import Console
from rich.table import Table

from lookahead_sdk.agent.workload import corpus_root, read_source_tool
from lookahead_sdk.base.args import (
    CommandParser,
    http_url,
    non_negative_float,
    output_file,
    port,
    positive_int,
)
from lookahead_sdk.base.tools import Tool
from lookahead_sdk.bench.common import compact_table, write_json
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.client.timeline import (
    RequestTimeline,
    TimelineEntry,
    background_overlap,
    reply_decode_s,
    request_answered_at,
    turn_wait,
    turn_waits_by_kind,
)
from lookahead_sdk.core.runtime import CommitKind

MODULES: tuple[str, ...] = (
    "csv.py",
    "shlex.py",
    "textwrap.py",
    "json/decoder.py",
    "configparser.py",
    "tokenize.py",
)
LINES_PER_READ = 16
SYSTEM_PROMPT = (
    "You are a careful code-analysis agent. Read source files chunk by chunk with the "
    "read_source tool and look for risky code: error handling, input validation, concurrency. "
    "Keep reading new chunks; answer with short findings only when asked to stop."
)


def task(modules: Sequence[str] = MODULES[:3]) -> str:
    return f"Analyze these standard-library modules for risky code: {', '.join(modules)}. Read them chunk by chunk."


def source_reader(
    lines: int = LINES_PER_READ, root: Path | None = None, *, latency_s: float = 0.0, seed: int = 0
) -> Callable[..., Awaitable[str]]:
    """`read_source(path, start_line)`: `lines` numbered lines of a corpus file. Any start line
    is valid (it wraps around the end of the file), so every call returns real source.

    `latency_s` models a tool running in a remote sandbox, as the reference workload does: each
    call takes 0.5x-1.5x of it (seeded). That time is the slack lookahead work can use on an
    engine that, like llama.cpp on a CPU, is saturated while it serves a request."""
    if latency_s < 0:
        raise ValueError(f"latency_s must be >= 0 seconds, got {latency_s}")
    root = root or corpus_root()
    modules = tuple(m for m in MODULES if (root / m).is_file())
    if not modules:
        raise FileNotFoundError(f"none of {MODULES} under {root}; is this a full CPython install?")
    rng = random.Random(seed)
    read = read_source_tool(
        root, (lambda: latency_s * rng.uniform(0.5, 1.5)) if latency_s else None
    ).function
    lengths = {
        m: max(1, len((root / m).read_text(encoding="utf-8", errors="replace").splitlines()))
        for m in modules
    }

    async def read_source(path: str, start_line: int = 1) -> str:
        start = (start_line - 1) % lengths[path] + 1
        text = read(path, start, start + lines - 1)
        return await text if inspect.isawaitable(text) else text

    read_source.__doc__ = (
        f"Read {lines} numbered lines of a Python standard-library source file, from start_line."
    )
    read_source.__annotations__ = {
        "path": Literal[modules],  # type: ignore[valid-type]
        "start_line": Annotated[int, "the first line to read, from 1"],
        "return": str,
    }
    return read_source


def source_tool(
    lines: int = LINES_PER_READ, root: Path | None = None, *, latency_s: float = 0.0
) -> Tool:
    """The same reader as a lookahead-sdk `Tool` (for the reference agent's ToolRegistry)."""
    reader = source_reader(lines, root, latency_s=latency_s)
    modules = get_args(reader.__annotations__["path"])
    return Tool(
        name="read_source",
        description=reader.__doc__ or "",
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "enum": list(modules)},
                "start_line": {"type": "integer", "description": "the first line to read, from 1"},
            },
            "required": ["path"],
        },
        function=reader,
    )


@dataclass(frozen=True)
class TurnRow:
    turn: int
    commit: CommitKind
    context_tokens: int
    ttft_s: float | None  # from the adapter's model-call hook (commit included) to the first token
    first_token_at: float | None = None  # perf_counter, to place the turn on the request timeline


def turn_waits(
    rows: Sequence[TurnRow], entries: Sequence[TimelineEntry], now: float
) -> dict[str, dict[str, float]]:
    """Where the turns' TTFT went, summed per turn kind ("normal", "transform") and cause, as
    `bench ttft` reports it (`RunResult.turn_wait_s`). A framework's loop stamps its hook and
    the first token; the request between them is the one the timeline saw answered then."""

    def splits() -> Iterator[tuple[str, dict[str, float]]]:
        for row in rows:
            if row.ttft_s is None or row.first_token_at is None:
                continue
            request = request_answered_at(row.first_token_at, entries)
            if request is None:
                continue
            kind = "normal" if row.commit is CommitKind.NONE else "transform"
            yield (
                kind,
                turn_wait(
                    row.first_token_at - row.ttft_s,
                    request.sent_at,
                    row.first_token_at,
                    request.program_id,
                    entries,
                    now=now,
                ),
            )

    return turn_waits_by_kind(splits())


def write_turns(
    path: str | Path,
    *,
    framework: str,
    mode: str,
    model: str,
    rows: Sequence[TurnRow],
    timeline: RequestTimeline | None = None,
) -> Path:
    """The rows as JSON, for `lookahead-sdk bench adapters`; with the session's timeline, also
    where the turns' TTFT went and what background requests ran."""
    document: dict[str, Any] = {
        "framework": framework,
        "mode": mode,
        "model": model,
        "rows": [{**asdict(row), "commit": row.commit.value} for row in rows],
    }
    if timeline is not None:
        entries, now = timeline.entries, time.perf_counter()
        document["turn_wait_s"] = turn_waits(rows, entries, now)
        document["background"] = {
            kind: asdict(load) for kind, load in background_overlap(entries, now=now).items()
        }
        document["reply_decode_s"] = reply_decode_s(entries, now=now)
    return write_json(path, document)


def print_turns(title: str, rows: Sequence[TurnRow], console: Console | None = None) -> None:
    (console or Console()).print(turns_table(title, rows))


def turns_table(title: str, rows: Sequence[TurnRow]) -> Table:
    table = compact_table(title, ("turn", "commit", "context tokens", "TTFT"))
    for row in rows:
        style = "bold" if row.commit is not CommitKind.NONE else None
        table.add_row(
            str(row.turn), row.commit.value, str(row.context_tokens), _ttft(row), style=style
        )
    return table


def print_turn(row: TurnRow, console: Console | None = None) -> None:
    """One line per model turn while the agent runs, bold where it committed."""
    (console or Console()).print(
        f"turn {row.turn:>3}  commit {row.commit.value:<8}  TTFT {_ttft(row):>6}  "
        f"context {row.context_tokens} tokens",
        style="bold" if row.commit is not CommitKind.NONE else None,
        highlight=False,
    )


def _ttft(row: TurnRow) -> str:
    return "-" if row.ttft_s is None else f"{row.ttft_s:.2f}s"


@contextlib.asynccontextmanager
async def turn_feed(
    rows: Callable[[], Sequence[TurnRow]],
    on_turn: Callable[[TurnRow], None] | None,
    interval_s: float = 0.1,
) -> AsyncIterator[None]:
    """While the body runs, hand each model turn to `on_turn` once it is complete: its first token
    arrived or a later turn started. `rows()` reads the framework's own records of the turns so
    far; polling them keeps the agents free of progress hooks. The rest when the body ends."""
    if on_turn is None:
        yield
        return
    reported = 0

    def report(final: bool) -> None:
        nonlocal reported
        current = rows()
        for row in current[reported:]:
            if not final and row.ttft_s is None and row is current[-1]:
                break
            on_turn(row)
            reported += 1

    async def poll() -> None:
        while True:
            await asyncio.sleep(interval_s)
            report(final=False)

    poller = asyncio.create_task(poll())
    try:
        yield
    finally:
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
        report(final=True)


def example_parser(doc: str) -> argparse.ArgumentParser:
    """The command line every example shares."""
    parser = CommandParser(
        description=doc.strip().splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--base-url",
        type=http_url,
        help="an OpenAI-compatible server (default: the embedded engine)",
    )
    parser.add_argument("--port", type=port, default=8089, help="port of the embedded engine")
    parser.add_argument("--mode", choices=("lookahead", "sync"), default="lookahead")
    parser.add_argument(
        "--steps", type=positive_int, default=10, help="model calls before the agent stops"
    )
    parser.add_argument(
        "--tool-latency",
        type=non_negative_float,
        default=0.0,
        help="mean seconds a tool call takes (a remote sandbox)",
    )
    parser.add_argument(
        "--json", type=output_file, metavar="PATH", help="also write the per-turn rows as JSON"
    )
    parser.add_argument("--quiet", action="store_true", help="no line per turn while it runs")
    return parser


def example_endpoint(args: argparse.Namespace) -> Endpoint:
    endpoint = (
        Endpoint.connect(args.base_url) if args.base_url else Endpoint.embedded(port=args.port)
    )
    if args.json:  # the report says where the turns' time went
        endpoint.session.timeline = RequestTimeline()
    return endpoint


def progress_printer(args: argparse.Namespace) -> Callable[[TurnRow], None] | None:
    """What an example's `run(on_turn=...)` gets: a line per turn unless --quiet."""
    return None if args.quiet else print_turn


def report(
    args: argparse.Namespace, framework: str, endpoint: Endpoint, rows: Sequence[TurnRow]
) -> None:
    print_turns(f"{framework}, {args.mode} mode, {endpoint.model}", rows)
    if args.json:
        write_turns(
            args.json,
            framework=framework,
            mode=args.mode,
            model=endpoint.model,
            rows=rows,
            timeline=endpoint.session.timeline,
        )

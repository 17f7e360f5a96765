"""`lookahead-sdk report`: the tables in README.md and docs/ are generated from result JSON.

A generated block in a markdown file is fenced by two comments naming the table and its source:

    <!-- report: ttft docs/results/demo/demo.json -->
    ...generated, never edited by hand...
    <!-- /report -->

`lookahead-sdk report` rewrites every such block from its JSON; `--check` only compares and
exits 1 naming the blocks that differ (a test runs it, so a doc table can never drift from its
data). Renderers are registered by name in `RENDERERS`.
"""

from __future__ import annotations

import argparse
import io
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookahead_sdk.base.args import existing_dir, existing_file
from lookahead_sdk.bench.common import markdown_table
from lookahead_sdk.errors import ConfigurationError

Document = dict[str, Any]
Renderer = Callable[[Document], str]
RunsRenderer = Callable[[Sequence[tuple[str, Document]]], str]  # several JSON, comma-separated

BLOCK = re.compile(
    r"(?P<open><!-- report: (?P<name>[\w-]+) (?P<source>\S+) -->\n)(?P<body>.*?)(?P<close><!-- /report -->)",
    re.S,
)
TABLE_WIDTH = 100  # rich tables are rendered at this width into ```text blocks


@dataclass(frozen=True)
class Block:
    path: Path
    name: str
    source: str
    body: str


def _rich_text(tables: Iterable[Any]) -> str:
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=TABLE_WIDTH, color_system=None, force_terminal=False)
    for table in tables:
        console.print(table)
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    return "```text\n" + "\n".join(lines).strip("\n") + "\n```\n"


def render_ttft(document: Document) -> str:
    """`bench ttft` / `demo` results: transform and normal turns, sync vs lookahead."""
    from lookahead_sdk.bench.ttft import summary_tables

    return _rich_text(summary_tables(document))


def render_adapters(document: Document) -> str:
    from lookahead_sdk.bench.adapters import summary_tables

    return _rich_text(summary_tables(document))


def render_runtime_overhead(document: Document) -> str:
    """`bench overhead`: the runtime's bookkeeping per turn, by history size and new messages."""
    from lookahead_sdk.bench.overhead import summary_markdown

    return summary_markdown(document)


def render_engine_threads(document: Document) -> str:
    """`scripts/engine_threads_under_load.py`: engine speed by threads, idle and beside busy
    loops, each against the same thread count on the idle machine."""
    from lookahead_sdk.bench.common import markdown_table

    idle = {row["threads"]: row for row in document["rows"] if row["busy_loops"] == 0}
    rows = []
    for row in document["rows"]:
        base = idle.get(row["threads"])
        rows.append(
            [
                str(row["threads"]),
                str(row["busy_loops"]),
                f"{row['prompt_ms_per_token']:.2f}",
                f"{row['decode_ms_per_token']:.1f}",
                f"{row['prompt_ms_per_token'] / base['prompt_ms_per_token']:.1f}x" if base else "-",
                f"{row['decode_ms_per_token'] / base['decode_ms_per_token']:.1f}x" if base else "-",
            ]
        )
    header = [
        "engine threads",
        "busy loops beside it",
        "prompt ms/token",
        "decode ms/token",
        "prompt vs idle",
        "decode vs idle",
    ]
    return markdown_table(header, rows)


def render_foreground_behind(document: Document) -> str:
    """`scripts/foreground_behind_best_effort.py`: an agent's request alone and behind a warm-up
    chunk, by the chunk's batch size; medians and ranges over the alternating samples."""
    rows = []
    alone = document["median_foreground_s"]["alone"]
    for arm, median in document["median_foreground_s"].items():
        seconds = [row["foreground_s"] for row in document["rows"] if row["arm"] == arm]
        rows.append(
            [
                arm.replace("_", " "),
                f"{median:.3f}",
                f"{min(seconds):.3f}-{max(seconds):.3f}",
                f"{median - alone:+.3f}",
            ]
        )
    header = ["request", "median s", "range s", "over alone (median) s"]
    return markdown_table(header, rows)


def render_warm_up_batches(document: Document) -> str:
    """`scripts/warm_up_batches.py`: prefill rate by batch size and cached context (alone), then
    a warm-up beside decoding replies by its batches, against the same work one after the
    other; medians over the samples."""
    rates = document["median_tokens_per_s"]
    batches = list(next(iter(rates.values())))
    first = batches[0]
    alone_rows = [
        [
            context,
            *(
                f"{by_batch[batch]:.0f}"
                + ("" if batch == first else f" ({by_batch[batch] / by_batch[first] - 1:+.0%})")
                for batch in batches
            ),
        ]
        for context, by_batch in rates.items()
    ]
    alone = markdown_table(
        ["cached tokens", *(f"{batch}-token batches, tokens/s" for batch in batches)], alone_rows
    )
    mixed_s = document["median_mixed_s"]
    reference = mixed_s["one_after_the_other"]
    mixed_rows = [
        [arm.replace("_", " "), f"{seconds:.2f}", f"{seconds / reference:.3f}"]
        for arm, seconds in mixed_s.items()
    ]
    mixed = markdown_table(["work", "median s", "over one after the other"], mixed_rows)
    return f"{alone}\n{mixed}"


def render_ttft_targets(runs: Sequence[tuple[str, Document]]) -> str:
    """`bench ttft` runs: each target per run, a pool of the runs beside them."""
    from lookahead_sdk.bench.ttft_targets import targets_tables

    return _rich_text(targets_tables(runs))


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def render_router_targets(document: Document) -> str:
    """`bench router --mode sim`: every target, per seed, and whether it is met."""
    targets = document["targets"]
    seeds = sorted({seed for t in targets.values() for seed in t.get("per_seed", {})}, key=int)
    header = ["target", *(f"seed {seed}" for seed in seeds), "met"]
    rows: list[list[str]] = []
    for name, target in targets.items():
        per_seed = target.get("per_seed", {})
        if name == "ablations_at_2x":
            for arm, result in target.items():
                if not isinstance(result, dict):
                    continue
                ratios = result["steps_per_min_vs_thunder"]
                rows.append(
                    [
                        f"{arm} / thunder steps/min at 2x (< 1 = the ablation costs)",
                        *(_cell(ratios.get(seed)) for seed in seeds),
                        _cell(result["costs_steps_per_min"]),
                    ]
                )
            continue
        if not per_seed:
            detail = ", ".join(
                f"{k} {_cell(v)}" for k, v in target.items() if k not in ("target", "met")
            )
            rows.append(
                [f"{target['target']} ({detail})", *("" for _ in seeds), _cell(target["met"])]
            )
            continue
        cells = []
        for seed in seeds:
            value = per_seed.get(seed)
            if isinstance(value, dict):
                value = ", ".join(f"{k} {_cell(v)}" for k, v in value.items())
            cells.append(_cell(value))
        rows.append([target["target"], *cells, _cell(target["met"])])
    return markdown_table(header, rows)


ROUTER_ARMS = (
    "thunder",
    "round-robin",
    "session",
    "least-loaded",
    "thunder-no-queue",
    "thunder-no-decay",
)


def render_router_sweep(document: Document) -> str:
    """Steps/min per arm and load, mean over seeds; in parentheses the worst seed's hold p99
    (when over 1 s) and the forced admits summed over seeds (when any)."""
    runs = document["runs"]
    arms = [arm for arm in ROUTER_ARMS if any(run["arm"] == arm for run in runs)]
    loads = sorted({(run["programs"], run["overload"]) for run in runs})
    header = ["programs", "overload", *arms]
    rows: list[list[str]] = []
    for programs, overload in loads:
        row = [str(programs), f"{overload:.2f}"]
        for arm in arms:
            mine = [r for r in runs if r["arm"] == arm and r["programs"] == programs]
            if not mine:
                row.append("")
                continue
            mean = sum(r["steps_per_min"] for r in mine) / len(mine)
            notes = []
            hold = max(r["hold_p99_s"] for r in mine)
            if hold >= 1:
                notes.append(f"{hold:.0f} s")
            forced = sum(r["forced_admits"] for r in mine)
            if forced:
                notes.append(f"{forced} forced")
            row.append(f"{mean:.0f}" + (f" ({', '.join(notes)})" if notes else ""))
        rows.append(row)
    return markdown_table(header, rows)


def render_router_frontier(document: Document) -> str:
    """`bench router --sensitivity`: per thunder setting, hold p99 up to 2x and the worst load
    up to 3x against the setting's own peak, per seed; how many seeds meet both at once."""
    points = document.get("frontier") or []
    seeds = sorted({p["seed"] for p in points})
    defaults = document["setup"]["thunder_config"]
    header = [
        "setting",
        "hold p99 up to 2x (s)",
        "re-prefill at 2x (M tokens)",
        "worst load / peak up to 3x",
        "seeds meeting both",
    ]
    rows: list[list[str]] = []
    for label in dict.fromkeys(_frontier_label(p, defaults) for p in points):
        mine = [p for p in points if _frontier_label(p, defaults) == label]
        rows.append(
            [
                label,
                _per_seed(mine, seeds, _hold_cell),
                _per_seed(mine, seeds, _reprefill_cell),
                _per_seed(mine, seeds, lambda p: f"{p['worst_over_peak']:.2f}"),
                f"{sum(p['both_met'] for p in mine)} of {len(mine)}",
            ]
        )
    return markdown_table(header, rows)


def _per_seed(
    points: Sequence[dict[str, Any]], seeds: Sequence[int], cell: Callable[[dict[str, Any]], str]
) -> str:
    by_seed = {p["seed"]: p for p in points}
    return " / ".join(cell(by_seed[seed]) if seed in by_seed else "-" for seed in seeds)


def _hold_cell(point: dict[str, Any]) -> str:
    forced = point["forced_admits"]
    return f"{point['worst_hold_p99_s']:.0f}" + (f" ({forced} forced)" if forced else "")


def _reprefill_cell(point: dict[str, Any]) -> str:
    tokens = point["reprefill_tokens_at_2x"]
    return "-" if tokens is None else f"{tokens / 1e6:.1f}"


def _frontier_label(point: dict[str, Any], defaults: dict[str, Any]) -> str:
    if point["decay_half_life_s"] == 0:
        return "no preemption (`decay_half_life_s=0`, the thunder-no-decay arm)"
    label = f"aging {point['aging_s']:g} s, budget {point['swap_budget']:g}"
    if point["decay_half_life_s"] != defaults["decay_half_life_s"]:
        label += f", half-life {point['decay_half_life_s']:g} s"
    if point["pause_order"] != defaults["pause_order"]:
        label += f", {point['pause_order']} pauses"
    from lookahead_sdk.bench.router import KNOBS

    if all(point[k] == defaults[k] for k in KNOBS):
        label = f"**{label} (default)**"
    return label


def render_router_overhead(document: Document) -> str:
    """`bench router --mode overhead`: TTFT through the router minus direct, per round (a
    document from before rounds is one round); the targets are judged on the worst round."""
    settings = document["settings"]
    load = document.get("load_average_1m") or {}
    rounds = document.get("rounds") or [document]
    header = ["round", "streams", "direct TTFT p50 / p99", "routed - direct p50 / p99"]
    rows = [
        [
            str(index),
            str(settings["streams"]),
            f"{measured['direct']['p50_ms']:.1f} / {measured['direct']['p99_ms']:.1f} ms",
            f"+{measured['overhead_p50_ms']:.1f} / +{measured['overhead_p99_ms']:.1f} ms",
        ]
        for index, measured in enumerate(rounds)
    ]
    verdicts = ", ".join(f"{t['target']}: {_cell(t['met'])}" for t in document["targets"].values())
    text = markdown_table(header, rows)
    text += f"\nTargets, on the worst round (+{document['overhead_p50_ms']:.1f} / "
    text += f"+{document['overhead_p99_ms']:.1f} ms): {verdicts}.\n"
    before, after = load.get("before"), load.get("after")
    if before is None or after is None:
        return text
    return text + f"\nLoad average (1 min): {before:.1f} before, {after:.1f} after.\n"


def render_router_overhead_runs(runs: Sequence[tuple[str, Document]]) -> str:
    """Several `bench router --mode overhead` runs, one row each, by the commit that ran it."""
    from lookahead_sdk.bench.router_overhead import TARGET_P50_MS

    header = ["commit", "rounds", "direct p50", "added p50, worst round", "rounds <= target"]
    header.append("added p99, worst round")
    rows = []
    for _, document in runs:
        rounds = document.get("rounds") or [document]
        direct = [r["direct"]["p50_ms"] for r in rounds]
        met = sum(r["overhead_p50_ms"] <= TARGET_P50_MS for r in rounds)
        rows.append(
            [
                f"`{((document.get('provenance') or {}).get('commit') or 'unknown')[:7]}`",
                str(len(rounds)),
                f"{min(direct):.1f}-{max(direct):.1f} ms",
                f"+{document['overhead_p50_ms']:.1f} ms",
                f"{met} / {len(rounds)} (<= {TARGET_P50_MS:g} ms)",
                f"+{document['overhead_p99_ms']:.1f} ms",
            ]
        )
    return markdown_table(header, rows)


def render_slo_loads(document: Document) -> str:
    """`bench slo`, one seed: both policies at the loads where the verdict turns, every even one."""
    from lookahead_sdk.bench.report_scheduling import slo_loads_table

    return slo_loads_table(document)


def render_slo_targets(runs: Sequence[tuple[str, Document]]) -> str:
    """`bench slo`, one row per seed: vanilla's break, how far lookahead-aware holds, >= 2x met."""
    from lookahead_sdk.bench.report_scheduling import slo_targets_table

    return slo_targets_table(runs)


def render_estimator(runs: Sequence[tuple[str, Document]]) -> str:
    """`bench estimator`, one row per source of each run: held-out and k-fold errors, <= 10% met."""
    from lookahead_sdk.bench.report_scheduling import estimator_table

    return estimator_table(runs)


def render_gpu_calibration(runs: Sequence[tuple[str, Document]]) -> str:
    """The H200 fit: calibration report, profile and an independent run's batches."""
    from lookahead_sdk.bench.report_scheduling import gpu_calibration_table

    return gpu_calibration_table(runs)


def render_sim_ttft(runs: Sequence[tuple[str, Document]]) -> str:
    """`bench sim-ttft` (--json, optionally its --raw-json): every run, and the verdict line."""
    from lookahead_sdk.bench.report_scheduling import sim_ttft_table

    return sim_ttft_table(runs)


def render_sim_ttft_targets(runs: Sequence[tuple[str, Document]]) -> str:
    """`bench sim-ttft`, one row per sweep: mean p90 reduction, >= 62% met."""
    from lookahead_sdk.bench.report_scheduling import sim_ttft_targets_table

    return sim_ttft_targets_table(runs)


def render_decode_slack(runs: Sequence[tuple[str, Document]]) -> str:
    """Latency profiles: what background prompt tokens cost beside one decode step."""
    from lookahead_sdk.bench.report_scheduling import decode_slack_table

    return decode_slack_table(runs)


def render_router_engine(document: Document) -> str:
    """`bench router --mode engine`: every arm and repeat on real llama-servers, the targets."""
    from lookahead_sdk.bench.router_engine import summary_table, verdict_lines

    table = _rich_text([summary_table(document)])
    return table + "\n" + "\n".join(f"- {line}" for line in verdict_lines(document)) + "\n"


def render_provenance(document: Document) -> str:
    """One line: what measured the figures (commit, build, machine, command)."""
    stamp = document.get("provenance") or {}
    machine = stamp.get("machine") or {}
    commit = (stamp.get("commit") or "unknown")[:10] + (" (dirty)" if stamp.get("dirty") else "")
    threads = document.get("engine_threads")
    build = f"engine build `{stamp.get('engine_build')}`" + (
        f" on {threads} thread{'s' if threads != 1 else ''}" if threads else ""
    )
    return (
        f"Measured at commit `{commit}`, {build}, "
        f"{machine.get('cpus')} CPUs ({machine.get('cpu_model')}), {stamp.get('date')}: "
        f"`{stamp.get('command')}`\n"
    )


RENDERERS: dict[str, Renderer] = {
    "ttft": render_ttft,
    "adapters": render_adapters,
    "router-targets": render_router_targets,
    "router-sweep": render_router_sweep,
    "router-frontier": render_router_frontier,
    "router-overhead": render_router_overhead,
    "router-engine": render_router_engine,
    "runtime-overhead": render_runtime_overhead,
    "engine-threads": render_engine_threads,
    "foreground-behind": render_foreground_behind,
    "warm-up-batches": render_warm_up_batches,
    "slo-loads": render_slo_loads,
    "provenance": render_provenance,
}
RUNS_RENDERERS: dict[str, RunsRenderer] = {
    "ttft-targets": render_ttft_targets,
    "slo-targets": render_slo_targets,
    "estimator": render_estimator,
    "gpu-calibration": render_gpu_calibration,
    "sim-ttft": render_sim_ttft,
    "sim-ttft-targets": render_sim_ttft_targets,
    "decode-slack": render_decode_slack,
    "router-overhead-runs": render_router_overhead_runs,
}


def blocks(path: Path) -> list[Block]:
    return [
        Block(path, match["name"], match["source"], match["body"])
        for match in BLOCK.finditer(path.read_text())
    ]


def _run_names(sources: list[str]) -> list[tuple[str, str]]:
    """Each source's run name: its file name without the suffix, led by its folder where two
    sources share a name (a run beside the one it replaced, kept under history/)."""
    stems = [Path(source).stem for source in sources]
    return [
        (f"{Path(source).parent.name}/{stem}" if stems.count(stem) > 1 else stem, source)
        for stem, source in zip(stems, sources, strict=True)
    ]


def render(block: Block, root: Path) -> str:
    known = sorted([*RENDERERS, *RUNS_RENDERERS])
    if block.name not in known:
        raise ConfigurationError(f"{block.path}: no report renderer {block.name!r}; known: {known}")
    sources = block.source.split(",")
    for source in sources:
        if not (root / source).is_file():
            raise ConfigurationError(
                f"{block.path}: report {block.name!r} reads {source}, missing under {root} "
                "(--root names the repository root)"
            )
    documents = [(name, _load_json(root / source, block)) for name, source in _run_names(sources)]
    if block.name in RUNS_RENDERERS:
        return RUNS_RENDERERS[block.name](documents)
    if len(documents) != 1:
        raise ConfigurationError(
            f"{block.path}: report {block.name!r} reads one JSON file, got {block.source}; "
            f"only {sorted(RUNS_RENDERERS)} take several, comma-separated"
        )
    return RENDERERS[block.name](documents[0][1])


def _load_json(path: Path, block: Block) -> Any:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigurationError(
            f"{block.path}: report {block.name!r} reads {path}, which is not JSON ({error})"
        ) from None


def regenerate(path: Path, root: Path) -> tuple[str, list[Block]]:
    """The file's text with every block regenerated, and the blocks that changed."""
    text = path.read_text()
    changed: list[Block] = []

    def replace(match: re.Match[str]) -> str:
        block = Block(path, match["name"], match["source"], match["body"])
        body = render(block, root)
        if body != block.body:
            changed.append(block)
        return f"{match['open']}{body}{match['close']}"

    return BLOCK.sub(replace, text), changed


def markdown_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def run_report(root: Path, paths: Sequence[Path] = (), *, check: bool = False) -> list[Block]:
    """Regenerate (or with `check`, compare) the blocks of `paths` (default: README + docs).
    Every file is rendered before any is written: a block that cannot be rendered changes none."""
    stale: list[Block] = []
    rewritten: list[tuple[Path, str]] = []
    for path in paths or markdown_files(root):
        text, changed = regenerate(path, root)
        stale += changed
        if changed:
            rewritten.append((path, text))
    if not check:
        for path, text in rewritten:
            path.write_text(text)
    return stale


def main(args: argparse.Namespace) -> int:
    root = Path(args.root).resolve()
    stale = run_report(root, [Path(p).resolve() for p in args.paths], check=args.check)
    for block in stale:
        verb = "differs from" if args.check else "regenerated from"
        shown = block.path.relative_to(root) if block.path.is_relative_to(root) else block.path
        print(f"{shown}: table {block.name!r} {verb} {block.source}")
    return 1 if args.check and stale else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="regenerate the result tables in README.md and docs/ from their JSON"
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=existing_file,
        help="markdown files (default: README.md, docs/)",
    )
    parser.add_argument(
        "--root", type=existing_dir, default=".", help="the repository root (default: .)"
    )
    parser.add_argument(
        "--check", action="store_true", help="only compare; exit 1 if a table differs"
    )
    parser.set_defaults(func=main)

"""The picture of a `bench ttft --trace` file: each run's requests as bars on one time axis, one
row per program, with its commit turns marked, so where a slow commit waited shows at a glance."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lookahead_sdk.bench.common import new_figure, save_figure

# Request kinds (`client/timeline.py`) and their colours; "other" (tokenize, probes) is not drawn.
KIND_COLOURS: dict[str, str] = {
    "foreground": "tab:blue",
    "warm_up": "tab:orange",
    "background_llm": "tab:red",
    "slot_copy": "tab:gray",
}
BAR_HEIGHT = 0.6


def runs_to_plot(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each strategy's first repeat, sync then lookahead (a repeat looks like the first)."""
    first = [run for run in runs if run["repeat"] == 0]
    order = {"sync": 0, "lookahead": 1}
    strategies = list(dict.fromkeys(run["strategy"] for run in first))
    return sorted(first, key=lambda run: (strategies.index(run["strategy"]), order[run["mode"]]))


def plot_trace(runs: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """One panel per plotted run (`runs_to_plot`): a row per program with its requests as bars
    (a foreground request pale until its first output), and each commit turn as a black line
    from when the agent wanted to call the model to its first token."""
    shown = runs_to_plot(runs)
    if not shown:
        raise ValueError("the trace has no runs to plot (expected runs with repeat 0)")
    height = max(2.5, 0.45 * max(_program_count(run) for run in shown) + 1.5)
    figure, axes = new_figure(len(shown), 1, size=(12, height * len(shown)))
    for axis, run in zip(axes[:, 0], shown, strict=True):
        _draw_run(axis, run)
    handles = [
        axes[0, 0].barh(0, 0, color=colour, label=kind.replace("_", " "))
        for kind, colour in KIND_COLOURS.items()
    ]
    (commit_line,) = axes[0, 0].plot([], [], color="black", linewidth=2, label="commit turn")
    axes[0, 0].legend(handles=[*handles, commit_line], loc="upper right", fontsize=7, ncol=5)
    return save_figure(figure, path)


def _program_count(run: dict[str, Any]) -> int:
    return len({turn["program_id"] for turn in run["turns"]}) or 1


def _draw_run(axis: Any, run: dict[str, Any]) -> None:
    programs = sorted({turn["program_id"] for turn in run["turns"]})
    row = {program: index for index, program in enumerate(programs)}
    duration = run["duration_s"]
    for request in run["requests"]:
        colour = KIND_COLOURS.get(request["kind"])
        if colour is None or request["program_id"] not in row:
            continue
        sent = request["sent_s"]
        ended = request["ended_s"] if request["ended_s"] is not None else duration
        y = row[request["program_id"]]
        if request["kind"] == "foreground" and request["first_output_s"] is not None:
            first = request["first_output_s"]
            axis.barh(y, first - sent, left=sent, height=BAR_HEIGHT, color=colour, alpha=0.35)
            axis.barh(y, ended - first, left=first, height=BAR_HEIGHT, color=colour)
        else:
            axis.barh(y, ended - sent, left=sent, height=BAR_HEIGHT * 0.7, color=colour)
    for turn in run["turns"]:
        if turn["commit"] == "none" or turn["first_token_s"] is None:
            continue
        y = row[turn["program_id"]] + BAR_HEIGHT / 2 + 0.08
        axis.plot([turn["started_s"], turn["first_token_s"]], [y, y], color="black", linewidth=2)
    axis.set_yticks(range(len(programs)), programs, fontsize=7)
    axis.set_ylim(-0.6, len(programs) + 0.5)  # room above the top row for the legend
    axis.set_xlim(0, duration)
    commits = sum(turn["commit"] != "none" for turn in run["turns"])
    axis.set(
        xlabel="seconds from the run's start",
        title=f"{run['strategy']} / {run['mode']}: {duration:.0f} s, "
        f"{commits} commit turn{'' if commits == 1 else 's'}",
    )

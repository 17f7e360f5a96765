"""Small helpers shared by the benchmarks: JSON output, plots, progress, percentiles, ports."""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import socket
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


def write_json(path: str | Path, document: Any) -> Path:
    """Write a result document, stamped with where it came from (`provenance`): a figure read
    later can always be traced to the commit, build, machine and command that measured it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(document, dict) and "provenance" not in document:
        document = {"provenance": provenance(), **document}
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def provenance() -> dict[str, Any]:
    """The git commit (and whether code outside docs/ had uncommitted changes), the embedded
    engine's build id and model, the machine, the UTC date and the exact command."""
    from lookahead_sdk._version import __version__
    from lookahead_sdk.engine.build_id import BUILD_ID
    from lookahead_sdk.engine.model import DEFAULT_QUANTIZATION, MODEL_NAME

    root = Path(__file__).resolve().parents[2]
    commit = _git(root, "rev-parse", "HEAD")
    return {
        "commit": commit,
        "dirty": dirty_outside_docs(root) if commit is not None else None,
        "version": __version__,
        "engine_build": BUILD_ID,
        "model": f"{MODEL_NAME} ({DEFAULT_QUANTIZATION})",
        "machine": {
            "cpus": os.cpu_count(),
            "cpu_model": _cpu_model(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command_line(),
    }


def command_line() -> str:
    """The command this process runs, as a shell would take it back (an argument with a space
    or a quote is quoted)."""
    if Path(sys.argv[0]).name in ("lookahead-sdk", "__main__.py"):
        return shlex.join(["lookahead-sdk", *sys.argv[1:]])
    return shlex.join([Path(sys.executable).name, *sys.argv])


def dirty_outside_docs(root: Path) -> bool | None:
    """Whether the checkout at `root` has uncommitted changes to tracked files outside docs/ and
    README.md. Results and docs cannot change a measurement: a bench that runs after another
    one wrote its JSON into docs/ (and `report` its tables into the README) still measured the
    committed code."""
    status = _git(
        root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs", ":!README.md"
    )
    return None if status is None else bool(status)


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def progress(*, disable: bool = False) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=disable,
        transient=True,
    )


def compact_table(title: str, columns: Sequence[str]) -> Table:
    """A report table without side borders: with short headers (a legend explains them) its
    figures stay whole in an 80-column terminal or a pipe, where rich would cut them to `7.…`."""
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    return table


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub markdown table: the header, its rule, the rows."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(row) + " |" for row in lines) + "\n"


def p50(values: Sequence[float]) -> float:
    return percentile(values, 50)


def new_figure(rows: int = 1, cols: int = 1, *, size: tuple[float, float] = (10, 4)) -> Any:
    """A matplotlib (figure, axes) pair on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, figsize=size, squeeze=False)


def save_figure(figure: Any, path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server a bench starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

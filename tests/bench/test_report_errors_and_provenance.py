"""`lookahead-sdk report` errors are one line and write nothing, a run without a
git commit still renders, and the provenance command can be run again as recorded."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from lookahead_sdk.bench.common import provenance
from lookahead_sdk.bench.report import RUNS_RENDERERS, run_report
from lookahead_sdk.errors import ConfigurationError
from tests.support.cli import run_cli

STALE = "<!-- report: provenance run.json -->\nhand-typed\n<!-- /report -->\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "run.json").write_text('{"provenance": {"commit": "abc", "command": "x"}}')
    (tmp_path / "a.md").write_text(STALE)
    return tmp_path


@pytest.mark.parametrize(
    ("bad_block", "named"),
    [
        ("<!-- report: ttft missing.json -->\n<!-- /report -->\n", "missing.json, missing"),
        ("<!-- report: tfft run.json -->\n<!-- /report -->\n", "no report renderer 'tfft'"),
        ("<!-- report: ttft broken.json -->\n<!-- /report -->\n", "broken.json, which is not JSON"),
    ],
)
def test_a_block_that_cannot_render_is_one_line_and_no_file_is_written(
    bad_block: str, named: str, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "broken.json").write_text("{")
    (root / "b.md").write_text(bad_block)
    with pytest.raises(ConfigurationError, match=named):
        run_report(root, [root / "a.md", root / "b.md"])
    assert (root / "a.md").read_text() == STALE  # the good file was not rewritten either
    pages = [str(root / "a.md"), str(root / "b.md")]
    code, _, err = run_cli(["report", "--root", str(root), *pages], capsys)
    assert code == 2 and named in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert (root / "a.md").read_text() == STALE


def test_a_missing_markdown_file_is_a_usage_error(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["report", "--root", str(root), str(root / "nothere.md")], capsys)
    assert code == 2 and "nothere.md" in err and len(err.strip().splitlines()) == 1


def test_a_file_outside_the_root_is_regenerated_and_listed(
    root: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path_factory.mktemp("elsewhere") / "page.md"
    page.write_text(STALE)
    code, out, err = run_cli(["report", "--root", str(root), str(page)], capsys)
    assert code == 0 and "Traceback" not in err
    assert f"{page}: table 'provenance' regenerated from run.json" in out
    assert "hand-typed" not in page.read_text()


def test_the_overhead_runs_table_takes_a_run_measured_outside_git() -> None:
    document = {
        "provenance": {"commit": None},  # what `provenance()` records outside a checkout
        "settings": {"streams": 4},
        "overhead_p50_ms": 1.0,
        "overhead_p99_ms": 2.0,
        "direct": {"p50_ms": 3.0, "p99_ms": 4.0},
    }
    table = RUNS_RENDERERS["router-overhead-runs"]([("run", document)])
    assert "`unknown`" in table


def test_the_recorded_command_runs_again_as_it_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["/venv/bin/lookahead-sdk", "demo", "--out", "my results", "--repeats", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    command = provenance()["command"]
    assert shlex.split(command) == ["lookahead-sdk", *argv[1:]]
    monkeypatch.setattr(sys, "argv", ["/venv/bin/lookahead-sdk", "demo", "--repeats", "2"])
    assert provenance()["command"] == "lookahead-sdk demo --repeats 2"  # plain ones unchanged

"""The command line on a bare install (`pip install lookahead-sdk`, no extras): every command's
help works and a command that needs an extra says which one, instead of a traceback. Run in a
subprocess where the optional packages cannot be imported, as on a machine without them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lookahead_sdk.cli import EXTRA_OF_PACKAGE, build_parser

BLOCKER = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    BLOCKED = set(sys.argv[1].split(","))

    class NotInstalled(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    from lookahead_sdk.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)
OPTIONAL = ",".join(EXTRA_OF_PACKAGE)


def run_bare(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, OPTIONAL, *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def command_paths() -> list[tuple[str, ...]]:
    """Every command and sub-command of the full parser (built with all extras installed)."""
    paths: list[tuple[str, ...]] = []

    def walk(parser: object, prefix: tuple[str, ...]) -> None:
        for action in getattr(parser, "_actions", ()):
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict):
                for name, sub in choices.items():
                    paths.append((*prefix, name))
                    walk(sub, (*prefix, name))

    walk(build_parser(), ())
    return paths


def test_help_and_version_work_without_any_extra() -> None:
    result = run_bare("--help")
    assert result.returncode == 0, result.stderr
    assert "engine" in result.stdout and "bench" in result.stdout
    version = run_bare("--version")
    assert version.returncode == 0 and version.stdout.startswith("lookahead-sdk ")


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_every_commands_help_works_without_any_extra(path: tuple[str, ...]) -> None:
    result = run_bare(*path, "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_a_command_needing_an_extra_names_it(tmp_path: Path) -> None:
    data = tmp_path / "batches.csv"
    data.write_text("decode_contexts,prefill_chunks,ms\n")
    result = run_bare(
        "calibrate", "--profile-data", str(data), "--save-profile", str(tmp_path / "p.json")
    )
    assert result.returncode == 2
    assert "pip install 'lookahead-sdk[calibrate]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_engine_commands_run_without_any_extra() -> None:
    result = run_bare("engine", "status", "--port", "1")
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr
    assert '"running": false' in result.stdout

"""Every benchmark document says what measured it: commit, build, model, machine, date, command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from lookahead_sdk.bench.common import dirty_outside_docs, write_json
from lookahead_sdk.engine.build_id import BUILD_ID

ROOT = Path(__file__).resolve().parents[2]


def test_a_written_document_carries_its_provenance(tmp_path: Path) -> None:
    path = write_json(tmp_path / "result.json", {"runs": [1, 2]})
    document = json.loads(path.read_text())
    stamp = document["provenance"]
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert stamp["commit"] == head and isinstance(stamp["dirty"], bool)
    assert stamp["engine_build"] == BUILD_ID and "SmolLM2" in stamp["model"]
    assert stamp["machine"]["cpus"] == os.cpu_count()
    assert stamp["date"].endswith("+00:00") and stamp["command"]
    assert document["runs"] == [1, 2]


def test_a_document_with_its_own_provenance_keeps_it(tmp_path: Path) -> None:
    path = write_json(tmp_path / "r.json", {"provenance": {"commit": "abc"}, "runs": []})
    assert json.loads(path.read_text())["provenance"] == {"commit": "abc"}


def test_dirty_means_changed_code_not_changed_results(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "result.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert dirty_outside_docs(tmp_path) is False
    (tmp_path / "docs" / "result.json").write_text('{"runs": [1]}')
    assert dirty_outside_docs(tmp_path) is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert dirty_outside_docs(tmp_path) is True

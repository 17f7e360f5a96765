"""Every ```python block of the adapter pages runs: each page's blocks, in order, as one script
(the page reads like a notebook) in a fresh process against the embedded engine. A block may be
left out only with `<!-- skip-test: reason -->` on the line before it, for code needing what
cannot run here (a hosted API's key); the reasons are checked to be there and few."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "adapters"
PAGES = ("langchain.md", "llamaindex.md", "autogen.md", "openai.md")
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
SKIP = re.compile(r"<!-- skip-test: (.+?) -->\s*$")
MAX_SKIPPED_PER_PAGE = 1


def blocks(page: str) -> list[tuple[int, str, str | None]]:
    """(line, code, skip reason or None) of each python block of a page."""
    text = (DOCS / page).read_text()
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        found.append((line, match.group(1), skip.group(1) if skip else None))
    return found


def script(page: str) -> str:
    parts = [
        f"# --- {page}, block at line {line}\n{code}"
        for line, code, skip in blocks(page)
        if skip is None
    ]
    return "\n\n".join(parts)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_has_python_blocks_and_few_skipped_ones_with_a_reason(page: str) -> None:
    found = blocks(page)
    assert sum(skip is None for _, _, skip in found) >= 2
    skipped = [skip for _, _, skip in found if skip is not None]
    assert len(skipped) <= MAX_SKIPPED_PER_PAGE and all(reason.strip() for reason in skipped)
    compile(script(page), page, "exec")  # every block is valid Python, joined as they run


@pytest.mark.engine
@pytest.mark.parametrize("page", PAGES)
def test_the_pages_python_blocks_run_on_the_engine(
    page: str, embedded_engine: Any, tmp_path: Path
) -> None:
    path = tmp_path / f"{Path(page).stem}_page.py"
    path.write_text(script(page))
    completed = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env={**os.environ, "LOOKAHEAD_BASE_URL": embedded_engine.base_url},
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert completed.returncode == 0, (completed.stdout[-2000:], completed.stderr[-4000:])

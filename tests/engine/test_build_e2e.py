"""Build llama.cpp from the llama-cpp-python sdist into an empty cache, as on a fresh machine.

Opt-in (downloads the sdist with pip, ~5-8 min on 2 cores): LOOKAHEAD_SDK_TEST_FRESH_BUILD=1.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lookahead_sdk.engine import build, paths

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(
        os.environ.get("LOOKAHEAD_SDK_TEST_FRESH_BUILD") != "1",
        reason="set LOOKAHEAD_SDK_TEST_FRESH_BUILD=1 to build llama.cpp from scratch",
    ),
]


def test_fresh_build_installs_working_binaries(isolated_cache: Path) -> None:
    assert build.installed_binaries() is None
    binaries = build.ensure_binaries(show_progress=False)
    assert binaries.server.is_relative_to(isolated_cache)
    version = subprocess.run(
        [str(binaries.server), "--version"], capture_output=True, text=True, check=True
    )
    assert "version" in (version.stdout + version.stderr)
    # Only the installed binaries and the build log remain; the build tree is gone.
    assert {entry.name for entry in paths.version_dir().iterdir()} <= {
        paths.bin_dir().name,
        "logs",
        ".build.lock",
    }
    assert build.ensure_binaries(show_progress=False) == binaries  # cached: no rebuild

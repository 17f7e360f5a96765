"""Fixtures for the engine tests: an isolated cache root and a fake llama-server process."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lookahead_sdk.engine import paths


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the engine cache root at a temporary directory."""
    root = tmp_path / "cache"
    monkeypatch.setenv(paths.CACHE_ENV_VAR, str(root))
    return root


@pytest.fixture
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def fake_llama_server(tmp_path: Path, free_port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose argv looks like ``llama-server ... --port <free_port>`` (a sleeping Python)."""
    executable = tmp_path / "bin" / "llama-server"
    executable.parent.mkdir()
    executable.symlink_to(sys.executable)
    process = subprocess.Popen(
        [str(executable), "-c", "import time; time.sleep(120)", "--port", str(free_port)]
    )
    # Wait until the child has exec'd, so /proc shows the final argv.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cmdline = Path(f"/proc/{process.pid}/cmdline")
        if not cmdline.exists() or b"--port" in cmdline.read_bytes():
            break
        time.sleep(0.01)
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()

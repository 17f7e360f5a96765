"""Fixtures for the engine and engine-command tests: an isolated cache root, a free port and
fake llama-server processes (registered in tests/conftest.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lookahead_sdk.engine import paths
from lookahead_sdk.engine.build import SERVER_BINARY, EngineBinaries
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.server import server_command

# Answers every GET (so /health and /props) with 200, on the port after --port in its argv.
_SERVE_HEALTH = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Ok).serve_forever()
"""


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
def fake_llama_server(isolated_cache: Path, free_port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose argv looks like ``<cache>/.../llama-server ... --port <free_port>`` (a
    sleeping Python), where our build puts the binary."""
    process = _spawn_fake(["-c", "import time; time.sleep(120)", "--port", str(free_port)])
    yield process
    _end(process)


@pytest.fixture
def serving_fake_llama_server(
    isolated_cache: Path, free_port: int
) -> Iterator[subprocess.Popen[bytes]]:
    """A fake llama-server with the argv we start the engine with (``EngineConfig(port=
    free_port)``), listening on ``free_port`` and answering ``/health`` with 200."""
    binaries = EngineBinaries(_fake_binary(), paths.bin_dir() / "llama-quantize")
    command = server_command(
        EngineConfig(port=free_port), binaries, Path("SmolLM2-135M-Instruct.Q8_0.gguf")
    )
    process = _spawn_fake(["-c", _SERVE_HEALTH, *command[1:]])
    deadline = time.monotonic() + 10
    while not _answers(f"http://127.0.0.1:{free_port}/health"):
        assert process.poll() is None and time.monotonic() < deadline, "fake server did not start"
        time.sleep(0.02)
    yield process
    _end(process)


def _fake_binary() -> Path:
    executable = paths.bin_dir() / SERVER_BINARY
    if not executable.exists():
        executable.parent.mkdir(parents=True, exist_ok=True)
        executable.symlink_to(sys.executable)
    return executable


def _spawn_fake(arguments: list[str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([str(_fake_binary()), *arguments])
    # Wait until the child has exec'd, so /proc shows the final argv.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cmdline = Path(f"/proc/{process.pid}/cmdline")
        if not cmdline.exists() or b"--port" in cmdline.read_bytes():
            break
        time.sleep(0.01)
    return process


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()

"""The state file of an engine we started, and checks that its pid is still that llama-server."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookahead_sdk.engine import paths
from lookahead_sdk.engine.build import SERVER_BINARY
from lookahead_sdk.engine.config import EngineConfig


@dataclass(frozen=True)
class EngineState:
    pid: int
    port: int
    config: EngineConfig
    binary: str
    model_path: str
    log_path: str
    started_at: float  # Unix time

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "port": self.port,
            "config": self.config.to_dict(),
            "binary": self.binary,
            "model_path": self.model_path,
            "log_path": self.log_path,
            "started_at": self.started_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineState:
        return cls(
            pid=int(data["pid"]),
            port=int(data["port"]),
            config=EngineConfig.from_dict(data["config"]),
            binary=str(data["binary"]),
            model_path=str(data["model_path"]),
            log_path=str(data["log_path"]),
            started_at=float(data["started_at"]),
        )


def write_state(state: EngineState) -> Path:
    """Write the state file atomically (temporary file + rename)."""
    target = paths.state_file(state.port)
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(state.to_dict(), handle, indent=2)
    os.replace(temporary, target)
    return target


def read_state(port: int) -> EngineState | None:
    """The recorded state for ``port``; None if there is none or it is unreadable."""
    try:
        data = json.loads(paths.state_file(port).read_text())
        return EngineState.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_state(port: int) -> None:
    paths.state_file(port).unlink(missing_ok=True)


def is_engine_process(state: EngineState) -> bool:
    """True if ``state.pid`` is alive and is the llama-server we recorded (guards pid reuse)."""
    command = process_command_line(state.pid)
    if not command or Path(command[0]).name != SERVER_BINARY:
        return False
    return _option_value(command, "--port") == str(state.port)


def process_command_line(pid: int) -> list[str] | None:
    """The argv of a live (non-zombie) process, or None."""
    proc = Path(f"/proc/{pid}")
    if proc.is_dir():
        try:
            if _proc_state(proc) == "Z":
                return None
            raw = (proc / "cmdline").read_bytes()
        except OSError:
            return None
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part] or None
    # No /proc (macOS): ask ps.
    result = subprocess.run(
        ["ps", "-o", "state=,command=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    fields = result.stdout.split()
    if result.returncode != 0 or len(fields) < 2 or fields[0].startswith("Z"):
        return None
    return fields[1:]


def _proc_state(proc: Path) -> str:
    # /proc/<pid>/stat is "pid (comm) STATE ..."; comm may contain spaces or parentheses.
    stat = (proc / "stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def _option_value(command: list[str], option: str) -> str | None:
    for index, argument in enumerate(command[:-1]):
        if argument == option:
            return command[index + 1]
    return None

"""The state file of an engine we started, and checks that its pid is still that llama-server."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookahead_sdk.engine import paths
from lookahead_sdk.engine.build import SERVER_BINARY
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.errors import EngineStateFileError
from lookahead_sdk.errors import InvalidInputError

_PROC = Path("/proc")


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
    def from_dict(cls, data: object) -> EngineState:
        """Raises `InvalidInputError` naming the field that is missing or of the wrong type."""
        if not isinstance(data, dict):
            raise InvalidInputError(f"not a JSON object but {type(data).__name__}")
        pid = _field(data, "pid", int)
        if pid < 1:  # os.kill(0 or -1, ...) would signal whole process groups
            raise InvalidInputError(f"field 'pid' must be a process id >= 1, got {pid}")
        port = _field(data, "port", int)
        config_data = _field(data, "config", dict)
        try:
            config = EngineConfig.from_dict(config_data)
        except (TypeError, ValueError) as error:
            raise InvalidInputError(f"field 'config': {error}") from None
        return cls(
            pid=pid,
            port=port,
            config=config,
            binary=_field(data, "binary", str),
            model_path=_field(data, "model_path", str),
            log_path=_field(data, "log_path", str),
            started_at=float(_field(data, "started_at", (int, float))),
        )


def _field(data: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in data:
        raise InvalidInputError(f"field {name!r} is missing")
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise InvalidInputError(f"field {name!r} must be {names}, got {value!r}")
    return value


def write_state(state: EngineState) -> Path:
    """Write the state file atomically (temporary file + rename)."""
    target = paths.state_file(state.port)
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(descriptor, "w") as handle:
            json.dump(state.to_dict(), handle, indent=2)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def read_state(port: int) -> EngineState | None:
    """The recorded state for ``port``; None if there is none. A file that cannot be read raises
    `EngineStateFileError` naming it and what is wrong."""
    path = paths.state_file(port)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise EngineStateFileError(f"engine state file {path} cannot be read: {error}") from None
    try:
        state = EngineState.from_dict(json.loads(text))
    except json.JSONDecodeError as error:
        raise EngineStateFileError(f"engine state file {path} is not JSON ({error})") from None
    except InvalidInputError as error:
        raise EngineStateFileError(f"engine state file {path} is corrupt: {error}") from None
    if state.port != port:
        raise EngineStateFileError(
            f"engine state file {path} is corrupt: it records port {state.port}, not {port}"
        )
    return state


def remove_state(port: int) -> None:
    paths.state_file(port).unlink(missing_ok=True)


def is_engine_process(state: EngineState) -> bool:
    """True if ``state.pid`` is alive and is the llama-server we recorded (guards pid reuse)."""
    return is_llama_server(state.pid, state.port)


def is_llama_server(pid: int, port: int) -> bool:
    """True if ``pid`` is alive and is a llama-server started for ``port``."""
    command = process_command_line(pid)
    return command is not None and _serves_port(command, port)


def find_engine_process(port: int) -> tuple[int, list[str]] | None:
    """(pid, argv) of our llama-server (the binary we build, under the cache root) started for
    ``port``, found in the process table: the engine when its state file is lost."""
    root = paths.cache_root().absolute()
    for pid, command in _process_table():
        if _serves_port(command, port) and Path(command[0]).absolute().is_relative_to(root):
            return pid, command
    return None


def process_start_time(pid: int) -> float | None:
    """When ``pid`` started (Unix time), where /proc says."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in (_PROC / "stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        # Field 22, starttime in clock ticks since boot; the fields after "(comm)" start at 3.
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def process_command_line(pid: int) -> list[str] | None:
    """The argv of a live (non-zombie) process, or None."""
    if _has_proc():
        return _proc_command_line(_PROC / str(pid))
    # No /proc (macOS): ask ps.
    result = subprocess.run(
        ["ps", "-o", "state=,command=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    fields = result.stdout.split()
    if result.returncode != 0 or len(fields) < 2 or fields[0].startswith("Z"):
        return None
    return fields[1:]


def _process_table() -> Iterator[tuple[int, list[str]]]:
    """(pid, argv) of every live process we can read."""
    if _has_proc():
        for entry in _PROC.iterdir():
            if entry.name.isdigit() and (command := _proc_command_line(entry)):
                yield int(entry.name), command
        return
    result = subprocess.run(
        ["ps", "-axww", "-o", "pid=,state=,command="], capture_output=True, text=True, check=False
    )
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0].isdigit() and not fields[1].startswith("Z"):
            yield int(fields[0]), fields[2:]


def _has_proc() -> bool:
    return (_PROC / "self").is_dir()


def _proc_command_line(proc: Path) -> list[str] | None:
    try:
        if _proc_state(proc) == "Z":
            return None
        raw = (proc / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part] or None


def _serves_port(command: list[str], port: int) -> bool:
    return Path(command[0]).name == SERVER_BINARY and option_value(command, "--port") == str(port)


def _proc_state(proc: Path) -> str:
    # /proc/<pid>/stat is "pid (comm) STATE ..."; comm may contain spaces or parentheses.
    stat = (proc / "stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def option_value(command: list[str], option: str) -> str | None:
    for index, argument in enumerate(command[:-1]):
        if argument == option:
            return command[index + 1]
    return None

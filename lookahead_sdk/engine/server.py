"""Start, find, check and stop the embedded llama-server."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from lookahead_sdk.engine import paths
from lookahead_sdk.engine.build import EngineBinaries, ensure_binaries
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.errors import (
    EngineConflictError,
    EngineExitedError,
    EngineStartError,
    EngineStateFileError,
    EngineStopError,
    PortInUseError,
)
from lookahead_sdk.engine.model import MODEL_NAME, QUANTIZATIONS, model_path
from lookahead_sdk.engine.state import (
    EngineState,
    find_engine_process,
    is_engine_process,
    is_llama_server,
    option_value,
    process_command_line,
    process_start_time,
    read_state,
    remove_state,
    write_state,
)

log = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT_S = 180.0
_LOG_TAIL_LINES = 30

# Engines started by this Python process, so that stopping one also reaps it (no zombie).
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class EngineHandle:
    """A running engine. ``reused`` is True when ``ensure_engine`` found it already running."""

    pid: int
    config: EngineConfig
    model_path: Path
    log_path: Path
    started_at: float
    reused: bool = False

    @property
    def base_url(self) -> str:
        return f"http://{_client_host(self.config.host)}:{self.config.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def model(self) -> str:
        """The model name the server reports (its ``--alias``)."""
        return MODEL_NAME

    def stop(self) -> bool:
        return stop_engine(self.config.port)

    def exit_error(self, *, wait_s: float = 2.0) -> EngineExitedError | None:
        """The error to report if this engine has exited (crashed, killed), else None. A client
        sees its connection drop just before the process is gone: wait up to ``wait_s`` for it."""
        deadline = time.monotonic() + wait_s
        while is_llama_server(self.pid, self.config.port):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        _reap(self.pid)
        return EngineExitedError(
            f"the engine stopped: llama-server (pid {self.pid}) on port {self.config.port} "
            f"exited during the run; see its log {self.log_path}"
        )


@dataclass(frozen=True)
class EngineStatus:
    port: int
    pid: int
    url: str
    model: str
    model_path: str
    quantization: str
    slots: int
    ctx_per_slot: int
    running: bool
    healthy: bool
    started_at: float
    log_path: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def server_command(config: EngineConfig, binaries: EngineBinaries, model: Path) -> list[str]:
    """The llama-server argv for ``config``."""
    config = config.resolved()
    return [
        str(binaries.server),
        "--model", str(model),
        "--alias", MODEL_NAME,
        "--host", config.host,
        "--port", str(config.port),
        "--parallel", str(config.slots),
        # Without --kv-unified, llama.cpp gives each slot ctx_size / parallel tokens.
        "--ctx-size", str(config.total_ctx),
        "--threads", str(config.threads),
        "--threads-batch", str(config.threads),
        "--flash-attn", config.flash_attn,
        "--batch-size", str(config.batch_tokens),
        "--cache-ram", str(config.cache_ram_mib),
        "--jinja",
        "--metrics",
        "--slots",
        "--cache-prompt",
        # On every task it starts, llama-server would copy each idle slot whose prompt changed
        # into the --cache-ram prompt cache (a full KV state copy, in its main loop): with a
        # lookahead branch in a second slot that delayed each request by ~0.1-0.35 s on the
        # embedded engine. A prompt a slot is about to lose is still saved when it is reassigned.
        "--no-cache-idle-slots",
        "--no-webui",
        *(["--slot-save-path", f"{paths.slot_save_dir(config.port)}/"] if config.slot_copies else []),
        *config.extra_args,
    ]  # fmt: skip


# The options of `server_command` that carry an EngineConfig field, and how to read them back.
_CONFIG_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--host": ("host", str),
    "--port": ("port", int),
    "--parallel": ("slots", int),
    "--threads": ("threads", int),
    "--flash-attn": ("flash_attn", str),
    "--batch-size": ("batch_tokens", int),
    "--cache-ram": ("cache_ram_mib", int),
}


def config_from_command(command: Sequence[str]) -> EngineConfig:
    """The (resolved) config a `server_command` argv runs, to rebuild a lost state file. An
    option it lacks keeps its default; raises ValueError for a value EngineConfig rejects."""
    command = list(command)
    fields: dict[str, Any] = {
        field: convert(value)
        for option, (field, convert) in _CONFIG_OPTIONS.items()
        if (value := option_value(command, option)) is not None
    }
    if (total := option_value(command, "--ctx-size")) is not None:
        fields["ctx_per_slot"] = int(total) // fields.get("slots", EngineConfig.slots)
    # Model files are named <model>.<QUANTIZATION>.gguf (engine.model).
    model = Path(option_value(command, "--model") or "")
    quantization = Path(model.stem).suffix.removeprefix(".").lower()
    if quantization in QUANTIZATIONS:
        fields["quantization"] = quantization
    fields["slot_copies"] = "--slot-save-path" in command
    if "--no-webui" in command:  # the last fixed argument; extra_args follow
        end = command.index("--no-webui") + 1
        end += 2 * (command[end : end + 1] == ["--slot-save-path"])
        fields["extra_args"] = tuple(command[end:])
    return EngineConfig(**fields).resolved()


def start_engine(
    config: EngineConfig,
    *,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    show_progress: bool = True,
) -> EngineHandle:
    """Start llama-server for ``config`` and wait until ``/health`` answers ok."""
    with _port_lock(config.port):
        return _start_unlocked(config, timeout_s=timeout_s, show_progress=show_progress)


def ensure_engine(
    config: EngineConfig,
    *,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    show_progress: bool = True,
) -> EngineHandle:
    """Reuse the healthy engine we started on ``config.port`` if its config matches; else start one."""
    with _port_lock(config.port):
        state = _live_state(config.port)
        if state is None:
            return _start_unlocked(config, timeout_s=timeout_s, show_progress=show_progress)
        if not config.compatible_with(state.config):
            raise EngineConflictError(
                f"an engine started by lookahead-sdk already runs on port {config.port} "
                f"(pid {state.pid}) with a different configuration "
                f"({_config_difference(state.config, config)}); stop it with "
                f"`lookahead-sdk engine stop --port {config.port}` or choose another port"
            )
        handle = _handle_from_state(state, reused=True)
        _wait_until_healthy(
            handle,
            is_alive=lambda: is_engine_process(state),
            timeout_s=timeout_s,
            show_progress=show_progress,
        )
        return handle


def stop_engine(port: int, *, timeout_s: float = 10.0) -> bool:
    """Stop our engine on ``port``: SIGTERM, then SIGKILL. True if one was stopped, False if none
    runs; raises `EngineStopError` saying why when it runs but cannot be stopped.

    Only our llama-server is signalled: the recorded pid while it still is that llama-server, or
    (the state file lost) the one the process table shows started by us for ``port``.
    """
    state = _live_state(port)
    if state is None:
        return False
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(state.pid, sig)
        except ProcessLookupError:
            pass
        except OSError as error:
            raise EngineStopError(
                f"cannot stop the engine on port {port} (llama-server pid {state.pid}): "
                f"{error.strerror or error}"
            ) from None
        if _wait_for_exit(state.pid, wait_s):
            break
    else:
        raise EngineStopError(
            f"the engine on port {port} (llama-server pid {state.pid}) did not exit after SIGKILL"
        )
    _reap(state.pid)
    remove_state(port)
    _remove_slot_copies(port)
    return True


def _remove_slot_copies(port: int) -> None:
    """The slot files of an engine that no longer runs: a save holds a slot's KV (about 100 MB
    for 8K tokens on the default model), useless to any other engine process, and each port
    keeps its own directory, so they would pile up on a machine that runs engines for days."""
    shutil.rmtree(paths.slot_save_dir(port), ignore_errors=True)


def engine_status(port: int) -> EngineStatus | None:
    """What we know about our engine on ``port``; None if none was recorded or found."""
    state = _recorded_state(port)
    if state is None:
        return None
    running = is_engine_process(state)
    handle = _handle_from_state(state, reused=True)
    return EngineStatus(
        port=port,
        pid=state.pid,
        url=handle.base_url,
        model=MODEL_NAME,
        model_path=state.model_path,
        quantization=state.config.quantization,
        slots=state.config.slots,
        ctx_per_slot=state.config.ctx_per_slot,
        running=running,
        healthy=running and is_healthy(handle.base_url),
        started_at=state.started_at,
        log_path=state.log_path,
    )


def is_healthy(base_url: str) -> bool:
    """Whether the engine at ``base_url`` answers ``/health``. Asked directly: the engine is
    local, and a proxy from $HTTP_PROXY / $ALL_PROXY would never reach it."""
    try:
        return httpx.get(f"{base_url}/health", timeout=2.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def port_in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails because something already listens there. A host
    this machine cannot listen on (unknown name, another machine's address) raises
    `EngineStartError` naming it."""
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise _bad_host(host, error.strerror) from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # Same option llama-server's listener uses, so TIME_WAIT leftovers do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise _bad_host(host, error.strerror or str(error)) from None
    return False


def _bad_host(host: str, reason: str) -> EngineStartError:
    return EngineStartError(
        f"cannot listen on host {host!r}: {reason}; pass an address of this machine with "
        "--host (EngineConfig(host=...)), e.g. 127.0.0.1"
    )


def _start_unlocked(config: EngineConfig, *, timeout_s: float, show_progress: bool) -> EngineHandle:
    if (state := _live_state(config.port)) is not None:
        raise EngineConflictError(
            f"an engine started by lookahead-sdk already runs on port {config.port} "
            f"(pid {state.pid}); use ensure_engine to reuse it, or stop it with "
            f"`lookahead-sdk engine stop --port {config.port}`"
        )
    if port_in_use(config.host, config.port):
        raise PortInUseError(
            f"port {config.port} on {config.host} is in use by another program (not an engine "
            f"started by lookahead-sdk); choose a free port with --port (EngineConfig(port=...))"
        )
    config = config.resolved()
    binaries = ensure_binaries(show_progress=show_progress)
    model = model_path(config.quantization, show_progress=show_progress)
    log_path = paths.engine_log_file(config.port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    _remove_slot_copies(config.port)  # of an engine that died without `stop`
    if config.slot_copies:
        paths.slot_save_dir(config.port).mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            server_command(config, binaries, model),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives `lookahead-sdk engine start`; no Ctrl-C forwarding
        )
    _children[process.pid] = process
    state = EngineState(
        pid=process.pid,
        port=config.port,
        config=config,
        binary=str(binaries.server),
        model_path=str(model),
        log_path=str(log_path),
        started_at=time.time(),
    )
    write_state(state)
    handle = _handle_from_state(state, reused=False)
    try:
        _wait_until_healthy(
            handle,
            is_alive=lambda: process.poll() is None,
            timeout_s=timeout_s,
            show_progress=show_progress,
        )
    except BaseException:
        stop_engine(config.port, timeout_s=3.0)
        raise
    return handle


def _wait_until_healthy(
    handle: EngineHandle,
    *,
    is_alive: Callable[[], bool],
    timeout_s: float,
    show_progress: bool,
) -> None:
    config = handle.config
    description = (
        f"llama-server on {config.host}:{config.port} "
        f"({MODEL_NAME} {config.quantization}, {config.slots} slots x {config.ctx_per_slot} tokens)"
    )
    console = Console(stderr=True, quiet=not show_progress)
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    with console.status(f"starting {description}") as status:
        while True:
            if not is_alive():
                raise EngineStartError(
                    f"llama-server exited during startup on port {config.port}. "
                    f"Last lines of {handle.log_path}:\n{_log_tail(handle.log_path)}"
                )
            if is_healthy(handle.base_url):
                return
            if time.monotonic() > deadline:
                raise EngineStartError(
                    f"llama-server on port {config.port} was not healthy after {timeout_s:.0f} s. "
                    f"Last lines of {handle.log_path}:\n{_log_tail(handle.log_path)}"
                )
            status.update(f"starting {description}: {time.monotonic() - started:.0f} s")
            time.sleep(0.25)


def _live_state(port: int) -> EngineState | None:
    """The state of our engine on ``port`` if it still runs; a stale record is removed."""
    state = _recorded_state(port)
    if state is None:
        return None
    if is_engine_process(state):
        return state
    remove_state(port)
    _reap(state.pid)
    return None


def _recorded_state(port: int) -> EngineState | None:
    """The state file's record for ``port``, checked against the process table: when the file is
    missing, unreadable or names a process that is not our engine while our llama-server for
    ``port`` runs, the file is rewritten from that process (an engine is never orphaned); an
    unreadable file with no engine of ours is removed. Either is reported."""
    try:
        state, problem = read_state(port), None
    except EngineStateFileError as error:
        state, problem = None, str(error)
    if state is not None and is_engine_process(state):
        return state
    found = find_engine_process(port)
    if found is None:
        if problem is not None:
            remove_state(port)
            log.warning("%s; no engine of ours runs on port %d: removed it", problem, port)
        return state
    if problem is None:
        problem = f"engine state file {paths.state_file(port)} " + (
            "is missing" if state is None else f"names pid {state.pid}, not our engine"
        )
    if state is not None:
        _reap(state.pid)
    pid, command = found
    try:
        config = config_from_command(command)
    except ValueError as error:
        raise EngineStateFileError(
            f"{problem}; our llama-server pid {pid} runs on port {port}, but its command line "
            f"cannot be read back ({error}); stop it with `kill {pid}`"
        ) from None
    recovered = EngineState(
        pid=pid,
        port=port,
        config=config,
        binary=command[0],
        model_path=option_value(command, "--model") or "",
        log_path=str(paths.engine_log_file(port)),
        started_at=process_start_time(pid) or time.time(),
    )
    write_state(recovered)
    log.warning(
        "%s; rewrote it from our llama-server running on port %d (pid %d)", problem, port, pid
    )
    return recovered


def _handle_from_state(state: EngineState, *, reused: bool) -> EngineHandle:
    return EngineHandle(
        pid=state.pid,
        config=state.config,
        model_path=Path(state.model_path),
        log_path=Path(state.log_path),
        started_at=state.started_at,
        reused=reused,
    )


def _wait_for_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _reap(pid) or process_command_line(pid) is None:
            return True
        time.sleep(0.05)
    return False


def _reap(pid: int) -> bool:
    """Collect our own child's exit status; True if it has exited."""
    child = _children.get(pid)
    if child is None or child.poll() is None:
        return False
    del _children[pid]
    return True


def _client_host(host: str) -> str:
    """The host to reach the engine at, as a URL writes it (an IPv6 address in brackets)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _config_difference(running: EngineConfig, wanted: EngineConfig) -> str:
    have, want = running.resolved().to_dict(), wanted.resolved().to_dict()
    return ", ".join(
        f"{key}: running {have[key]!r}, requested {want[key]!r}"
        for key in have
        if have[key] != want[key]
    )


def _log_tail(log_path: Path) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-_LOG_TAIL_LINES:])


@contextlib.contextmanager
def _port_lock(port: int) -> Iterator[None]:
    """Serialize start/ensure for one port across processes (e.g. parallel test sessions)."""
    lock_path = paths.state_file(port).with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)

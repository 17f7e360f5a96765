"""Build ``llama-server`` and ``llama-quantize`` from the llama.cpp vendored in the llama-cpp-python sdist.

The source gets lookahead-sdk's edits first (priority-aware batching, ``engine.patches``).

The binaries are built once per machine (``-march=native``) into
``<cache>/llama.cpp/<version>/bin-<build id>`` (``build_id``: edits + cmake flags). The build runs in a temporary directory next to it and the
finished binaries are moved into place with one rename, so an interrupted build never leaves a
half-written binary behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from lookahead_sdk.engine import paths
from lookahead_sdk.engine.build_id import CMAKE_FLAGS
from lookahead_sdk.engine.errors import BuildError, MissingToolError
from lookahead_sdk.engine.patches import apply_edits

SERVER_BINARY = "llama-server"
QUANTIZE_BINARY = "llama-quantize"


_MAKE_PROGRESS = re.compile(r"^\[\s*(\d{1,3})%\]")
_NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
_LOG_TAIL_LINES = 25


@dataclass(frozen=True)
class EngineBinaries:
    server: Path
    quantize: Path


@dataclass(frozen=True)
class BuildTools:
    cmake: str
    c_compiler: str
    cxx_compiler: str
    generator: str  # a cmake generator name: "Unix Makefiles" or "Ninja"


def installed_binaries() -> EngineBinaries | None:
    """The cached binaries, or None when either is missing."""
    binaries = EngineBinaries(
        server=paths.bin_dir() / SERVER_BINARY, quantize=paths.bin_dir() / QUANTIZE_BINARY
    )
    if all(os.access(path, os.X_OK) for path in (binaries.server, binaries.quantize)):
        return binaries
    return None


def ensure_binaries(
    *, force: bool = False, sdist: Path | None = None, show_progress: bool = True
) -> EngineBinaries:
    """Return the cached binaries, building them first if missing (or if ``force``).

    ``sdist`` is a local ``llama_cpp_python-<version>.tar.gz``; without it the sdist is fetched
    with ``pip download`` from the package index.
    """
    if not force and (binaries := installed_binaries()) is not None:
        return binaries
    with _build_lock():
        # Another process may have finished the build while we waited for the lock.
        if not force and (binaries := installed_binaries()) is not None:
            return binaries
        _build_and_install(find_build_tools(), sdist=sdist, show_progress=show_progress)
    binaries = installed_binaries()
    if binaries is None:  # pragma: no cover - guarded by _install_atomically
        raise BuildError(f"build finished but the binaries are missing in {paths.bin_dir()}")
    return binaries


def find_build_tools() -> BuildTools:
    """Locate cmake, C/C++ compilers and make or ninja; raise MissingToolError naming what is absent."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise MissingToolError(
            "cmake is required to build llama.cpp but was not found on PATH; install it "
            "(e.g. `apt-get install cmake` or `pip install cmake`)"
        )
    cxx = _first_available(os.environ.get("CXX"), "c++", "g++", "clang++")
    if cxx is None:
        raise MissingToolError(
            "a C++ compiler is required to build llama.cpp but none was found (tried $CXX, c++, "
            "g++, clang++); install one (e.g. `apt-get install g++`)"
        )
    cc = _first_available(os.environ.get("CC"), "cc", "gcc", "clang")
    if cc is None:
        raise MissingToolError(
            "a C compiler is required to build llama.cpp but none was found (tried $CC, cc, gcc, "
            "clang); install one (e.g. `apt-get install gcc`)"
        )
    if shutil.which("make"):
        generator = "Unix Makefiles"
    elif shutil.which("ninja"):
        generator = "Ninja"
    else:
        raise MissingToolError(
            "make or ninja is required to build llama.cpp but neither was found; install one "
            "(e.g. `apt-get install make` or `pip install ninja`)"
        )
    return BuildTools(cmake=cmake, c_compiler=cc, cxx_compiler=cxx, generator=generator)


def parse_build_progress(line: str) -> float | None:
    """Percent done from a make (``[ 42%] ...``) or ninja (``[12/345] ...``) output line."""
    if match := _MAKE_PROGRESS.match(line):
        return min(float(match.group(1)), 100.0)
    if match := _NINJA_PROGRESS.match(line):
        done, total = int(match.group(1)), int(match.group(2))
        return 100.0 * done / total if total else None
    return None


def configure_command(tools: BuildTools, source_dir: Path, build_dir: Path) -> list[str]:
    return [
        tools.cmake,
        "-S",
        str(source_dir),
        "-B",
        str(build_dir),
        "-G",
        tools.generator,
        f"-DCMAKE_C_COMPILER={tools.c_compiler}",
        f"-DCMAKE_CXX_COMPILER={tools.cxx_compiler}",
        *CMAKE_FLAGS,
    ]


def build_command(tools: BuildTools, build_dir: Path) -> list[str]:
    return [
        tools.cmake,
        "--build",
        str(build_dir),
        "--config",
        "Release",
        "--target",
        SERVER_BINARY,
        QUANTIZE_BINARY,
        "-j",
        str(os.cpu_count() or 1),
    ]


def _first_available(*candidates: str | None) -> str | None:
    for candidate in candidates:
        if candidate and (found := shutil.which(candidate)):
            return found
    return None


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    paths.version_dir().mkdir(parents=True, exist_ok=True)
    with open(paths.version_dir() / ".build.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _build_and_install(tools: BuildTools, *, sdist: Path | None, show_progress: bool) -> None:
    paths.build_logs_dir().mkdir(parents=True, exist_ok=True)
    log_path = paths.build_logs_dir() / f"build-{time.strftime('%Y%m%d-%H%M%S')}.log"
    workdir = Path(tempfile.mkdtemp(prefix=".build-", dir=paths.version_dir()))
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not show_progress,
        transient=False,
    )
    try:
        with progress, open(log_path, "w") as log:
            task = progress.add_task("llama.cpp: fetching the sdist", total=100)
            sdist_path = sdist if sdist is not None else _download_sdist(workdir, log, log_path)
            progress.update(task, description="llama.cpp: extracting the source")
            source_dir = _extract_llama_cpp(Path(sdist_path), workdir / "src")
            apply_edits(source_dir)
            build_dir = workdir / "build"
            progress.update(task, description="llama.cpp: configuring (cmake)")
            configure = configure_command(tools, source_dir, build_dir)
            _run_logged(configure, log, log_path, "cmake configure")
            progress.update(task, description="llama.cpp: compiling llama-server, llama-quantize")
            compile_command = build_command(tools, build_dir)

            highest = 0.0

            def on_line(line: str) -> None:
                # make prints per-target percentages that interleave; keep the bar monotonic.
                nonlocal highest
                if (percent := parse_build_progress(line)) is not None and percent > highest:
                    highest = percent
                    progress.update(task, completed=percent)

            _run_logged(compile_command, log, log_path, "cmake build", on_line=on_line)
            _install_atomically(build_dir / "bin")
            progress.update(task, completed=100, description="llama.cpp: built")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _download_sdist(workdir: Path, log: TextIO, log_path: Path) -> Path:
    download_dir = workdir / "sdist"
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        f"llama-cpp-python=={paths.LLAMA_CPP_PYTHON_VERSION}",
        "-d",
        str(download_dir),
    ]
    _run_logged(command, log, log_path, "pip download of the llama-cpp-python sdist")
    archives = sorted(download_dir.glob("*.tar.gz"))
    if not archives:
        raise BuildError(f"pip download produced no .tar.gz sdist; see the build log {log_path}")
    return archives[0]


def _extract_llama_cpp(sdist: Path, destination: Path) -> Path:
    """Extract only ``<top>/vendor/llama.cpp`` from the sdist; return that directory."""
    if not sdist.is_file():
        raise BuildError(f"sdist not found: {sdist}")
    with tarfile.open(sdist) as archive:
        members = archive.getmembers()
        top = members[0].name.split("/", 1)[0]
        prefix = f"{top}/vendor/llama.cpp/"
        wanted = [member for member in members if member.name.startswith(prefix)]
        if not wanted:
            raise BuildError(f"{sdist} does not contain {prefix}")
        archive.extractall(destination, members=wanted, filter="data")
    return destination / top / "vendor" / "llama.cpp"


def _run_logged(
    command: Sequence[str],
    log: TextIO,
    log_path: Path,
    what: str,
    on_line: Callable[[str], None] | None = None,
) -> None:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    tail: deque[str] = deque(maxlen=_LOG_TAIL_LINES)
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            tail.append(line.rstrip())
            if on_line is not None:
                on_line(line)
        returncode = process.wait()
    log.flush()
    if returncode != 0:
        last_lines = "\n".join(tail)
        raise BuildError(
            f"{what} failed with exit code {returncode}. Last lines:\n{last_lines}\n"
            f"Full build log: {log_path}"
        )


def _install_atomically(built_bin_dir: Path) -> None:
    """Copy both binaries into a staging dir, then rename it to ``bin`` in one step."""
    staging = Path(tempfile.mkdtemp(prefix=".bin-staging-", dir=paths.version_dir()))
    staging.chmod(0o755)  # mkdtemp makes it 0700
    try:
        for name in (SERVER_BINARY, QUANTIZE_BINARY):
            built = built_bin_dir / name
            if not built.is_file():
                raise BuildError(f"the build did not produce {built}")
            shutil.copy2(built, staging / name)
        target = paths.bin_dir()
        if target.exists():
            retired = target.with_name(f".bin-retired-{os.getpid()}")
            os.replace(target, retired)
            shutil.rmtree(retired, ignore_errors=True)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

"""The build driver's pure parts and failure paths (a full build is covered by test_build_e2e)."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_sdk.engine import build, patches, paths
from lookahead_sdk.engine.errors import BuildError, MissingToolError
from lookahead_sdk.engine.patches import SourceEdit


def test_make_progress_lines_parse_to_percent() -> None:
    assert build.parse_build_progress("[ 42%] Building CXX object src/llama.cpp.o") == 42.0
    assert build.parse_build_progress("[100%] Linking CXX executable ../bin/llama-server") == 100.0


def test_other_lines_have_no_progress() -> None:
    assert build.parse_build_progress("-- Configuring done") is None
    assert build.parse_build_progress("warning: [42%] not at line start") is None


@given(st.integers(1, 5000).flatmap(lambda total: st.tuples(st.integers(0, total), st.just(total))))
def test_ninja_progress_is_the_done_fraction(done_total: tuple[int, int]) -> None:
    done, total = done_total
    percent = build.parse_build_progress(f"[{done}/{total}] Building CXX object x.o")
    assert percent is not None
    assert 0.0 <= percent <= 100.0
    assert percent == pytest.approx(100.0 * done / total)


def _stub_tools(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        tool = directory / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize(
    ("present", "missing_message"),
    [
        ((), "cmake"),
        (("cmake",), "C\\+\\+ compiler"),
        (("cmake", "c++"), "C compiler"),
        (("cmake", "c++", "cc"), "make or ninja"),
    ],
)
def test_missing_build_tool_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, present: tuple[str, ...], missing_message: str
) -> None:
    _stub_tools(tmp_path / "bin", *present)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(MissingToolError, match=missing_message):
        build.find_build_tools()


def test_ninja_is_used_when_make_is_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stub_tools(tmp_path / "bin", "cmake", "c++", "cc", "ninja")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    assert build.find_build_tools().generator == "Ninja"


def _fake_sdist(
    path: Path, cmakelists: str | None, edits: tuple[SourceEdit, ...] = patches.EDITS
) -> Path:
    """A tarball shaped like the llama-cpp-python sdist, with an optional vendored CMakeLists.

    With a CMakeLists, the vendored tree holds the snippets that ``edits`` replace.
    """
    with tarfile.open(path, "w:gz") as archive:
        files = {"llama_cpp_python-0.0.0/pyproject.toml": "[project]\n"}
        if cmakelists is not None:
            files["llama_cpp_python-0.0.0/vendor/llama.cpp/CMakeLists.txt"] = cmakelists
            for edit in edits:
                name = f"llama_cpp_python-0.0.0/vendor/llama.cpp/{edit.path}"
                files[name] = files.get(name, "// vendored\n") + edit.old
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_sdist_without_llama_cpp_fails_clearly(isolated_cache: Path, tmp_path: Path) -> None:
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz", cmakelists=None)
    with pytest.raises(BuildError, match=r"vendor/llama\.cpp"):
        build.ensure_binaries(sdist=sdist, show_progress=False)
    assert build.installed_binaries() is None


def test_failing_build_points_at_its_log_and_installs_nothing(
    isolated_cache: Path, tmp_path: Path
) -> None:
    cmakelists = 'cmake_minimum_required(VERSION 3.14)\nproject(x)\nmessage(FATAL_ERROR "boom")\n'
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz", cmakelists=cmakelists)
    with pytest.raises(BuildError, match=r"(?s)cmake configure failed.*Full build log: ") as error:
        build.ensure_binaries(sdist=sdist, show_progress=False)
    log_path = Path(str(error.value).rsplit("Full build log: ", 1)[1].strip())
    assert log_path.is_relative_to(isolated_cache)
    assert "boom" in log_path.read_text()
    assert not paths.bin_dir().exists()
    # The temporary build tree is removed; only logs and the lock remain.
    leftovers = {entry.name for entry in paths.version_dir().iterdir()}
    assert leftovers <= {"logs", ".build.lock"}


def test_a_source_that_does_not_match_the_edits_fails_naming_the_edit(
    isolated_cache: Path, tmp_path: Path
) -> None:
    cmakelists = "cmake_minimum_required(VERSION 3.14)\nproject(x)\n"
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz", cmakelists=cmakelists, edits=patches.EDITS[:-1])
    with pytest.raises(BuildError, match=rf"{patches.EDITS[-1].name!r}.*found it 0 times"):
        build.ensure_binaries(sdist=sdist, show_progress=False)
    assert build.installed_binaries() is None


def test_install_replaces_an_incomplete_bin_dir_in_one_step(isolated_cache: Path) -> None:
    built = isolated_cache / "built"
    _stub_tools(built, build.SERVER_BINARY, build.QUANTIZE_BINARY)
    paths.bin_dir().mkdir(parents=True)
    (paths.bin_dir() / build.SERVER_BINARY).write_text("half")  # a leftover, not executable
    assert build.installed_binaries() is None
    build._install_atomically(built)
    installed = build.installed_binaries()
    assert installed is not None
    assert installed.server.read_text() == (built / build.SERVER_BINARY).read_text()
    assert os.access(installed.quantize, os.X_OK)


def test_install_of_an_incomplete_build_changes_nothing(isolated_cache: Path) -> None:
    built = isolated_cache / "built"
    _stub_tools(built, build.SERVER_BINARY)
    paths.version_dir().mkdir(parents=True)
    with pytest.raises(BuildError, match=build.QUANTIZE_BINARY):
        build._install_atomically(built)
    assert not paths.bin_dir().exists()

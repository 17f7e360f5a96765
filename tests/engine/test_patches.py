"""The llama.cpp source edits: applied all or none, and keyed into the binaries' cache path."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lookahead_sdk.engine import patches, paths
from lookahead_sdk.engine.errors import BuildError
from lookahead_sdk.engine.patches import SourceEdit, apply_edits, patch_id

FIRST = SourceEdit(name="first", path="a.cpp", old="int a = 1;\n", new="int a = 2;\n")
SECOND = SourceEdit(name="second", path="b.cpp", old="int b = 1;\n", new="int b = 2;\n")


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_every_edit_is_applied(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {"a.cpp": "// a\nint a = 1;\n", "b.cpp": "int b = 1;\n"})
    apply_edits(tree, (FIRST, SECOND))
    assert (tree / "a.cpp").read_text() == "// a\nint a = 2;\n"
    assert (tree / "b.cpp").read_text() == "int b = 2;\n"


def test_a_missing_snippet_names_the_edit_and_writes_no_file(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {"a.cpp": "int a = 1;\n", "b.cpp": "int b = 3;\n"})
    with pytest.raises(BuildError, match=r"'second'.*b\.cpp, found it 0 times.*patches\.py"):
        apply_edits(tree, (FIRST, SECOND))
    assert (tree / "a.cpp").read_text() == "int a = 1;\n"


def test_a_snippet_found_twice_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {"a.cpp": "int a = 1;\nint a = 1;\n"})
    with pytest.raises(BuildError, match="found it 2 times"):
        apply_edits(tree, (FIRST,))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"'first': a\.cpp is missing"):
        apply_edits(tmp_path, (FIRST,))


def test_two_edits_of_one_file_build_on_each_other(tmp_path: Path) -> None:
    then = SourceEdit(name="then", path="a.cpp", old="int a = 2;\n", new="int a = 3;\n")
    tree = _tree(tmp_path, {"a.cpp": "int a = 1;\n"})
    apply_edits(tree, (FIRST, then))
    assert (tree / "a.cpp").read_text() == "int a = 3;\n"


def test_changing_an_edit_or_a_build_flag_changes_where_the_binaries_are_cached() -> None:
    from lookahead_sdk.engine.build_id import BUILD_ID, CMAKE_FLAGS, build_id

    changed = replace(patches.EDITS[-1], new=patches.EDITS[-1].new + "// more\n")
    changed_patch = patch_id((*patches.EDITS[:-1], changed))
    assert changed_patch != patches.PATCH_ID
    assert build_id(changed_patch, CMAKE_FLAGS) != BUILD_ID
    assert build_id(patches.PATCH_ID, CMAKE_FLAGS[:-1]) != BUILD_ID
    assert paths.bin_dir().name == f"bin-{BUILD_ID}"

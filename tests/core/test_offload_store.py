from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk import OffloadStore


@settings(max_examples=80, deadline=None)
@given(text=st.text(min_size=0, max_size=5000))
def test_round_trip_is_byte_exact(tmp_path_factory, text: str) -> None:
    store = OffloadStore(tmp_path_factory.mktemp("store"))
    ref = store.put(text)
    assert store.get(ref.key) == text
    assert ref.path.read_bytes() == text.encode()
    assert store.put(text).key == ref.key  # content addressed: same text, same key


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    store = OffloadStore(tmp_path)
    texts = [f"output {i}\n" * (50 + i) for i in range(40)]
    keys: dict[int, str] = {}

    def writer(worker: int) -> None:
        for i, text in enumerate(texts):
            key = store.put(text).key  # every worker writes every text: same-key races included
            if worker == 0:
                keys[i] = key

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(store.get(keys[i]) == text for i, text in enumerate(texts))
    assert len(store.keys()) == len(texts)
    assert not list(tmp_path.glob("??/.tmp-*"))


def test_crash_mid_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = OffloadStore(tmp_path)
    real_fsync = os.fsync

    def crash(fd: int) -> None:
        raise OSError("simulated power loss before the data reached the disk")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="power loss"):
        store.put("important tool output " * 100)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert store.keys() == []
    assert not list(tmp_path.rglob("*.txt"))
    ref = store.put("important tool output " * 100)  # a retry succeeds and is complete
    assert store.get(ref.key) == "important tool output " * 100


def test_leftover_temp_files_from_a_killed_process_are_never_keys(tmp_path: Path) -> None:
    store = OffloadStore(tmp_path)
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / ".tmp-killed").write_bytes(b"half a write")
    assert store.keys() == []
    assert store.remove_temp_files() == 1


@pytest.mark.parametrize(
    "key",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "ab/../../x",
        "A" * 64,
        "0" * 63,
        "..",
        "",
        "0" * 64 + "/../x",
    ],
)
def test_path_traversal_attempts_are_rejected_with_a_clear_error(tmp_path: Path, key: str) -> None:
    store = OffloadStore(tmp_path)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        store.get(key)


def test_unknown_key_is_a_key_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match=r"0{64}"):
        OffloadStore(tmp_path).get("0" * 64)


def test_read_windows(tmp_path: Path) -> None:
    store = OffloadStore(tmp_path)
    key = store.put("abcdefghij").key
    assert store.read(key, offset=2, max_chars=3) == "cde"
    with pytest.raises(ValueError, match="offset"):
        store.read(key, offset=-1)

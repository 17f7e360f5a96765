from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk import OffloadStore
from lookahead_sdk.core.offload_store import TEMP_GRACE_S, CorruptOffloadError


@settings(max_examples=80, deadline=None)
# Lone surrogates included: text from os.listdir or bytes decoded with "surrogateescape".
@given(text=st.text(st.characters(exclude_categories=()), min_size=0, max_size=5000))
def test_round_trip_is_byte_exact(tmp_path_factory, text: str) -> None:
    store = OffloadStore(tmp_path_factory.mktemp("store"))
    ref = store.put(text)
    assert store.get(ref.key) == text
    assert ref.path.read_bytes() == text.encode("utf-8", "surrogatepass")
    assert store.put(text).key == ref.key  # content addressed: same text, same key


def test_an_output_with_a_lone_surrogate_is_stored_and_read_back(tmp_path: Path) -> None:
    text = "listing: " + b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    store = OffloadStore(tmp_path)
    ref = store.put(text)  # before: UnicodeEncodeError, and the transform failed
    assert store.get(ref.key) == text and store.read(ref.key, offset=9) == text[9:]
    assert store.put("plain").key == OffloadStore(tmp_path / "b").put("plain").key


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
    assert not list(tmp_path.glob("??/.tmp-*"))  # the failed write removed its temp file
    ref = store.put("important tool output " * 100)  # a retry succeeds and is complete
    assert store.get(ref.key) == "important tool output " * 100


# Writes its temp file, then hangs before the rename, until it is killed.
KILLED_WRITER = """
import os, sys, time
from lookahead_sdk.core.offload_store import OffloadStore
os.fsync = lambda fd: time.sleep(120)
OffloadStore(sys.argv[1]).put("tool output " * 100_000)
"""


def test_the_temp_file_of_a_killed_writer_is_removed_when_the_store_opens(tmp_path: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)])
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("??/.tmp-*")):
        assert writer.poll() is None and time.monotonic() < deadline, "the writer never wrote"
        time.sleep(0.02)
    writer.kill()
    writer.wait()
    [leftover] = tmp_path.glob("??/.tmp-*")
    OffloadStore(tmp_path)  # a fresh temp file may be another process's write in progress
    assert leftover.exists()
    past_grace = time.time() - TEMP_GRACE_S - 1
    os.utime(leftover, (past_grace, past_grace))
    store = OffloadStore(tmp_path)
    assert not leftover.exists() and store.keys() == []
    OffloadStore(tmp_path, temp_grace_s=0)  # nothing left to remove; opening still works


def test_the_store_removes_its_temp_file_when_the_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = OffloadStore(tmp_path)

    def refuse(source: str, target: object) -> None:
        raise PermissionError("read-only target")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        store.put("an output")
    assert not list(tmp_path.glob("??/.tmp-*"))


def corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:  # one byte changed, same length
        path.write_bytes(data[:3] + bytes([data[3] ^ 1]) + data[4:])


CORRUPTIONS = ["truncated", "empty", "flipped"]
TEXT = "größere Ausgabe \U0001f600 " * 200  # multi-byte characters: a cut can split one


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_get_of_a_corrupt_file_raises_naming_the_key_and_file(tmp_path: Path, how: str) -> None:
    store = OffloadStore(tmp_path)
    ref = store.put(TEXT)
    corrupt(ref.path, how)
    with pytest.raises(CorruptOffloadError, match=ref.key) as error:
        store.get(ref.key)
    assert str(ref.path) in str(error.value) and "put" in str(error.value)
    with pytest.raises(CorruptOffloadError):
        store.read(ref.key, max_chars=10)


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_put_of_the_same_content_repairs_a_corrupt_file(tmp_path: Path, how: str) -> None:
    store = OffloadStore(tmp_path)
    ref = store.put(TEXT)
    corrupt(ref.path, how)
    assert store.put(TEXT) == ref
    assert store.get(ref.key) == TEXT
    assert ref.path.read_bytes() == TEXT.encode()


def test_concurrent_writers_repair_a_corrupt_file_once_and_for_all(tmp_path: Path) -> None:
    store = OffloadStore(tmp_path)
    ref = store.put(TEXT)
    corrupt(ref.path, "truncated")
    threads = [threading.Thread(target=store.put, args=(TEXT,)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.get(ref.key) == TEXT
    assert not list(tmp_path.glob("??/.tmp-*"))


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

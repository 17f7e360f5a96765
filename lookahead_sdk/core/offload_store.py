"""Content-addressed store for offloaded tool outputs: nothing offloaded is ever lost.

Each text is stored once under `root/<k[:2]>/<k>.txt` where k = sha256(text). Writes go to a
temporary file in the same directory, are fsynced, then atomically renamed: a crash mid-write
leaves no partial file under a real key, and the temporary file of a write killed on the way is
removed when a store is next opened on the root (once older than `temp_grace_s`, so a write
still running in another process keeps its own). A file is checked against its key when read
(`get` raises `CorruptOffloadError`) and before `put` skips rewriting it, so putting the same
text again repairs a damaged file. Keys are validated and paths confined to the root, so a
crafted key cannot read outside it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lookahead_sdk.base.checks import require_int
from lookahead_sdk.errors import ConfigurationError, StateError

KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")
TEMP_PREFIX = ".tmp-"
# A temporary file untouched this long belongs to a write that will never finish.
TEMP_GRACE_S = 600.0


class CorruptOffloadError(StateError):
    """A stored output no longer matches its key (truncated or altered on disk)."""


@dataclass(frozen=True)
class OffloadRef:
    key: str
    chars: int
    path: Path


# UTF-8 as usual; lone surrogates (a file name read with os.listdir, bytes decoded with
# "surrogateescape") are stored as they are and read back the same, not refused.
ENCODING, SURROGATES = "utf-8", "surrogatepass"


class OffloadStore:
    def __init__(self, root: str | os.PathLike[str], *, temp_grace_s: float = TEMP_GRACE_S) -> None:
        if isinstance(temp_grace_s, bool) or not isinstance(temp_grace_s, int | float):
            raise ConfigurationError(f"temp_grace_s must be seconds, got {temp_grace_s!r}")
        if temp_grace_s < 0:
            raise ConfigurationError(f"temp_grace_s must be >= 0, got {temp_grace_s}")
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.remove_temp_files(older_than_s=temp_grace_s)

    def put(self, text: str) -> OffloadRef:
        if not isinstance(text, str):
            raise TypeError(f"offloaded content must be a str, got {type(text).__name__}")
        data = text.encode(ENCODING, SURROGATES)
        key = _key_of(data)
        path = self._path(key)
        if not self._holds(path, key):  # missing, or damaged: (re)write it
            path.parent.mkdir(parents=True, exist_ok=True)
            self._write_atomic(path, data)
        return OffloadRef(key=key, chars=len(text), path=path)

    def get(self, key: str) -> str:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise KeyError(f"no offloaded output with key {key!r} in {self.root}") from None
        if _key_of(data) != key:
            raise CorruptOffloadError(
                f"the offloaded output {key} is corrupt: {path} ({len(data)} bytes) no longer "
                "matches its key (truncated or altered on disk); put the same text again to "
                "repair it"
            )
        return data.decode(ENCODING, SURROGATES)

    def read(self, key: str, *, offset: int = 0, max_chars: int | None = None) -> str:
        """A window of an offloaded output, for read-back tools with bounded replies."""
        require_int("offset", offset, meaning="a character position")
        require_int("max_chars", max_chars, low=1, optional=True)
        text = self.get(key)
        end = None if max_chars is None else offset + max_chars
        return text[offset:end]

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, str) and KEY_PATTERN.match(key) is not None and self._path(key).exists()
        )

    def keys(self) -> list[str]:
        return sorted(path.stem for path in self.root.glob("??/*.txt"))

    def remove_temp_files(self, *, older_than_s: float = 0.0) -> int:
        """Delete leftovers of writes interrupted by a crash (they were never visible as keys)
        last modified at least `older_than_s` ago; 0 removes all, including the temporary file
        of a write running right now, so use it only when no other process writes here."""
        cutoff = time.time() - older_than_s
        removed = 0
        for path in self.root.glob(f"??/{TEMP_PREFIX}*"):
            try:
                if path.stat().st_mtime <= cutoff:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:  # its write finished (renamed) or another store removed it
                continue
        return removed

    def _path(self, key: str) -> Path:
        if not isinstance(key, str) or not KEY_PATTERN.match(key):
            raise ValueError(
                f"offload key must be 64 lowercase hex characters (a sha256), got {key!r}; "
                "use the key printed in the placeholder"
            )
        path = (self.root / key[:2] / f"{key}.txt").resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"offload key {key!r} resolves outside the store {self.root}")
        return path

    @staticmethod
    def _holds(path: Path, key: str) -> bool:
        """Whether `path` exists with the content `key` names (a rename replaces a file whole,
        so a concurrent writer's file reads as all old or all new)."""
        try:
            return _key_of(path.read_bytes()) == key
        except FileNotFoundError:
            return False

    @staticmethod
    def _write_atomic(path: Path, data: bytes) -> None:
        fd, temp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp_name, path)
        except BaseException:
            Path(temp_name).unlink(missing_ok=True)
            raise


def _key_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

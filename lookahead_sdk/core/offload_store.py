"""Content-addressed store for offloaded tool outputs: nothing offloaded is ever lost.

Each text is stored once under `root/<k[:2]>/<k>.txt` where k = sha256(text). Writes go to a
temporary file in the same directory, are fsynced, then atomically renamed: a crash mid-write
leaves no partial file under a real key. Keys are validated and paths confined to the root,
so a crafted key cannot read outside it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")
TEMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class OffloadRef:
    key: str
    chars: int
    path: Path


class OffloadStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, text: str) -> OffloadRef:
        if not isinstance(text, str):
            raise TypeError(f"offloaded content must be a str, got {type(text).__name__}")
        data = text.encode()
        key = hashlib.sha256(data).hexdigest()
        path = self._path(key)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            self._write_atomic(path, data)
        return OffloadRef(key=key, chars=len(text), path=path)

    def get(self, key: str) -> str:
        path = self._path(key)
        try:
            return path.read_bytes().decode()
        except FileNotFoundError:
            raise KeyError(f"no offloaded output with key {key!r} in {self.root}") from None

    def read(self, key: str, *, offset: int = 0, max_chars: int | None = None) -> str:
        """A window of an offloaded output, for read-back tools with bounded replies."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if max_chars is not None and max_chars <= 0:
            raise ValueError(f"max_chars must be positive or None, got {max_chars}")
        text = self.get(key)
        end = None if max_chars is None else offset + max_chars
        return text[offset:end]

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, str) and KEY_PATTERN.match(key) is not None and self._path(key).exists()
        )

    def keys(self) -> list[str]:
        return sorted(path.stem for path in self.root.glob("??/*.txt"))

    def remove_temp_files(self) -> int:
        """Delete leftovers of writes interrupted by a crash; they were never visible as keys."""
        removed = 0
        for path in self.root.glob(f"??/{TEMP_PREFIX}*"):
            path.unlink(missing_ok=True)
            removed += 1
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

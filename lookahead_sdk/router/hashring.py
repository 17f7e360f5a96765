"""A consistent-hash ring: a key keeps its backend while backends come and go (only keys of a
removed backend move), with virtual nodes for an even spread. Stable across processes (blake2b,
not Python's salted `hash`)."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Container

from lookahead_sdk.base.checks import require_int


def _point(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class ConsistentHashRing:
    def __init__(self, virtual_nodes: int = 64) -> None:
        self._virtual_nodes = require_int("virtual_nodes", virtual_nodes, low=1)
        self._points: list[int] = []
        self._owners: list[str] = []

    def add(self, name: str) -> None:
        for index in range(self._virtual_nodes):
            point = _point(f"{name}#{index}")
            position = bisect.bisect_left(self._points, point)
            self._points.insert(position, point)
            self._owners.insert(position, name)

    def lookup(self, key: str, allowed: Container[str]) -> str | None:
        """The first backend in `allowed` clockwise from the key's point; None if none is."""
        if not self._points:
            return None
        start = bisect.bisect_right(self._points, _point(key))
        count = len(self._points)
        for offset in range(count):
            owner = self._owners[(start + offset) % count]
            if owner in allowed:
                return owner
        return None

"""KV pool with a block-hash prefix cache and LRU eviction (the simulator's radix cache).

A prompt is cut into blocks of `block_tokens`; block i is named by a hash of (block i-1's name,
block i's token ids), so a name identifies a whole prefix. Cached blocks live in the KV pool; a
running request locks the blocks it uses. Eviction removes least-recently-used unlocked leaf
blocks (a block whose descendants are gone), like SGLang's radix-cache eviction.

Capacity: `used = cached block tokens + tokens reserved by running requests` <= `capacity`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

BlockName = int


def block_names(token_ids: Sequence[int], block_tokens: int) -> list[BlockName]:
    names: list[BlockName] = []
    previous = 0
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        previous = hash((previous, tuple(token_ids[start : start + block_tokens])))
        names.append(previous)
    return names


@dataclass(slots=True)
class _Block:
    parent: BlockName | None
    last_used: int
    children: int = 0
    locks: int = 0

    @property
    def evictable(self) -> bool:
        return self.locks == 0 and self.children == 0


class KvPool:
    def __init__(self, capacity_tokens: int, block_tokens: int = 16) -> None:
        if isinstance(capacity_tokens, bool) or not isinstance(capacity_tokens, int):
            raise TypeError("capacity_tokens must be an int")
        if capacity_tokens <= 0:
            raise ValueError(f"capacity_tokens must be > 0, got {capacity_tokens}")
        if block_tokens <= 0:
            raise ValueError(f"block_tokens must be > 0, got {block_tokens}")
        self.capacity_tokens = capacity_tokens
        self.block_tokens = block_tokens
        self.reserved_tokens = 0
        self.evicted_tokens = 0
        self._blocks: dict[BlockName, _Block] = {}
        self._locked_blocks = 0  # blocks with locks > 0 (a locked block's ancestors are locked)
        self._clock = itertools.count()
        # Eviction candidates as (last_used, name), checked when popped (entries go stale when a
        # block is used again, locked, gains a child or is evicted).
        self._candidates: list[tuple[int, BlockName]] = []

    @property
    def cached_tokens(self) -> int:
        return len(self._blocks) * self.block_tokens

    @property
    def free_tokens(self) -> int:
        return self.capacity_tokens - self.cached_tokens - self.reserved_tokens

    @property
    def evictable_tokens(self) -> int:
        """Cached tokens that eviction can free: the unlocked blocks. Requests lock whole chains
        from the root, so no unlocked block has a locked descendant."""
        return (len(self._blocks) - self._locked_blocks) * self.block_tokens

    def match(self, names: Sequence[BlockName]) -> int:
        """How many leading blocks of `names` are cached."""
        count = 0
        for name in names:
            if name not in self._blocks:
                break
            count += 1
        return count

    def touch(self, names: Sequence[BlockName]) -> None:
        """Mark a chain used now, leaf first, so that a prefix is always fresher than its
        extensions and leaves age out first."""
        for name in reversed(names):
            block = self._blocks.get(name)
            if block is not None:
                block.last_used = next(self._clock)
                self._offer_for_eviction(name, block)

    def insert(self, names: Sequence[BlockName]) -> int:
        """Cache the chain `names` (a prefix of one prompt); returns tokens newly cached. The
        caller must have the room: it converts reserved tokens into cached blocks."""
        added = 0
        parent: BlockName | None = None
        for name in names:
            if name not in self._blocks:
                self._blocks[name] = _Block(parent, next(self._clock))
                if parent is not None:
                    self._blocks[parent].children += 1
                added += 1
            parent = name
        self.touch(names)
        return added * self.block_tokens

    def lock(self, names: Sequence[BlockName]) -> None:
        for name in names:
            block = self._blocks[name]
            if block.locks == 0:
                self._locked_blocks += 1
            block.locks += 1

    def unlock(self, names: Sequence[BlockName]) -> None:
        for name in names:
            block = self._blocks[name]
            if block.locks <= 0:
                raise RuntimeError("KvPool.unlock: block was not locked (double release)")
            block.locks -= 1
            if block.locks == 0:
                self._locked_blocks -= 1
            self._offer_for_eviction(name, block)

    def reserve(self, tokens: int) -> bool:
        """Reserve `tokens` for a running request, evicting cached blocks if needed. When even
        evicting every unlocked block would not make the room, nothing is evicted."""
        if tokens > self.free_tokens + self.evictable_tokens:
            return False
        if tokens > self.free_tokens:
            self._evict(tokens - self.free_tokens)
        if tokens > self.free_tokens:
            return False
        self.reserved_tokens += tokens
        return True

    def release(self, tokens: int) -> None:
        if tokens < 0 or tokens > self.reserved_tokens:
            raise RuntimeError(
                f"KvPool.release({tokens}) exceeds the {self.reserved_tokens} reserved"
            )
        self.reserved_tokens -= tokens

    def _offer_for_eviction(self, name: BlockName, block: _Block) -> None:
        if block.evictable:
            heapq.heappush(self._candidates, (block.last_used, name))

    def _evict(self, tokens_needed: int) -> None:
        freed = 0
        while freed < tokens_needed and self._candidates:
            last_used, name = heapq.heappop(self._candidates)
            block = self._blocks.get(name)
            if block is None or not block.evictable or block.last_used != last_used:
                continue  # stale entry
            del self._blocks[name]
            if block.parent is not None:
                parent = self._blocks[block.parent]
                parent.children -= 1
                self._offer_for_eviction(block.parent, parent)
            freed += self.block_tokens
            self.evicted_tokens += self.block_tokens

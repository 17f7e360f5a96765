"""KV placement on llama.cpp: a slot for a program's live context, one for its lookahead branch.

llama-server sends a request to the idle slot whose cached prompt shares the largest prefix
fraction with it. A warm-up of a transformed prefix shares little with the live context, so it can
land in the program's own slot and evict the context the next turn needs. With `wire="llamacpp"`
the tagging transport pins requests (`id_slot`): the program's foreground requests to its
`current` slot, its lookahead warm-ups to its `branch` slot (background summaries, whose prompt
is the live context plus an instruction, to `current`, where that context is cached); a
committed lookahead swaps the two, since the warmed branch now holds the live context. A spawned
sub-agent (Isolate) is handed the branch slot its context was warmed in, and the program gets a
free slot as its new branch. Programs beyond the slot pairs the server has are left to the
server's choice.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from lookahead_sdk.base.tags import RequestTags


@dataclass
class SlotPair:
    current: int
    branch: int


class SlotPairs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total: dict[str, int] = {}
        self._pairs: dict[tuple[str, str], SlotPair] = {}

    def configure(self, origin: str, total_slots: int) -> None:
        if total_slots < 1:
            raise ValueError(f"total_slots must be >= 1, got {total_slots}")
        with self._lock:
            self._total[origin] = total_slots

    def is_configured(self, origin: str) -> bool:
        with self._lock:
            return origin in self._total

    def enroll(self, origin: str, program_id: str) -> SlotPair | None:
        """Give a program its pair of slots, if the server has a free pair."""
        with self._lock:
            key = (origin, program_id)
            if key in self._pairs or origin not in self._total:
                return self._pairs.get(key)
            free = self._free_slots(origin)
            if len(free) < 2:
                return None
            pair = SlotPair(current=free[0], branch=free[1])
            self._pairs[key] = pair
            return pair

    def pair(self, origin: str, program_id: str) -> SlotPair | None:
        with self._lock:
            pair = self._pairs.get((origin, program_id))
            return None if pair is None else SlotPair(pair.current, pair.branch)

    def slot_for(self, origin: str, tags: RequestTags) -> int | None:
        with self._lock:
            pair = self._pairs.get((origin, tags.program_id))
        if pair is None:
            return None
        return pair.branch if tags.is_lookahead and not tags.extends_live_context else pair.current

    def hand_over(self, origin: str, program_id: str, child_id: str) -> bool:
        """The sub-agent `child_id` takes `program_id`'s branch slot (where its context was
        warmed) as its own; `program_id` gets a free slot as its new branch. False (nothing
        changes) when the program has no pair or the server no free slot."""
        with self._lock:
            pair = self._pairs.get((origin, program_id))
            if pair is None or (origin, child_id) in self._pairs:
                return False
            free = self._free_slots(origin)
            if not free:
                return False
            self._pairs[(origin, child_id)] = SlotPair(current=pair.branch, branch=pair.branch)
            pair.branch = free[0]
            return True

    def _free_slots(self, origin: str) -> list[int]:
        """Slots of `origin` no program holds (call with the lock held)."""
        used = {
            slot
            for (o, _), pair in self._pairs.items()
            if o == origin
            for slot in (pair.current, pair.branch)
        }
        return [slot for slot in range(self._total[origin]) if slot not in used]

    def swap(self, origin: str, program_id: str) -> None:
        with self._lock:
            pair = self._pairs.get((origin, program_id))
            if pair is not None:
                pair.current, pair.branch = pair.branch, pair.current

    def release(self, origin: str, program_id: str) -> None:
        with self._lock:
            self._pairs.pop((origin, program_id), None)


SLOT_PAIRS = SlotPairs()

"""KV placement on llama.cpp: a slot for a program's live context, one for its lookahead branch.

llama-server sends a request to the idle slot whose cached prompt shares the largest prefix
fraction with it. A warm-up of a transformed prefix shares little with the live context, so it can
land in the program's own slot and evict the context the next turn needs. With `wire="llamacpp"`
the session's tagging transports pin requests (`id_slot`): the program's foreground requests to
its `current` slot, its lookahead warm-ups to its `branch` slot. A background summary, whose
prompt is the live context plus an instruction (`extends_live_context`), goes to the branch
when the branch holds a copy of the live context (`branch_mirrors_live`, set by the warmer's
copy), else to `current`, where that context is cached; there it replaces the slot's cache (a
slot keeps only its last prompt), so the agent's next turn computes again what followed the
summary's prefix. A committed lookahead swaps the two, since the warmed branch now holds the
live context. A spawned
sub-agent (Isolate) is handed the branch slot its context was warmed in, and the program gets a
free slot as its new branch. Programs beyond the slot pairs the server has are left to the
server's choice. One `SlotPairs` per server, owned by its `ServerSession`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from lookahead_sdk.base.protocol import RequestTags


@dataclass
class SlotPair:
    current: int
    branch: int
    branch_mirrors_live: bool = False  # the branch holds a copy of the live context


class SlotPairs:
    def __init__(self, total_slots: int) -> None:
        if isinstance(total_slots, bool) or not isinstance(total_slots, int) or total_slots < 1:
            raise ValueError(f"total_slots must be an int >= 1, got {total_slots!r}")
        self.total_slots = total_slots
        self._lock = threading.Lock()
        self._pairs: dict[str, SlotPair] = {}

    def __len__(self) -> int:
        """Programs holding a pair."""
        with self._lock:
            return len(self._pairs)

    def enroll(self, program_id: str) -> SlotPair | None:
        """Give a program its pair of slots, if the server has a free pair."""
        with self._lock:
            if program_id in self._pairs:
                return self._pairs[program_id]
            free = self._free_slots()
            if len(free) < 2:
                return None
            pair = SlotPair(current=free[0], branch=free[1])
            self._pairs[program_id] = pair
            return pair

    def pair(self, program_id: str) -> SlotPair | None:
        with self._lock:
            pair = self._pairs.get(program_id)
            return None if pair is None else SlotPair(**vars(pair))

    def slot_for(self, tags: RequestTags) -> int | None:
        if tags.program_id is None:
            return None
        with self._lock:
            pair = self._pairs.get(tags.program_id)
        if pair is None:
            return None
        if not tags.is_lookahead:
            return pair.current
        if tags.extends_live_context and not pair.branch_mirrors_live:
            return pair.current
        return pair.branch

    def mirror_live(self, program_id: str, mirrors: bool) -> None:
        """The branch of `program_id` now holds a copy of its live context (True), or other
        work (False: a warm-up of a transformed context was sent there)."""
        with self._lock:
            pair = self._pairs.get(program_id)
            if pair is not None:
                pair.branch_mirrors_live = mirrors

    def hand_over(self, program_id: str, child_id: str) -> bool:
        """The sub-agent `child_id` takes `program_id`'s branch slot (where its context was
        warmed) as its own; `program_id` gets a free slot as its new branch. False (nothing
        changes) when the program has no pair or the server no free slot."""
        with self._lock:
            pair = self._pairs.get(program_id)
            if pair is None or child_id in self._pairs:
                return False
            free = self._free_slots()
            if not free:
                return False
            self._pairs[child_id] = SlotPair(current=pair.branch, branch=pair.branch)
            pair.branch, pair.branch_mirrors_live = free[0], False
            return True

    def _free_slots(self) -> list[int]:
        """Slots no program holds (call with the lock held)."""
        used = {slot for pair in self._pairs.values() for slot in (pair.current, pair.branch)}
        return [slot for slot in range(self.total_slots) if slot not in used]

    def swap(self, program_id: str) -> None:
        with self._lock:
            pair = self._pairs.get(program_id)
            if pair is not None:
                pair.current, pair.branch = pair.branch, pair.current
                pair.branch_mirrors_live = False

    def release(self, program_id: str) -> None:
        with self._lock:
            self._pairs.pop(program_id, None)

"""llama.cpp slots of one backend, as the router hands them out (`id_slot`): a program's main
requests keep one slot, so its KV stays there between steps, and its lookahead branches use
another. When every slot is taken the router sets none and llama.cpp picks. Pure."""

from __future__ import annotations


class SlotTable:
    def __init__(self, slots: int) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        self.slots = slots
        self._owner: dict[int, tuple[str, bool]] = {}  # slot -> (program id, lookahead)
        self._slot: dict[tuple[str, bool], int] = {}

    def slot_for(self, program_id: str, *, lookahead: bool) -> int | None:
        key = (program_id, lookahead)
        slot = self._slot.get(key)
        if slot is None:
            slot = next((s for s in range(self.slots) if s not in self._owner), None)
            if slot is None:
                return None
            self._slot[key] = slot
            self._owner[slot] = key
        return slot

    def forget(self, program_id: str) -> None:
        for key in ((program_id, False), (program_id, True)):
            slot = self._slot.pop(key, None)
            if slot is not None:
                del self._owner[slot]

    def __len__(self) -> int:
        return len(self._slot)

"""llama.cpp slots of one backend, as the router hands them out (`id_slot`): a program's main
requests keep one slot, so its KV stays there between steps, and its lookahead branches share
another while any of them runs. When every slot is taken the router sets none and llama.cpp
picks. Pure.

The policy core counts a program on llama.cpp as one slot, two while a lookahead branch runs
(`Backend.footprint`): the branch slot is freed when the program's last branch ends, so this table
never holds more slots than the core has counted."""

from __future__ import annotations

from lookahead_sdk.base.checks import require_int


class SlotTable:
    def __init__(self, slots: int) -> None:
        self.slots = require_int("slots", slots, low=1)
        self._owner: dict[int, tuple[str, bool]] = {}  # slot -> (program id, lookahead)
        self._slot: dict[tuple[str, bool], int] = {}
        self._branches: dict[str, set[str]] = {}  # program id -> its running branches' ids

    def slot_for(self, program_id: str) -> int | None:
        """The slot of the program's main context, kept until `forget`."""
        return self._take((program_id, False))

    def branch_slot(self, program_id: str, request_id: str) -> int | None:
        """The slot the program's lookahead branches share; `request_id` holds it until
        `branch_ended` (or `forget`)."""
        slot = self._take((program_id, True))
        if slot is not None:
            self._branches.setdefault(program_id, set()).add(request_id)
        return slot

    def branch_ended(self, program_id: str, request_id: str) -> None:
        """Free the branch slot when this was the program's last running branch (a branch that
        holds no slot, or was forgotten already, is ignored)."""
        running = self._branches.get(program_id)
        if running is None or request_id not in running:
            return
        running.discard(request_id)
        if not running:
            del self._branches[program_id]
            self._free((program_id, True))

    def moved_away(self, program_id: str) -> None:
        """The program's main requests go to another backend now (a baseline policy routes each
        request afresh): its main slot here is freed for other programs; its branch slot stays
        until its running branches end."""
        self._free((program_id, False))

    def forget(self, program_id: str) -> None:
        self._branches.pop(program_id, None)
        self._free((program_id, False))
        self._free((program_id, True))

    def __len__(self) -> int:
        return len(self._slot)

    def _take(self, key: tuple[str, bool]) -> int | None:
        slot = self._slot.get(key)
        if slot is None:
            slot = next((s for s in range(self.slots) if s not in self._owner), None)
            if slot is None:
                return None
            self._slot[key] = slot
            self._owner[slot] = key
        return slot

    def _free(self, key: tuple[str, bool]) -> None:
        slot = self._slot.pop(key, None)
        if slot is not None:
            del self._owner[slot]

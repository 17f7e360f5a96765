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
live context.

Where the live contexts sit matters: without --kv-unified each slot is a KV stream of its own,
and llama.cpp splits a batch into micro-batches of consecutive streams, each reading every weight
again (measured: four replies decoding in slots 0-3 ran 1.11-1.29x the tokens/s of the same in
0, 2, 4, 6; scripts/slot_layout_decode.py). So a pair's home slot is the lowest free one and its
branch the highest, and after a commit leaves the live context in the branch, a copy of it back
home while the model's tools run (`away_from_home`, `settle_home`) restores the layout. A spawned
sub-agent (Isolate) is handed the branch slot its context was warmed in, and the program gets a
free slot as its new branch. Programs beyond the slot pairs the server has are left to the
server's choice. One `SlotPairs` per server, owned by its `ServerSession`.

The pairs also keep what the session's warmers know a slot's cache starts with (`note_cached`:
the token ids a warm-up or copy left there), while only the program that left them was placed in
the slot since. A warm-up that starts from little can then start from a copy of the slot holding
the longest prefix of it (another agent's sub-agent with the same role prompt and handover, say)
instead of prefilling that prefix again. llama.cpp reuses only the cached tokens that match a
prompt, so a record gone stale costs prefill time, never a wrong cache.

What a slot held is not lost when it is overwritten: llama-server keeps the prompts it evicts
from slots in its RAM prompt cache (`--cache-ram`) and loads the best match into the slot a new
prompt goes to, but only for a prompt covering at least a quarter of the cached one, which a
warm-up's first chunk of a few hundred tokens seldom does. The pairs therefore also remember the
last contexts noted anywhere (`recalled_prefix`), so a warm-up can make its first chunk end where
such a context and its prompt part: that request finds the prefix cached again.

A slot can hold a dead context: after a commit, the one its program's transform replaced (the
old live slot when the commit swapped the pair, else the branch's copy of what the live slot now
holds); after a synchronous transform, both slots' (`retire`). The next request placed there
says so (`SlotPlacement.discard_held_prompt`); so does the next request after a summary
that ran in the branch's copy of the live context: the embedded engine then does not save that
context into its RAM prompt cache, a copy of the slot's KV state that stalls every slot and
that no request would load back (`engine.patches`). A slot copy (restore) into a retired slot
leaves the mark: it puts there what another slot holds, no save is lost.

A program that ends (`release`) may come back under the same id: an agent framework's next run
that loads the saved state of the last one (its ready lookahead was warmed in the branch). Its
pair is parked with what its warmer knew of the branch (`keep=`); `resume` gives the same slots
back, and that knowledge, while no other program's request was placed in them since.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.base.tokens import common_prefix_length

# Contexts remembered for `SlotPairs.recalled_prefix`: about as many as llama-server's RAM
# prompt cache (1 GiB by default for the embedded engine) holds of a small model's contexts.
RECENT_CONTEXTS = 64


@dataclass
class SlotPair:
    current: int
    branch: int
    branch_mirrors_live: bool = False  # the branch holds a copy of the live context
    home: int | None = None  # where the live context belongs (`settle_home`); None: `current`

    def __post_init__(self) -> None:
        if self.home is None:
            self.home = self.current


def _away(pair: SlotPair) -> bool:
    """The live context sits in the pair's other slot, its home slot is the branch."""
    return pair.current != pair.home and pair.branch == pair.home


@dataclass(frozen=True)
class SlotPlacement:
    slot: int
    # The slot holds a dead context (`SlotPairs.retire`): the server need not keep it.
    discard_held_prompt: bool = False


@dataclass(frozen=True)
class CachedPrefix:
    slot: int
    ids: tuple[int, ...]  # what the slot's cache starts with


@dataclass(frozen=True)
class _Cached:
    owner: str  # the program that left it; valid while only it was placed in the slot since
    ids: tuple[int, ...]


@dataclass(frozen=True)
class _Parked:
    pair: SlotPair
    kept: object | None  # what the warmer knew of the branch


class SlotPairs:
    def __init__(self, total_slots: int) -> None:
        if isinstance(total_slots, bool) or not isinstance(total_slots, int) or total_slots < 1:
            raise ValueError(f"total_slots must be an int >= 1, got {total_slots!r}")
        self.total_slots = total_slots
        self._lock = threading.Lock()
        self._pairs: dict[str, SlotPair] = {}
        self._parked: OrderedDict[str, _Parked] = OrderedDict()  # at most total_slots
        self._last_placed: dict[int, str] = {}  # slot -> the program last placed there
        self._cached: dict[int, _Cached] = {}  # slot -> what a warm-up or copy left there
        # Contexts noted in any slot, newest last, none a prefix of another (`recalled_prefix`).
        self._recent: OrderedDict[tuple[int, ...], None] = OrderedDict()
        self._dead: set[int] = set()  # slots holding a context no request will come back to
        self._placements: dict[int, int] = {}  # slot -> requests placed there so far

    def __len__(self) -> int:
        """Programs holding a pair."""
        with self._lock:
            return len(self._pairs)

    def enroll(self, program_id: str) -> SlotPair | None:
        """Give a program its pair of slots, if the server has a free pair: its home (live)
        slot the lowest free one, its branch the highest, so that live contexts sit in
        consecutive slots (see `settle_home`)."""
        with self._lock:
            if program_id in self._pairs:
                return self._pairs[program_id]
            free = self._free_slots()
            if len(free) < 2:
                return None
            pair = SlotPair(current=free[0], branch=free[-1])
            self._pairs[program_id] = pair
            return pair

    def resume(self, program_id: str) -> object | None:
        """`enroll`, giving a program that was released the pair it had when both slots are
        free and no other program's request was placed in them since: then what was kept with
        it (`release(keep=)`), else None."""
        with self._lock:
            parked = self._parked.pop(program_id, None)
            if parked is not None and program_id not in self._pairs:
                free = self._free_slots()
                slots = (parked.pair.current, parked.pair.branch)
                if all(
                    slot in free and self._last_placed.get(slot, program_id) == program_id
                    for slot in slots
                ):
                    self._pairs[program_id] = parked.pair  # released: no one else holds it
                    return parked.kept
        self.enroll(program_id)
        return None

    def pair(self, program_id: str) -> SlotPair | None:
        with self._lock:
            pair = self._pairs.get(program_id)
            return None if pair is None else SlotPair(**vars(pair))

    def slot_for(self, tags: RequestTags) -> int | None:
        """The slot a request of `tags` goes to (None: the server's choice); see `place`."""
        placement = self.place(tags)
        return None if placement is None else placement.slot

    def place(self, tags: RequestTags) -> SlotPlacement | None:
        """Place a request of `tags`: its slot, and whether what the slot held is dead. None:
        its program has no pair, the server places it."""
        with self._lock:
            pair = self._pairs.get(tags.program_id) if tags.program_id is not None else None
            if pair is None:
                # The server places it, maybe over any idle slot's cache.
                self._cached.clear()
                return None
            if not tags.is_lookahead or (
                tags.extends_live_context and not pair.branch_mirrors_live
            ):
                slot = pair.current
            else:
                slot = pair.branch
            self._last_placed[slot] = tags.program_id
            self._placements[slot] = self._placements.get(slot, 0) + 1
            dead = slot in self._dead
            self._dead.discard(slot)  # from now on it holds this request's prompt
            if tags.is_lookahead and tags.extends_live_context and slot == pair.branch:
                # A summary run on the branch's copy of the live context: what it leaves there
                # (that copy, the instruction, the summary) no request comes back to.
                self._dead.add(slot)
            return SlotPlacement(slot, discard_held_prompt=dead)

    def retire(self, program_id: str, *, current: bool = False, branch: bool = False) -> None:
        """What the named slots of `program_id` hold is dead (a context its transform replaced):
        the next request placed in each says so (`place`)."""
        with self._lock:
            pair = self._pairs.get(program_id)
            if pair is None:
                return
            self._dead.update(
                slot for slot, named in ((pair.current, current), (pair.branch, branch)) if named
            )

    def placements(self, slot: int) -> int:
        """Requests placed in `slot` so far (`place`)."""
        with self._lock:
            return self._placements.get(slot, 0)

    def away_from_home(self, program_id: str) -> bool:
        """The program's live context sits in the other slot than its home (a commit swapped
        the pair), and the home slot, now its branch, holds a dead context (`retire`): a copy
        of the live context there, then `settle_home`, brings it back."""
        with self._lock:
            pair = self._pairs.get(program_id)
            return pair is not None and _away(pair) and pair.branch in self._dead

    def settle_home(self, program_id: str, *, live_placements: int) -> bool:
        """The program's branch now holds a copy of its live context (a slot copy that began
        when `placements(current)` was `live_placements`). When the branch is its home slot and
        no request was placed in the live slot since (the copy holds all of it), the two trade
        roles: the live context is back home, the other slot a retired copy of it. True when
        they traded.

        Why: without --kv-unified each slot is a KV stream of its own, and llama.cpp splits a
        batch into micro-batches of consecutive streams, each reading every weight again.
        Live contexts in consecutive slots (the homes `enroll` hands out) decode in one."""
        with self._lock:
            pair = self._pairs.get(program_id)
            if (
                pair is None
                or not _away(pair)
                or self._placements.get(pair.current, 0) != live_placements
            ):
                return False
            away = pair.current
            pair.current, pair.branch = pair.branch, away
            pair.branch_mirrors_live = True
            copied = self._valid(pair.current)
            if copied is not None:
                self._cached[away] = copied
                self._last_placed[away] = copied.owner
            self._dead.discard(pair.current)
            self._dead.add(away)  # its next request need not keep a copy of what home holds
            return True

    def note_cached(self, program_id: str, slot: int, ids: Sequence[int]) -> None:
        """`slot`'s cache now starts with `ids`, left there by `program_id`'s request."""
        with self._lock:
            self._last_placed[slot] = program_id
            self._cached[slot] = _Cached(program_id, tuple(ids))
            self._remember(self._cached[slot].ids)

    def recalled_prefix(self, ids: Sequence[int]) -> int:
        """The longest prefix of `ids` that one of the last `RECENT_CONTEXTS` contexts noted in
        any slot (`note_cached`) starts with, whether or not a slot still holds it."""
        with self._lock:
            return max((common_prefix_length(ids, seen) for seen in self._recent), default=0)

    def _remember(self, ids: tuple[int, ...]) -> None:
        """(Lock held.) A context that extends one remembered replaces it (warm-up chunks note
        ever longer prefixes of one context)."""
        if not ids:
            return
        for seen in [seen for seen in self._recent if ids[: len(seen)] == seen]:
            del self._recent[seen]
        if not any(seen[: len(ids)] == ids for seen in self._recent):
            self._recent[ids] = None
        while len(self._recent) > RECENT_CONTEXTS:
            self._recent.popitem(last=False)

    def holds(self, slot: int) -> tuple[int, ...]:
        """What `slot` is known to start with (`note_cached`), while no other program's
        request was placed there since; () when nothing is known."""
        with self._lock:
            cached = self._valid(slot)
            return () if cached is None else cached.ids

    def cached_prefixes(self, *, exclude: int | None = None) -> list[CachedPrefix]:
        """What the slots other than `exclude` are known to hold (`note_cached`), while no
        other program's request was placed there since."""
        with self._lock:
            return [
                CachedPrefix(slot, cached.ids)
                for slot in self._cached
                if slot != exclude and (cached := self._valid(slot)) is not None
            ]

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
            if pair.home == pair.branch:  # the program's home goes to the child
                pair.home = pair.current
            cached = self._valid(pair.branch)
            handed = cached.ids if cached is not None and cached.owner == program_id else ()
            if handed:  # the child continues what its context was warmed to
                self._cached[pair.branch] = _Cached(child_id, handed)
                self._last_placed[pair.branch] = child_id
            # The next sub-agent's context likely starts as this one's (the same role prompt):
            # the new branch is the free slot holding the longest prefix of it; failing that,
            # one holding nothing known, so that no cache another warm-up could start from
            # is overwritten.
            pair.branch = max(
                free,
                key=lambda slot: (self._shared_with(slot, handed), self._valid(slot) is None),
            )
            pair.branch_mirrors_live = False
            return True

    def _valid(self, slot: int) -> _Cached | None:
        """What `slot` is known to hold, if only its owner was placed there since (lock held)."""
        cached = self._cached.get(slot)
        if cached is None or self._last_placed.get(slot) != cached.owner:
            return None
        return cached

    def _shared_with(self, slot: int, ids: Sequence[int]) -> int:
        cached = self._valid(slot)
        return 0 if cached is None else common_prefix_length(ids, cached.ids)

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

    def release(self, program_id: str, *, keep: object | None = None) -> None:
        """The program ended: its slots are free. Its pair is parked for `resume`, with
        `keep` (the warmer's record of the branch)."""
        with self._lock:
            pair = self._pairs.pop(program_id, None)
            if pair is None:
                return
            self._parked[program_id] = _Parked(pair, keep)
            self._parked.move_to_end(program_id)
            while len(self._parked) > self.total_slots:
                self._parked.popitem(last=False)

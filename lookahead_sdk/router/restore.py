"""Which waiting programs come back, and where: the restore order and best-fit-decreasing
placement across backends.

Order (one global queue): a request held longer than the aging bound first (oldest first, so
smallest-first never starves a long prompt); then programs with a held request that ran before,
by ascending tokens (re-prefill cost grows with context); then new programs in arrival order;
then paused programs without a request (acting), by ascending tokens. An aged program or a new
program that fits nowhere stops the pass, so the room that frees next goes to it instead of to
smaller programs behind it. (New programs by ascending tokens give long first prompts the late
first responses; `bench router`'s burst scenario measures both orders:
`ThunderConfig.new_program_order`.)
Room: a program fits where its tokens fit under `restore_to` x capacity counting every active
program's tokens (`Room.raw`). Only a request past the aging bound may also count acting
programs' tokens as decayed (`Room.decayed`) on the backends the policy lets it preempt: the
pause pass then pauses those acting programs. Letting every waiting request count decayed
tokens (as upstream does) restored more than fits, so the pause pass at once evicted programs
about to come back: in the fleet simulation at 2x overload ~90% of all prefill was re-prefill.
Placement, largest first: the program's origin backend when it fits (its prefix may still be
cached), otherwise the backend with the most room (acting tokens decayed), migrating it.
(Upstream's "best-fit decreasing" also puts each program on the roomiest backend. Choosing the
tightest fit instead piles programs onto one backend while another idles: in the fleet simulation
at half load it cost 6% of steps/min against session affinity, and the roomiest choice matched
it.)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from lookahead_sdk.router.state import Program

AGED, HELD_RUNNING, HELD_NEW, IDLE = range(4)


@dataclass(slots=True)
class Room:
    """Tokens a backend can still take under `restore_to` x capacity: counting every active
    program's tokens (`raw`, free room, what any waiting program may use) and with acting
    programs' tokens decayed (`decayed`, what an aged request may use by preempting them)."""

    decayed: float
    raw: float


RestoreRank = tuple[int, float, str]  # (group, then the order within it, program id)


def restore_rank(
    program: Program, now: float, aging_s: float, *, new_by_size: bool = False
) -> RestoreRank:
    oldest = program.oldest_held_s
    if oldest is None:
        return (IDLE, program.accounted_tokens, program.program_id)
    if now - oldest >= aging_s:
        return (AGED, oldest, program.program_id)
    if program.placed_before:
        return (HELD_RUNNING, program.accounted_tokens, program.program_id)
    return (HELD_NEW, program.accounted_tokens if new_by_size else oldest, program.program_id)


Footprint = Callable[[Program, str], int]  # what a program takes on a backend


def tokens_anywhere(program: Program, backend: str) -> int:
    """The footprint on a shared KV pool: the program's tokens wherever it goes."""
    return program.accounted_tokens


def choose_backend(
    program: Program,
    candidates: Sequence[str],
    rooms: dict[str, Room],
    preempt: Collection[str] = (),
    footprint: Footprint = tokens_anywhere,
) -> str | None:
    """Where `program` goes: a candidate with free room for it, else one of `preempt` (the
    backends where it may pause acting programs) with decayed room for it; None if neither."""
    fits = [name for name in candidates if rooms[name].raw >= footprint(program, name)]
    if not fits:
        fits = [name for name in preempt if rooms[name].decayed >= footprint(program, name)]
        if not fits:
            return None
    if program.origin in fits:
        return program.origin
    return min(fits, key=lambda name: (-rooms[name].decayed, name))


def plan_restores(
    ordered: Sequence[Program],
    rooms: dict[str, Room],
    candidates: Callable[[Program], Sequence[str]],
    blocks_when_unplaced: Callable[[Program], bool],
    may_preempt: Callable[[Program], bool] = lambda program: False,
    credit: Mapping[str, float] | None = None,
    footprint: Footprint = tokens_anywhere,
) -> list[tuple[Program, str]]:
    """Select programs in `ordered` order while they fit somewhere (one that does not fit is
    skipped, unless `blocks_when_unplaced`: then nothing behind it is restored, so freed room
    goes to it); then place the selected set largest first, falling back to the selection's own
    placement if that packing leaves one out. A program that `may_preempt` may also take
    decayed room on a candidate whose `credit` (tokens) is still positive; what it takes beyond
    the free room is spent from that credit (see `choose_backend`)."""
    selected = _place_in_order(
        ordered, rooms, candidates, blocks_when_unplaced, may_preempt, credit, footprint
    )
    if len(selected) < 2:
        return selected
    largest_first = sorted((p for p, _ in selected), key=lambda p: -p.accounted_tokens)
    packed = _place_in_order(
        largest_first, rooms, candidates, lambda p: True, may_preempt, credit, footprint
    )
    return packed if len(packed) == len(selected) else selected


def _place_in_order(
    ordered: Sequence[Program],
    rooms: dict[str, Room],
    candidates: Callable[[Program], Sequence[str]],
    blocks_when_unplaced: Callable[[Program], bool],
    may_preempt: Callable[[Program], bool],
    credit: Mapping[str, float] | None,
    footprint: Footprint,
) -> list[tuple[Program, str]]:
    rooms = {name: Room(r.decayed, r.raw) for name, r in rooms.items()}
    left = dict(credit or {})
    placed: list[tuple[Program, str]] = []
    for program in ordered:
        allowed = candidates(program)
        preempt = [n for n in allowed if left.get(n, 0.0) > 0] if may_preempt(program) else []
        backend = choose_backend(program, allowed, rooms, preempt, footprint)
        if backend is None:
            if blocks_when_unplaced(program):
                break
            continue
        room, need = rooms[backend], footprint(program, backend)
        if need > room.raw:
            left[backend] = left.get(backend, 0.0) - (need - max(room.raw, 0.0))
        _take(room, need)
        placed.append((program, backend))
    return placed


def _take(room: Room, tokens: int) -> None:
    room.decayed -= tokens
    room.raw -= tokens

"""The pure planning functions: which programs pause, in what order waiting ones come back,
where they go."""

from lookahead_sdk.router import Hold, Restore, ThunderConfig, ThunderPolicy
from lookahead_sdk.router.pause import plan_pauses
from lookahead_sdk.router.restore import (
    AGED,
    HELD_NEW,
    HELD_RUNNING,
    IDLE,
    Room,
    choose_backend,
    plan_restores,
    restore_rank,
)
from lookahead_sdk.router.state import Backend, Program, TrackedRequest


def program(
    name: str,
    tokens: int,
    *,
    reasoning: bool = False,
    held_since: float | None = None,
    placed_before: bool = True,
    origin: str | None = None,
    acting_since: float | None = None,
) -> Program:
    p = Program(name, last_seen_s=0.0, tokens=tokens, placed_before=placed_before, origin=origin)
    p.acting_since_s = acting_since
    if reasoning:
        p.in_flight["r-" + name] = TrackedRequest("r-" + name, name, 0.0, None)
    if held_since is not None:
        p.held["h-" + name] = TrackedRequest("h-" + name, name, held_since, None)
    return p


def test_acting_programs_pause_smallest_first_until_the_target() -> None:
    programs = [
        program("big", 500),
        program("small", 100),
        program("mid", 300),
        program("busy", 400, reasoning=True),
    ]
    # load 1300 > 1000: bring it to 900 -> free 400: small (100) then mid (300).
    plan = plan_pauses(programs, Backend("b", 1000), pause_at=1.0, pause_to=0.9)
    assert [p.program_id for p in plan.pause_now] == ["small", "mid"]
    assert plan.mark == ()


def test_reasoning_programs_are_marked_and_marked_tokens_count_as_freed() -> None:
    programs = [
        program("acting", 100),
        program("r1", 450, reasoning=True),
        program("r2", 500, reasoning=True),
        program("r3", 600, reasoning=True),
    ]
    # load 1650, target 900: pause acting (100), mark r1 (450), r2 (500) -> 200 left over.
    # Without counting marks the loop would mark r3 as well.
    plan = plan_pauses(programs, Backend("b", 1000), pause_at=1.0, pause_to=0.9)
    assert [p.program_id for p in plan.pause_now] == ["acting"]
    assert [p.program_id for p in plan.mark] == ["r1", "r2"]


def test_nothing_pauses_at_or_under_the_threshold() -> None:
    programs = [program("a", 600), program("b", 400, reasoning=True)]
    assert plan_pauses(programs, Backend("b", 1000), pause_at=1.0, pause_to=0.9).pause_now == ()
    plan = plan_pauses(programs, Backend("b", 999), pause_at=1.0, pause_to=0.9)
    assert [p.program_id for p in plan.pause_now] == ["a"]


def test_restore_order_aged_then_running_by_size_then_new_by_arrival_then_idle() -> None:
    now = 200.0
    waiting = [
        program("idle-small", 10),
        program("new-early-big", 5000, held_since=150.0, placed_before=False),
        program("new-late-small", 100, held_since=190.0, placed_before=False),
        program("run-big", 4000, held_since=199.0),
        program("run-small", 300, held_since=198.0),
        program("aged-late", 9000, held_since=60.0),
        program("aged-early", 8000, held_since=10.0),
    ]
    ranked = sorted(waiting, key=lambda p: restore_rank(p, now, aging_s=120.0))
    assert [p.program_id for p in ranked] == [
        "aged-early",
        "aged-late",
        "run-small",
        "run-big",
        "new-early-big",
        "new-late-small",
        "idle-small",
    ]
    assert [restore_rank(p, now, 120.0)[0] for p in ranked] == [
        AGED, AGED, HELD_RUNNING, HELD_RUNNING, HELD_NEW, HELD_NEW, IDLE,
    ]  # fmt: skip


def test_new_programs_by_size_when_configured() -> None:
    early_big = program("early-big", 5000, held_since=1.0, placed_before=False)
    late_small = program("late-small", 100, held_since=2.0, placed_before=False)
    ranked = sorted(
        [early_big, late_small], key=lambda p: restore_rank(p, 3.0, 120.0, new_by_size=True)
    )
    assert ranked == [late_small, early_big]


def test_placement_prefers_the_origin_when_it_fits_else_the_roomiest() -> None:
    rooms = {"a": Room(1000, 1000), "b": Room(5000, 5000), "c": Room(3000, 3000)}
    assert choose_backend(program("p", 800, held_since=0.0, origin="a"), "abc", rooms) == "a"
    assert choose_backend(program("p", 2000, held_since=0.0, origin="a"), "abc", rooms) == "b"
    assert choose_backend(program("p", 9000, held_since=0.0), "abc", rooms) is None


def test_acting_programs_pause_in_the_order_the_engine_evicts_their_prefixes() -> None:
    programs = [
        program("small-old", 100, acting_since=1.0),
        program("big-older", 500, acting_since=0.5),
        program("small-new", 100, acting_since=9.0),
        program("mid-new", 300, acting_since=8.0),
    ]
    # load 1000 > 900: bring it to 800 -> free 200: the one idle longest goes, however big.
    plan = plan_pauses(programs, Backend("b", 900), pause_at=1.0, pause_to=0.8999)
    assert [p.program_id for p in plan.pause_now] == ["big-older"]
    plan = plan_pauses(programs, Backend("b", 900), pause_at=1.0, pause_to=0.8999, order="smallest")
    assert [p.program_id for p in plan.pause_now] == ["small-new", "small-old"]


def test_only_a_program_allowed_to_preempt_counts_decayed_room() -> None:
    # Decayed room is plenty, free room is not: taking it means pausing acting programs,
    # which only an aged request may do (and an idle program never).
    rooms = {"a": Room(decayed=5000, raw=100), "b": Room(decayed=900, raw=200)}
    held = program("held", 800, held_since=0.0, origin="a")
    assert choose_backend(program("idle", 800, origin="a"), "ab", rooms) is None
    assert choose_backend(held, "ab", rooms) is None
    assert choose_backend(held, "ab", rooms, preempt=["a", "b"]) == "a"
    assert choose_backend(held, "ab", rooms, preempt=["b"]) == "b"
    # Free room anywhere comes before preempting at the origin.
    rooms["b"] = Room(decayed=900, raw=850)
    assert choose_backend(held, "ab", rooms, preempt=["a", "b"]) == "b"


def test_preemption_spends_the_backends_credit_while_planning() -> None:
    first = program("first", 400, held_since=0.0)
    second = program("second", 400, held_since=1.0)
    rooms = {"a": Room(decayed=1000, raw=100)}

    def plan(credit: float) -> list[str]:
        placed = plan_restores(
            [first, second], rooms, lambda p: ["a"], lambda p: True, lambda p: True,
            {"a": credit},
        )  # fmt: skip
        return [p.program_id for p, _ in placed]

    # first takes 100 free tokens and 300 beyond them: 300 of credit; second needs more.
    assert plan(credit=301) == ["first", "second"]
    assert plan(credit=300) == ["first"]  # second blocks (it may preempt, but no credit)
    assert plan(credit=0) == []
    no_preempt = plan_restores([first], rooms, lambda p: ["a"], lambda p: False)
    assert no_preempt == []


def test_selection_skips_what_does_not_fit_unless_it_blocks() -> None:
    big = program("big", 900, held_since=0.0)
    small = program("small", 300, held_since=0.0)
    rooms = {"a": Room(500, 500)}
    plan = plan_restores([big, small], rooms, lambda p: ["a"], lambda p: False)
    assert [(p.program_id, b) for p, b in plan] == [("small", "a")]
    plan = plan_restores([big, small], rooms, lambda p: ["a"], lambda p: p is big)
    assert plan == []


def test_selected_programs_are_placed_largest_first_on_the_roomiest_backend() -> None:
    p100 = program("p100", 100, held_since=0.0)
    p200 = program("p200", 200, held_since=0.0)
    p900 = program("p900", 900, held_since=0.0)
    rooms = {"a": Room(1000, 1000), "b": Room(1000, 1000)}
    plan = plan_restores([p100, p200, p900], rooms, lambda p: ["a", "b"], lambda p: False)
    # Selected in priority order; placed 900 -> a, 200 -> b, 100 -> b (the roomiest each time).
    assert [(p.program_id, b) for p, b in plan] == [("p900", "a"), ("p200", "b"), ("p100", "b")]


def test_when_the_decreasing_packing_leaves_one_out_the_selection_placement_stands() -> None:
    first, second, third = (program(f"x{i}", t, held_since=0.0) for i, t in enumerate((2, 3, 2)))
    rooms = {"a": Room(3, 3), "b": Room(4, 4)}
    plan = plan_restores([first, second, third], rooms, lambda p: ["a", "b"], lambda p: False)
    # Largest first would put 3 on b, 2 on a and find no room for the last 2.
    assert [(p.program_id, b) for p, b in plan] == [("x0", "b"), ("x1", "a"), ("x2", "b")]


def _overloaded_with_a_held_program() -> tuple[ThunderPolicy, float]:
    """Z grows and the backend overflows: I1, I2 and H (idle longest first) are paused; then H's
    next request arrives and waits. I1 and I2 were paused first, H restores first."""
    policy = ThunderPolicy(ThunderConfig(decay_half_life_s=0))
    policy.add_backend("b", 1000)
    now = 0.0
    for program_id, tokens in (("Z", 100), ("I1", 300), ("I2", 300), ("H", 200)):
        policy.request_arrived(program_id, f"{program_id}-1", tokens, now := now + 1)
        policy.request_finished(f"{program_id}-1", now := now + 1, total_tokens=tokens)
    policy.request_arrived("Z", "z-a", 0, now := now + 1)
    policy.request_arrived("Z", "z-b", 0, now := now + 1)
    policy.request_finished("z-a", now := now + 1, total_tokens=850)
    now += 1
    assert isinstance(policy.request_arrived("H", "h-1", 50, now), Hold)
    return policy, now


def test_restore_order_is_the_order_the_policy_restores_in() -> None:
    policy, now = _overloaded_with_a_held_program()
    assert policy.waiting() == ("I1", "I2", "H")  # paused in that order
    assert policy.restore_order(now) == ("H", "I1", "I2")  # a held request first
    decisions = policy.request_finished("z-b", now + 1, total_tokens=600)
    restored = [d.program_id for d in decisions if isinstance(d, Restore)]
    assert restored == ["H"]

"""ThunderPolicy's rules on small deterministic scenarios (virtual clock, no timing)."""

import pytest

from lookahead_sdk.router import (
    ForceAdmit,
    Forward,
    Hold,
    Ignored,
    Pause,
    Reject,
    Requeue,
    Restore,
    Teardown,
    ThunderPolicy,
)

from .helpers import forwarded, thunder


def test_a_marked_reasoning_program_pauses_when_its_response_ends() -> None:
    policy = thunder(("a", 1000))
    assert policy.request_arrived("p1", "r1", 500, 0.0) == Forward("r1", "p1", "a")
    assert policy.request_arrived("p2", "r2", 300, 0.0) == Forward("r2", "p2", "a")
    assert policy.request_finished("r1", 1.0, total_tokens=650) == []
    # p1's next request: its tokens become last usage + the new messages (650 + 200).
    assert policy.request_arrived("p1", "r3", 200, 2.0) == Forward("r3", "p1", "a")
    assert policy.accounted_tokens("a") == 1150
    assert policy.tick(3.0) == []  # both reasoning: nothing can pause now
    views = {v.program_id: v for v in policy.programs()}
    assert views["p2"].marked_for_pause and not views["p1"].marked_for_pause
    # Best-effort lookahead work of a program about to pause is refused.
    refused = policy.request_arrived("p2", "la", 50, 3.5, lookahead="best_effort")
    assert refused == Reject("la", "p2", "program_pausing", 409)
    decisions = policy.request_finished("r2", 4.0, total_tokens=350)
    assert Pause("p2", "a", 350) in decisions
    paused = policy.program("p2")
    assert paused is not None and paused.status == "paused" and paused.origin == "a"
    assert policy.metrics().pauses == 1


@pytest.mark.parametrize("ok", [True, False])
def test_a_program_always_leaves_reasoning_when_its_last_request_ends(ok: bool) -> None:
    policy = thunder(("a", 1000))
    policy.request_arrived("p1", "r1", 100, 0.0)
    policy.request_arrived("p1", "r2", 0, 0.0, lookahead="promoted")
    policy.request_finished("r1", 1.0, ok=ok, total_tokens=None)
    view = policy.program("p1")
    assert view is not None and view.phase == "reasoning"  # its lookahead is still running
    policy.request_finished("r2", 2.0, ok=False)
    view = policy.program("p1")
    assert view is not None
    assert (view.phase, view.acting_since_s, view.in_flight) == ("acting", 2.0, ())
    assert view.steps == (1 if ok else 0)
    assert view.tokens == 100  # no usage reported: the estimate stands


def test_a_client_disconnecting_while_held_drops_the_request_unforwarded() -> None:
    policy = thunder(("a", 1000))
    policy.request_arrived("big", "r1", 800, 0.0)
    assert policy.request_arrived("p2", "r2", 500, 1.0) == Hold("r2", "p2", "queued")
    decisions = policy.request_finished("r2", 2.0, ok=False)
    assert "r2" not in forwarded(decisions)
    view = policy.program("p2")
    assert view is not None and view.held == () and view.phase == "acting"
    decisions = policy.request_finished("r1", 3.0, total_tokens=100) + policy.tick(400.0)
    assert "r2" not in forwarded(decisions)


@pytest.mark.parametrize(("half_life", "restored"), [(1.0, True), (0.0, False)])
def test_an_aged_request_takes_room_from_decayed_acting_tokens(
    half_life: float, restored: bool
) -> None:
    policy = thunder(("a", 1000), decay_half_life_s=half_life, aging_s=3.0)
    policy.request_arrived("p1", "r1", 800, 0.0)
    policy.request_finished("r1", 1.0, total_tokens=850)
    assert isinstance(policy.request_arrived("p2", "r2", 400, 1.0), Hold)
    assert policy.tick(3.0) == []  # held 2 s < 3 s: free room only, and there is none
    decisions = policy.tick(5.0)  # held 4 s; p1 acting for 4 s: 850 / 16 with decay
    if restored:
        assert forwarded(decisions) == {"r2": "a"}
        # ... and the pause pass (without decay) then makes room: p1 leaves.
        assert Pause("p1", "a", 850) in decisions
        assert policy.metrics().preemptions == 1
    else:
        assert decisions == []
        view = policy.program("p2")
        assert view is not None and view.held == ("r2",)


def test_a_younger_request_waits_for_free_room_however_decayed_the_acting_tokens() -> None:
    policy = thunder(("a", 1000), aging_s=60.0)
    policy.request_arrived("p1", "r1", 800, 0.0)
    policy.request_finished("r1", 1.0, total_tokens=850)
    assert isinstance(policy.request_arrived("p2", "r2", 400, 1.0), Hold)
    assert policy.tick(30.0) == []  # p1 has decayed to nothing, but p2 is not aged yet
    decisions = policy.tick(61.0)
    assert forwarded(decisions) == {"r2": "a"} and Pause("p1", "a", 850) in decisions


def _acting_hogs_and_aged_waiters(swap_budget: float) -> ThunderPolicy:
    """a (1000, free room up to 900) holds two acting programs, h1 (450, idle since 0.5) and
    h2 (400, idle since 0.6); w1 and w2 (300 each) wait from t=1 and are aged from t=2."""
    policy = thunder(("a", 1000), aging_s=1.0, swap_budget=swap_budget)
    for name, tokens in (("h1", 450), ("h2", 400)):
        policy.request_arrived(name, f"{name}-r", tokens, 0.0)
    policy.request_finished("h1-r", 0.5, total_tokens=450)
    policy.request_finished("h2-r", 0.6, total_tokens=400)
    for name in ("w1", "w2"):
        assert isinstance(policy.request_arrived(name, f"{name}-r", 300, 1.0), Hold)
    return policy


def test_preemption_is_capped_by_the_swap_budget_and_refilled_by_served_tokens() -> None:
    policy = _acting_hogs_and_aged_waiters(swap_budget=0.5)
    # Credit starts at 0.3 x 1000 = 300. w1 takes the 50 free tokens and 250 beyond them
    # (credit 50 left, still positive), w2 300 more (credit -250); h1 and h2 pause for them.
    decisions = policy.tick(3.0)
    assert forwarded(decisions) == {"w1-r": "a", "w2-r": "a"}
    assert [d.program_id for d in decisions if isinstance(d, Pause)] == ["h1", "h2"]
    assert policy.metrics().preemptions == 2
    assert isinstance(policy.request_arrived("w3", "w3-r", 450, 3.5), Hold)  # 300 free
    policy.request_finished("w1-r", 4.0, total_tokens=300)  # credit -250 + 0.5 x 300 = -100
    assert forwarded(policy.tick(6.0)) == {}  # w3 is aged, but a has no credit left
    # w2's reply brings the credit to 50: w3 preempts, and w1 (idle longest) pauses for it.
    decisions = policy.request_finished("w2-r", 6.5, total_tokens=300)
    assert forwarded(decisions) == {"w3-r": "a"}
    assert [d.program_id for d in decisions if isinstance(d, Pause)] == ["w1"]
    assert policy.metrics().preemptions == 3


def test_with_no_swap_budget_an_aged_request_waits_for_free_room() -> None:
    policy = _acting_hogs_and_aged_waiters(swap_budget=0.0)
    assert policy.tick(10.0) == []
    decisions = policy.release("h1", 11.0)  # 500 free: w1 fits, w2 waits for the next room
    assert forwarded(decisions) == {"w1-r": "a"}
    assert policy.metrics().preemptions == 0


def _paused_on_b_with_a_roomier_backend() -> object:
    policy = thunder(("b", 2000))
    policy.request_arrived("p1", "r1", 300, 0.0)
    policy.request_arrived("p2", "r2", 1500, 0.0)
    policy.add_backend("a", 3000)
    policy.request_finished("r1", 1.0, total_tokens=300)
    decisions = policy.request_finished("r2", 1.0, total_tokens=1750)  # b: 2050 > 2000
    assert Pause("p1", "b", 300) in decisions
    return policy


def test_a_restored_program_goes_back_to_its_origin_when_it_fits() -> None:
    policy = _paused_on_b_with_a_roomier_backend()
    policy.release("p2", 1.5)  # b has room again (a has more), and p1's prefix may be on b
    assert policy.request_arrived("p1", "r3", 50, 2.0) == Forward("r3", "p1", "b")
    assert policy.metrics().migrations == 0


def test_a_restored_program_migrates_when_its_origin_has_no_room() -> None:
    policy = _paused_on_b_with_a_roomier_backend()
    assert policy.request_arrived("p1", "r3", 2000, 1.0) == Forward("r3", "p1", "a")
    assert policy.metrics().migrations == 1


def _two_paused_programs_waiting(aging_s: float):
    """a is full with a filler; big (610) and small (210) ran on b, which went down; both have
    a request held. Then the filler's reply leaves 650 tokens of room on a."""
    policy = thunder(("a", 1000), ("b", 1000), decay_half_life_s=0.0, aging_s=aging_s)
    policy.request_arrived("filler", "f", 850, 0.0)
    policy.request_arrived("big", "b1", 600, 0.0)
    policy.request_arrived("small", "s1", 200, 0.0)
    policy.request_finished("b1", 1.0, total_tokens=600)
    policy.request_finished("s1", 1.0, total_tokens=200)
    requeued = policy.mark_down("b", 1.0)
    assert {d.program_id for d in requeued if isinstance(d, Requeue)} == {"big", "small"}
    assert isinstance(policy.request_arrived("big", "b2", 10, 2.0), Hold)
    assert isinstance(policy.request_arrived("small", "s2", 10, 5.0), Hold)
    return policy.request_finished("f", 6.0, total_tokens=250)


def test_waiting_programs_come_back_smallest_first() -> None:
    assert forwarded(_two_paused_programs_waiting(aging_s=100.0)) == {"s2": "a"}


def test_a_request_held_past_the_aging_bound_goes_first() -> None:
    # big has waited 4 s >= 3 s: it takes the room although small would fit too.
    assert forwarded(_two_paused_programs_waiting(aging_s=3.0)) == {"b2": "a"}


@pytest.mark.parametrize("order", ["arrival", "smallest"])
def test_new_programs_queue_in_arrival_order_behind_a_head_that_does_not_fit(order: str) -> None:
    policy = thunder(("a", 1000), decay_half_life_s=0.0, new_program_order=order)
    policy.request_arrived("filler", "f", 800, 0.0)
    assert policy.request_arrived("n1", "r1", 500, 1.0) == Hold("r1", "n1", "queued")
    # n2 would fit, but another request is waiting: it queues rather than jump ahead.
    assert policy.request_arrived("n2", "r2", 50, 2.0) == Hold("r2", "n2", "queued")
    at_tick = forwarded(policy.tick(3.0))
    assert at_tick == ({} if order == "arrival" else {"r2": "a"})
    later = forwarded(policy.request_finished("f", 4.0, total_tokens=300))
    assert later == ({"r1": "a", "r2": "a"} if order == "arrival" else {"r1": "a"})


def test_an_idle_lease_releases_a_vanished_client_but_never_a_busy_one() -> None:
    policy = thunder(("a", 1000), lease_s=60.0)
    policy.request_arrived("gone", "r1", 100, 0.0)
    policy.request_finished("r1", 1.0, total_tokens=120)
    policy.request_arrived("busy", "r2", 100, 1.0)  # never finishes
    assert policy.tick(60.0) == []
    assert policy.tick(61.0) == [Teardown("gone", "lease", 60.0)]
    assert policy.program("gone") is None and policy.program("busy") is not None
    assert policy.accounted_tokens("a") == 100
    assert policy.tick(10_000.0) == []
    metrics = policy.metrics()
    assert (metrics.lease_expirations, metrics.terminated, metrics.programs) == (1, 1, 1)


def test_a_hold_timeout_force_admits_to_the_least_loaded_backend_and_counts() -> None:
    policy = thunder(("a", 1000), ("b", 1000), decay_half_life_s=0.0, hold_timeout_s=30.0)
    policy.request_arrived("f1", "f1", 850, 0.0)
    policy.request_arrived("f2", "f2", 800, 0.0)
    assert isinstance(policy.request_arrived("p", "r", 400, 1.0), Hold)
    assert policy.tick(30.0) == []
    decisions = policy.tick(31.0)
    assert decisions[0] == ForceAdmit("p", "b", 30.0, (Forward("r", "p", "b"),))
    assert policy.metrics().forced_admits == 1
    # b is over its threshold now: its smallest reasoning program is marked.
    view = policy.program("p")
    assert view is not None and view.marked_for_pause


def test_lookahead_requests_follow_their_program() -> None:
    policy = thunder(("a", 1000), ("b", 1000))
    policy.request_arrived("filler", "f", 700, 0.0)  # on a
    assert policy.request_arrived("p", "r1", 300, 0.0) == Forward("r1", "p", "b")
    assert policy.request_arrived("p", "la1", 120, 0.5, lookahead="best_effort") == Forward(
        "la1", "p", "b"
    )
    view = policy.program("p")
    assert view is not None and view.tokens == 420  # the branch counts toward its program
    policy.request_finished("la1", 1.0, total_tokens=999)  # a branch's usage is not the context
    policy.request_finished("r1", 1.0, total_tokens=350)
    view = policy.program("p")
    assert view is not None and view.tokens == 350


def test_lookahead_work_of_a_paused_program_is_refused_unless_promoted() -> None:
    policy = thunder(("a", 1000), decay_half_life_s=0.0)
    before = policy.metrics()
    refused = policy.request_arrived("ghost", "la", 100, 0.0, lookahead="best_effort")
    assert refused == Reject("la", "ghost", "program_paused", 409)
    assert policy.program("ghost") is None and policy.metrics().rejects == before.rejects + 1
    policy.request_arrived("p", "r1", 300, 0.0)
    policy.request_arrived("hog", "r2", 500, 0.0)
    policy.request_finished("r1", 1.0, total_tokens=300)
    policy.request_finished("r2", 1.0, total_tokens=880)  # 1180 > 1000: p (smaller) pauses
    assert policy.program("p").status == "paused"  # type: ignore[union-attr]
    refused = policy.request_arrived("p", "la2", 50, 2.0, lookahead="best_effort")
    assert refused == Reject("la2", "p", "program_paused", 409)
    held = policy.request_arrived("p", "la3", 50, 2.0, lookahead="promoted")
    assert held == Hold("la3", "p", "paused")
    decisions = policy.release("hog", 3.0)
    assert forwarded(decisions) == {"la3": "a"}
    assert any(isinstance(d, Restore) and d.program_id == "p" for d in decisions)


def test_release_is_idempotent_and_frees_everything() -> None:
    policy = thunder(("a", 1000), decay_half_life_s=0.0)
    policy.request_arrived("p", "r1", 600, 0.0)
    policy.request_arrived("p", "r2", 0, 0.0, lookahead="promoted")
    assert isinstance(policy.request_arrived("q", "r3", 500, 0.0), Hold)
    decisions = policy.release("p", 1.0)
    assert decisions[0] == Teardown("p", "release", 1.0)
    assert forwarded(decisions) == {"r3": "a"}  # the freed room goes to q at once
    assert policy.program("p") is None and policy.accounted_tokens("a") == 500
    assert policy.release("p", 2.0) == []
    assert isinstance(policy.request_finished("r1", 2.0, total_tokens=700)[0], Ignored)
    assert policy.metrics().terminated == 1


def test_releasing_a_program_with_a_held_request_answers_it() -> None:
    policy = thunder(("a", 1000))
    policy.request_arrived("hog", "r1", 900, 0.0)
    policy.request_arrived("p", "r2", 500, 0.0)
    decisions = policy.release("p", 1.0)
    assert decisions == [
        Teardown("p", "release", 1.0),
        Reject("r2", "p", "program_released", 409),
    ]
    assert policy.metrics().held_requests == 0


def test_a_backend_going_down_requeues_its_programs_without_losing_one() -> None:
    policy = thunder(("a", 1000), ("b", 1000), decay_half_life_s=0.0)
    policy.request_arrived("p1", "r1", 300, 0.0)  # a
    policy.request_arrived("p2", "r2", 200, 0.0)  # b
    decisions = policy.mark_down("a", 1.0)
    assert decisions[0] == Requeue("p1", "a", ("r1",))
    restore = decisions[1]
    assert isinstance(restore, Restore) and (restore.program_id, restore.backend) == ("p1", "b")
    assert policy.program("p1").backend == "b"  # type: ignore[union-attr]
    assert isinstance(policy.request_finished("r1", 2.0)[0], Ignored)  # lost with its backend
    policy.mark_down("b", 3.0)
    assert policy.request_arrived("p3", "r3", 10, 4.0) == Hold("r3", "p3", "no_backend")
    assert policy.metrics().paused == 3
    decisions = policy.mark_up("a", 5.0)
    assert forwarded(decisions) == {"r3": "a"}
    assert {d.program_id for d in decisions if isinstance(d, Restore)} == {"p1", "p2", "p3"}


def test_with_every_backend_down_a_timed_out_hold_is_refused_with_503() -> None:
    policy = thunder(("a", 1000), hold_timeout_s=10.0)
    policy.mark_down("a", 0.0)
    policy.request_arrived("p", "r", 10, 0.0)
    assert policy.tick(10.0) == [Reject("r", "p", "no_backend", 503)]
    assert policy.metrics().held_requests == 0


def test_metrics_count_programs_by_status_and_phase() -> None:
    policy = thunder(("a", 1000), decay_half_life_s=0.0)
    policy.request_arrived("p1", "r1", 500, 0.0)
    policy.request_arrived("p2", "r2", 300, 0.0)
    policy.request_finished("r2", 1.0, total_tokens=300)
    policy.request_arrived("p3", "r3", 800, 1.0)
    metrics = policy.metrics()
    assert (metrics.programs, metrics.active, metrics.paused) == (3, 2, 1)
    assert (metrics.reasoning, metrics.acting) == (2, 1)
    assert (metrics.held_requests, metrics.in_flight_requests) == (1, 1)
    assert metrics.backends[0].accounted_tokens == 800 and metrics.backends[0].programs == 2


def test_a_program_too_big_for_any_backend_does_not_block_the_queue() -> None:
    policy = thunder(("a", 1000), decay_half_life_s=0.0, hold_timeout_s=50.0)
    policy.request_arrived("filler", "f", 300, 0.0)
    assert isinstance(policy.request_arrived("huge", "r1", 950, 1.0), Hold)  # > 0.9 x 1000
    assert isinstance(policy.request_arrived("small", "r2", 100, 2.0), Hold)
    assert forwarded(policy.tick(3.0)) == {"r2": "a"}
    decisions = policy.tick(51.0)
    assert forwarded(decisions) == {"r1": "a"} and isinstance(decisions[0], ForceAdmit)


def test_on_llama_cpp_a_small_program_still_takes_a_whole_slot() -> None:
    """Three 100-token programs fit a 1,000-token pool, but a 2-slot llama.cpp server of the same
    size holds two contexts: the third waits instead of taking another program's slot."""
    pooled = thunder(("a", 1000))
    assert all(
        isinstance(pooled.request_arrived(p, f"r-{p}", 100, 0.0), Forward)
        for p in ("p1", "p2", "p3")
    )
    slotted = ThunderPolicy()
    slotted.add_backend("a", 1000, slots=2)
    assert slotted.request_arrived("p1", "r1", 100, 0.0) == Forward("r1", "p1", "a")
    assert slotted.request_arrived("p2", "r2", 100, 0.0) == Forward("r2", "p2", "a")
    assert isinstance(slotted.request_arrived("p3", "r3", 100, 0.0), Hold)
    assert slotted.accounted_tokens("a") == 1000  # two slots of 500, not 200 tokens
    # A slot frees when p1 ends: p3 takes it.
    assert forwarded(slotted.release("p1", 1.0)) == {"r3": "a"}


def test_best_effort_lookahead_never_takes_a_slot_another_program_holds() -> None:
    policy = ThunderPolicy()
    policy.add_backend("a", 1000, slots=2)
    policy.request_arrived("p1", "r1", 100, 0.0)
    # One slot free: p1's branch may use it (its footprint is then both slots).
    assert policy.request_arrived("p1", "b1", 50, 0.5, lookahead="best_effort") == Forward(
        "b1", "p1", "a"
    )
    assert policy.accounted_tokens("a") == 1000
    policy.request_finished("b1", 1.0, ok=True)
    policy.request_arrived("p2", "r2", 100, 1.5)
    refused = policy.request_arrived("p1", "b2", 50, 2.0, lookahead="best_effort")
    assert refused == Reject("b2", "p1", "no_free_slot", 409)
    assert policy.accounted_tokens("a") == 1000  # refused before anything was recorded


@pytest.mark.parametrize("slots", [0, -1, 1001, True, 2.0])
def test_a_backend_with_impossible_slots_is_refused_by_name(slots: object) -> None:
    policy = ThunderPolicy()
    with pytest.raises(ValueError, match="slots of backend 'a'"):
        policy.add_backend("a", 1000, slots=slots)  # type: ignore[arg-type]
    assert policy.backend_names == ()

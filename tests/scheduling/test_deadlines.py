"""Deadline triage of best-effort lookaheads (Moore-Hodgson over estimated service times)."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk.scheduling import RequestDescriptor
from lookahead_sdk.scheduling.deadlines import infeasible_lookaheads


def lookahead(rid: str, work: int, deadline: float | None, *, arrival: float = 0.0):
    """`work` doubles as the service time in ms (see `service`)."""
    return RequestDescriptor(
        rid=rid,
        priority_class="be",
        is_lookahead=True,
        arrival_ms=arrival,
        cached_prefix_tokens=0,
        remaining_prefill_tokens=work,
        commit_deadline_ms=deadline,
    )


def service(descriptor: RequestDescriptor) -> float:
    return float(descriptor.remaining_prefill_tokens)


def on_time_in_edf_order(now: float, jobs, share: float) -> bool:
    finish = now
    for job in sorted(jobs, key=lambda d: d.commit_deadline_ms):
        finish += service(job) / share
        if finish > job.commit_deadline_ms:
            return False
    return True


def test_past_deadline_lookaheads_are_infeasible_and_no_deadline_is_ignored() -> None:
    jobs = [lookahead("past", 10, 90.0), lookahead("free", 10, None), lookahead("ok", 10, 500.0)]
    triage = infeasible_lookaheads(100.0, jobs, service, 1.0)
    assert triage.past_deadline == {"past"}
    assert triage.shed == frozenset()
    assert triage.infeasible == {"past"}


def test_the_longest_job_is_given_up_so_the_others_make_their_deadlines() -> None:
    # EDF alone: short (done at 10) then long (done at 110, deadline 100: late) then mid (late).
    jobs = [
        lookahead("short", 10, 50.0),
        lookahead("long", 100, 100.0),
        lookahead("mid", 30, 120.0),
    ]
    triage = infeasible_lookaheads(0.0, jobs, service, 1.0)
    assert triage.shed == {"long"}
    kept = [d for d in jobs if d.rid not in triage.infeasible]
    assert on_time_in_edf_order(0.0, kept, 1.0)


def test_a_smaller_share_of_the_engine_makes_jobs_infeasible() -> None:
    jobs = [lookahead("a", 40, 100.0), lookahead("b", 40, 100.0)]
    assert infeasible_lookaheads(0.0, jobs, service, 1.0).shed == frozenset()
    assert len(infeasible_lookaheads(0.0, jobs, service, 0.5).shed) == 1


def test_without_any_share_only_past_deadlines_count() -> None:
    jobs = [lookahead("past", 10, 5.0), lookahead("huge", 10**6, 50.0)]
    triage = infeasible_lookaheads(10.0, jobs, service, 0.0)
    assert triage.past_deadline == {"past"} and triage.shed == frozenset()


@pytest.mark.parametrize("share", [1.5, float("nan"), float("inf")])
def test_share_must_be_a_fraction(share: float) -> None:
    with pytest.raises(ValueError, match="be_share"):
        infeasible_lookaheads(0.0, [], service, share)


jobs_strategy = st.lists(
    st.tuples(st.integers(1, 60), st.one_of(st.none(), st.floats(0, 300))), max_size=7
).map(lambda items: [lookahead(f"j{i}", w, d) for i, (w, d) in enumerate(items)])


@settings(max_examples=300, deadline=None)
@given(jobs=jobs_strategy, now=st.floats(0, 100), share=st.floats(0.05, 1.0))
def test_property_kept_lookaheads_all_finish_on_time_in_deadline_order(jobs, now, share) -> None:
    triage = infeasible_lookaheads(now, jobs, service, share)
    kept = [d for d in jobs if d.commit_deadline_ms is not None and d.rid not in triage.infeasible]
    assert on_time_in_edf_order(now, kept, share)
    for descriptor in jobs:
        if descriptor.commit_deadline_ms is None:
            assert descriptor.rid not in triage.infeasible
        elif descriptor.commit_deadline_ms < now:
            assert descriptor.rid in triage.past_deadline


@settings(max_examples=200, deadline=None)
@given(jobs=jobs_strategy, now=st.floats(0, 100), share=st.floats(0.05, 1.0))
def test_property_as_many_lookaheads_are_kept_as_any_schedule_can_finish_on_time(
    jobs, now, share
) -> None:
    """Brute force over subsets: no set of lookaheads larger than the kept one is feasible."""
    triage = infeasible_lookaheads(now, jobs, service, share)
    candidates = [
        d for d in jobs if d.commit_deadline_ms is not None and d.rid not in triage.past_deadline
    ]
    kept = len(candidates) - len(triage.shed)
    best = max(
        (
            size
            for size in range(len(candidates) + 1)
            for subset in itertools.combinations(candidates, size)
            if on_time_in_edf_order(now, subset, share)
        ),
        default=0,
    )
    assert kept == best

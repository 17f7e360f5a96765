from collections import Counter

import pytest

from lookahead_sdk.router import (
    Forward,
    LeastLoadedStickyPolicy,
    Reject,
    Requeue,
    RoundRobinPolicy,
    SessionAffinityPolicy,
    make_policy,
)
from lookahead_sdk.router.hashring import ConsistentHashRing


def with_backends(policy, *names: str, capacity: int = 1000):
    for name in names:
        policy.add_backend(name, capacity)
    return policy


def test_round_robin_spreads_each_request_over_the_backends() -> None:
    policy = with_backends(RoundRobinPolicy(), "a", "b", "c")
    backends = []
    for step in range(6):
        decision = policy.request_arrived("p", f"r{step}", 10, float(step))
        assert isinstance(decision, Forward)
        backends.append(decision.backend)
        policy.request_finished(f"r{step}", float(step), total_tokens=10 * (step + 1))
    assert backends == ["a", "b", "c", "a", "b", "c"]


def test_session_affinity_keeps_a_program_on_its_hash_backend() -> None:
    policy = with_backends(SessionAffinityPolicy(), "a", "b")
    first = {}
    for index in range(40):
        decision = policy.request_arrived(f"p{index}", f"r{index}", 10, 0.0)
        assert isinstance(decision, Forward)
        first[f"p{index}"] = decision.backend
    assert set(Counter(first.values())) == {"a", "b"}  # both used
    for index in range(40):
        policy.request_finished(f"r{index}", 1.0, total_tokens=20)
    for index in range(40):
        again = policy.request_arrived(f"p{index}", f"s{index}", 5, 2.0)
        assert isinstance(again, Forward) and again.backend == first[f"p{index}"]


def test_session_affinity_moves_only_the_programs_of_a_backend_that_went_down() -> None:
    policy = with_backends(SessionAffinityPolicy(), "a", "b", "c")
    placed = {}
    for index in range(30):
        decision = policy.request_arrived(f"p{index}", f"r{index}", 10, 0.0)
        placed[f"p{index}"] = decision.backend  # type: ignore[union-attr]
        policy.request_finished(f"r{index}", 0.0, total_tokens=10)
    requeued = policy.mark_down("b", 1.0)
    assert {d.program_id for d in requeued if isinstance(d, Requeue)} == {
        p for p, b in placed.items() if b == "b"
    }
    for index in range(30):
        decision = policy.request_arrived(f"p{index}", f"s{index}", 10, 2.0)
        if placed[f"p{index}"] != "b":
            assert decision.backend == placed[f"p{index}"]  # type: ignore[union-attr]
        else:
            assert decision.backend in {"a", "c"}  # type: ignore[union-attr]


def test_least_loaded_sticky_places_by_load_then_sticks() -> None:
    policy = with_backends(LeastLoadedStickyPolicy(), "a", "b")
    assert policy.request_arrived("p1", "r1", 500, 0.0) == Forward("r1", "p1", "a")
    assert policy.request_arrived("p2", "r2", 100, 0.0) == Forward("r2", "p2", "b")
    assert policy.request_arrived("p3", "r3", 100, 0.0) == Forward("r3", "p3", "b")
    policy.release("p1", 1.0)  # a is empty now, p2 and p3 stay on b
    policy.request_finished("r2", 1.0, total_tokens=150)
    assert policy.request_arrived("p2", "r4", 10, 2.0) == Forward("r4", "p2", "b")
    assert policy.request_arrived("p4", "r5", 10, 2.0) == Forward("r5", "p4", "a")


@pytest.mark.parametrize("name", ["round-robin", "session", "least-loaded"])
def test_baselines_never_hold_or_pause_and_refuse_without_backends(name: str) -> None:
    policy = with_backends(make_policy(name), "a", capacity=100)
    decisions = []
    for index in range(20):  # far beyond capacity
        decisions.append(policy.request_arrived(f"p{index}", f"r{index}", 500, float(index)))
    assert all(isinstance(d, Forward) for d in decisions)
    assert policy.tick(100.0) == [] and policy.metrics().pauses == 0
    policy.mark_down("a", 101.0)
    refused = policy.request_arrived("late", "x", 1, 102.0, lookahead="best_effort")
    assert refused == Reject("x", "late", "no_backend", 503)
    assert policy.program("late") is None


def test_the_hash_ring_is_stable_across_instances() -> None:
    rings = []
    for _ in range(2):
        ring = ConsistentHashRing(virtual_nodes=16)
        for name in ("a", "b", "c"):
            ring.add(name)
        rings.append(ring)
    keys = [f"program-{i}" for i in range(50)]
    everything = {"a", "b", "c"}
    assert [rings[0].lookup(k, everything) for k in keys] == [
        rings[1].lookup(k, everything) for k in keys
    ]
    assert rings[0].lookup("x", set()) is None
    with pytest.raises(ValueError, match="virtual_nodes"):
        ConsistentHashRing(0)

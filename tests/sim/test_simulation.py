import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk.scheduling import (
    H100_QWEN3_8B,
    BatchShape,
    HybridConfig,
    LatencyModel,
    PrefillChunk,
)
from lookahead_sdk.sim import (
    ClusterConfig,
    ModelTruth,
    Phase,
    RequestTags,
    SimCluster,
    SimRequest,
    Simulation,
)
from lookahead_sdk.sim.worker import Worker

MODEL = LatencyModel(H100_QWEN3_8B)
BE_TAGS = RequestTags(priority_class="be", is_lookahead=True, lookahead_group_id="g")


def cluster(**config) -> SimCluster:
    return SimCluster(H100_QWEN3_8B, ClusterConfig(**config), truth=ModelTruth(MODEL))


def tokens(seed: int, count: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(50_000) for _ in range(count))


def run(sim_cluster: SimCluster, requests: list[SimRequest]) -> Simulation:
    simulation = Simulation(sim_cluster)
    for request in requests:
        simulation.submit_at(request)
    simulation.run()
    return simulation


def test_lone_request_timeline_follows_the_latency_model() -> None:
    config = HybridConfig(max_batch_tokens=1000, tbt_bound_ms=1e9)
    request = SimRequest("r", tokens(1, 2500), max_new_tokens=3, arrival_ms=10.0)
    run(cluster(hybrid=config), [request])
    chunk_times = [
        MODEL.est_ms(BatchShape((), (PrefillChunk(1000, 0),))),
        MODEL.est_ms(BatchShape((), (PrefillChunk(1000, 1000),))),
        MODEL.est_ms(BatchShape((), (PrefillChunk(500, 2000),))),
    ]
    decode_times = [MODEL.est_ms(BatchShape((2500 + i,), ())) for i in (1, 2)]
    expected = [10.0 + sum(chunk_times)]
    for step in decode_times:
        expected.append(expected[-1] + step)
    assert request.token_times_ms == pytest.approx(expected)
    assert request.phase is Phase.DONE and request.finish_ms == pytest.approx(expected[-1])


def test_second_request_with_the_same_prefix_hits_the_cache() -> None:
    prefix = tokens(2, 4000)
    first = SimRequest("a", prefix, max_new_tokens=0, arrival_ms=0.0, tags=BE_TAGS)
    second = SimRequest("b", (*prefix, *tokens(3, 200)), max_new_tokens=1, arrival_ms=1000.0)
    cold = SimRequest("c", (*tokens(4, 4000), *tokens(3, 200)), max_new_tokens=1, arrival_ms=2000.0)
    run(cluster(), [first, second, cold])
    assert second.cached_tokens == 4000  # 4000 is a whole number of 16-token blocks
    assert cold.cached_tokens == 0
    assert second.first_token_ms - second.arrival_ms < (cold.first_token_ms - cold.arrival_ms) / 5


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    prompt = tokens(5, 64)
    first = SimRequest("a", prompt, max_new_tokens=1, arrival_ms=0.0)
    again = SimRequest("b", prompt, max_new_tokens=1, arrival_ms=500.0)
    run(cluster(), [first, again])
    assert again.cached_tokens == 48  # the last block holds the token that must be computed


def test_requests_wait_for_kv_room_and_the_pool_is_never_overcommitted() -> None:
    sim_cluster = cluster(kv_tokens=6000)
    requests = [
        SimRequest(f"r{i}", tokens(10 + i, 2500), max_new_tokens=50, arrival_ms=0.0)
        for i in range(4)
    ]
    simulation = Simulation(sim_cluster)
    for request in requests:
        simulation.submit_at(request)
    worker = sim_cluster.entry
    max_running = 0
    while not sim_cluster.idle() or simulation._events:
        simulation.run(until_ms=simulation.now_ms + 5.0)
        pool = worker.pool
        assert pool.cached_tokens + pool.reserved_tokens <= pool.capacity_tokens
        max_running = max(max_running, worker.running_count)
    assert max_running == 2  # 2 x (2500 + 50) fits in 6000, 3 do not
    assert all(r.phase is Phase.DONE for r in requests)
    assert worker.stats.kv_blocked > 0


def test_disaggregated_prefill_instance_samples_the_first_token_and_decode_finishes() -> None:
    sim_cluster = cluster(mode="disagg")
    decoded = SimRequest("d", tokens(20, 3000), max_new_tokens=5, arrival_ms=0.0)
    warm = SimRequest("w", tokens(21, 3000), max_new_tokens=0, arrival_ms=0.0, tags=BE_TAGS)
    run(sim_cluster, [decoded, warm])
    assert decoded.generated == 5 and warm.generated == 0
    assert sim_cluster.decode_worker is not None
    assert sim_cluster.decode_worker.stats.iterations == 4  # tokens 2..5
    assert sim_cluster.entry.stats.prefill_tokens["be"] == 3000
    assert warm.phase is Phase.DONE and warm.finish_ms is not None


def test_promotion_schedules_a_lookahead_as_latency_critical() -> None:
    sim_cluster = cluster()
    warm = SimRequest(
        "w", tokens(30, 2000), 0, arrival_ms=0.0,
        tags=RequestTags(priority_class="be", is_lookahead=True, lookahead_group_id="grp"),
    )  # fmt: skip
    sim_cluster.submit(warm)
    assert sim_cluster.promote(lookahead_group_id="grp") == ["w"]
    sim_cluster.start_idle(0.0)
    assert sim_cluster.stats()["lookahead"]["promoted"] == 1
    with pytest.raises(ValueError, match="rid, lookahead_group_id or program_id"):
        sim_cluster.promote()


def test_lookahead_deadlines_are_accounted() -> None:
    sim_cluster = cluster()
    tight = RequestTags(
        priority_class="be", is_lookahead=True, lookahead_group_id="a", commit_deadline_ms=1.0
    )
    loose = RequestTags(
        priority_class="be", is_lookahead=True, lookahead_group_id="b", commit_deadline_ms=60_000.0
    )
    late = SimRequest("late", tokens(40, 6000), 0, arrival_ms=0.0, tags=tight)
    fine = SimRequest("fine", tokens(41, 600), 0, arrival_ms=0.0, tags=loose)
    run(sim_cluster, [late, fine])
    counts = sim_cluster.stats()["lookahead"]
    assert counts["completed"] == 2 and counts["on_time"] == 1 and counts["late"] == 1
    assert counts["late_prefill_tokens"] == 6000
    # The 6000-token warm-up cannot be done within 1 ms: triaged, it waits behind the feasible one
    # although its deadline is earlier.
    assert counts["judged_infeasible"] == 1
    assert fine.finish_ms is not None and late.finish_ms is not None
    assert fine.finish_ms < late.finish_ms


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(["vanilla", "lookahead"]))
def test_property_every_request_completes_with_all_its_tokens(seed, policy) -> None:
    rng = random.Random(seed)
    requests = []
    for i in range(12):
        shared = rng.random() < 0.5
        prompt = (*tokens(seed if shared else seed + i + 1, rng.randint(20, 3000)), i)
        tags = BE_TAGS if rng.random() < 0.4 else RequestTags()
        requests.append(
            SimRequest(f"r{i}", prompt, rng.randint(0, 20), rng.uniform(0, 500), tags=tags)
        )
    sim_cluster = cluster(policy=policy, kv_tokens=20_000)
    run(sim_cluster, requests)
    for request in requests:
        assert request.phase is Phase.DONE
        assert request.generated == request.max_new_tokens
        assert request.token_times_ms == sorted(request.token_times_ms)
        assert all(t >= request.arrival_ms for t in request.token_times_ms)
    pool = sim_cluster.entry.pool
    assert pool.reserved_tokens == 0


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_property_be_chunks_only_run_in_iterations_estimated_within_the_bound(seed) -> None:
    rng = random.Random(seed)
    bound = 50.0
    worker = Worker(
        "colocated",
        truth=ModelTruth(MODEL),
        kv_tokens=400_000,
        policy=cluster().entry.policy,
        estimator=MODEL,
    )
    for i in range(10):
        tags = BE_TAGS if i % 2 else RequestTags()
        worker.submit(
            SimRequest(f"r{i}", tokens(seed + i, rng.randint(100, 8000)), 30, 0.0, tags=tags)
        )
    now = 0.0
    while worker.has_work():
        iteration = worker.start(now)
        assert iteration is not None
        if any(r.tags.priority_class == "be" for r, _ in iteration.chunks):
            assert iteration.est_ms is not None and iteration.est_ms <= bound + 1e-9
        now = iteration.end_ms
        worker.finish(now)

"""Prefix-cache chains built chunk by chunk, reservations that
cannot fit, best-effort work taking KV from a refused latency-critical request, lookaheads sent
as promoted, and OpenAI-compatible request fields."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.scheduling import (
    H100_QWEN3_8B,
    HybridConfig,
    HybridPolicy,
    LatencyModel,
    SlackAwarePolicy,
)
from lookahead_sdk.sim import ClusterConfig, ModelTruth, SimCluster, SimRequest
from lookahead_sdk.sim.prefix_cache import KvPool, block_names
from lookahead_sdk.sim.server import SimServeConfig, create_app
from lookahead_sdk.sim.worker import Worker

MODEL = LatencyModel(H100_QWEN3_8B)


def run_until_idle(worker: Worker) -> None:
    now = 0.0
    while worker.has_work():
        iteration = worker.start(now)
        assert iteration is not None
        now = iteration.end_ms
        worker.finish(now)


def test_a_prompt_prefilled_in_chunks_is_cached_as_one_chain() -> None:
    worker = Worker(
        "colocated",
        truth=ModelTruth(MODEL),
        kv_tokens=1000,
        block_tokens=16,
        policy=HybridPolicy(MODEL, HybridConfig(max_batch_tokens=16, min_lc_chunk_tokens=16)),
        estimator=MODEL,
    )
    request = SimRequest(rid="a", prompt=list(range(48)), max_new_tokens=0, arrival_ms=0.0)
    worker.submit(request)
    run_until_idle(worker)  # three 16-token chunks
    assert worker.pool.match(request.names) == 3
    # Evicting one block must take the leaf, so the prefix stays matchable.
    assert worker.pool.reserve(worker.pool.free_tokens + 16)
    assert worker.pool.match(request.names) == 2
    assert worker.pool.cached_tokens == 32


def test_a_reservation_that_cannot_fit_evicts_nothing() -> None:
    pool = KvPool(1000, 16)
    names = block_names(list(range(320)), 16)
    pool.insert(names)
    assert pool.reserve(600)
    assert not pool.reserve(500)  # 80 free + 320 evictable < 500
    assert pool.cached_tokens == 320 and pool.evicted_tokens == 0
    assert pool.match(names) == 20
    assert pool.reserve(400)  # 80 free + 320 evictable: fits by evicting all of it
    assert pool.cached_tokens == 0 and pool.free_tokens == 0


def test_locked_blocks_are_not_counted_as_evictable() -> None:
    pool = KvPool(64, 16)
    names = block_names(list(range(64)), 16)
    pool.insert(names)
    pool.lock(names[:2])
    pool.lock(names[:1])
    assert pool.evictable_tokens == 32
    pool.unlock(names[:2])
    assert pool.evictable_tokens == 48
    assert not pool.reserve(64) and pool.cached_tokens == 64


def lookahead(rid: str, tokens: int, **fields: object) -> SimRequest:
    return SimRequest(
        rid=rid,
        prompt=list(range(9000, 9000 + tokens)),
        max_new_tokens=0,
        arrival_ms=0.0,
        tags=RequestTags(priority_class="be", is_lookahead=True, lookahead_group_id="g", **fields),
    )


@pytest.mark.parametrize("role", ["colocated", "prefill"])
def test_best_effort_never_takes_kv_a_latency_critical_request_was_refused(role: str) -> None:
    policy = (
        HybridPolicy(MODEL, HybridConfig(be_beside_lc_prefill=True))
        if role == "colocated"
        else SlackAwarePolicy(MODEL)
    )
    worker = Worker(role, truth=ModelTruth(MODEL), kv_tokens=2000, block_tokens=16, policy=policy)
    assert worker.pool.reserve(1200)  # KV held by running work: 800 free
    lc = SimRequest(rid="lc", prompt=list(range(5000, 5900)), max_new_tokens=0, arrival_ms=0.0)
    worker.submit(lc)  # needs 900
    worker.submit(lookahead("be", 700))  # would fit in the 800
    assert worker.start(0.0) is None
    assert worker.stats.kv_blocked == 1
    assert worker.pool.free_tokens == 800
    assert worker.stats.deferred[("be", "lc_kv_blocked")] == 1
    worker.pool.release(1200)  # the running work finished: both fit now
    iteration = worker.start(0.0)
    assert iteration is not None
    assert {request.rid for request, _ in iteration.chunks} == {"lc", "be"}


def test_a_lookahead_sent_as_promoted_is_scheduled_latency_critical() -> None:
    cluster = SimCluster(H100_QWEN3_8B, ClusterConfig(), truth=ModelTruth(MODEL))
    tags = RequestTags(is_lookahead=True, lookahead_group_id="G").promoted()
    promoted = SimRequest(rid="p", prompt=list(range(4000)), max_new_tokens=0, arrival_ms=0.0)
    promoted.tags = tags
    cluster.submit(promoted)
    cluster.submit(
        SimRequest(rid="lc", prompt=list(range(10_000, 10_100)), max_new_tokens=4, arrival_ms=0.0)
    )
    assert tags.group_to_promote == "G"
    assert cluster.promote(lookahead_group_id="G") == ["p"]
    iteration = cluster.entry.start(0.0)
    assert iteration is not None
    assert {request.rid for request, _ in iteration.chunks} == {"p", "lc"}
    assert "p" in cluster.entry.stats.promoted


@pytest.fixture
def client() -> Iterator[TestClient]:
    config = SimServeConfig(
        profile=H100_QWEN3_8B,
        cluster=ClusterConfig(kv_tokens=100_000),
        time_scale=0.01,
        truth=ModelTruth(MODEL),
        default_max_tokens=8,
    )
    with TestClient(create_app(config)) as http:
        yield http


def test_tokenize_refuses_a_non_boolean_add_generation_prompt(client: TestClient) -> None:
    messages = [{"role": "user", "content": "hi"}]
    plain = client.post("/tokenize", json={"messages": messages}).json()["count"]
    open_turn = client.post(
        "/tokenize", json={"messages": messages, "add_generation_prompt": False}
    ).json()["count"]
    assert open_turn < plain
    reply = client.post("/tokenize", json={"messages": messages, "add_generation_prompt": "false"})
    assert reply.status_code == 400 and "add_generation_prompt" in reply.text


def test_a_null_max_completion_tokens_leaves_max_tokens_in_force(client: TestClient) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "max_completion_tokens": None,
    }
    reply = client.post("/v1/chat/completions", json=body).json()
    assert reply["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("value", [False, 0.0])
def test_chat_max_tokens_must_be_an_int(client: TestClient, value: object) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": value}
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 400 and "max_tokens" in reply.text

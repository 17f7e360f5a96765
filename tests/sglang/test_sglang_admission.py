"""The plugin changes which requests enter SGLang's prefill batch: the real
`Scheduler._get_new_batch_prefill_raw` with real `Req`s, `PrefillAdder`, `SchedulePolicy`,
`RadixCache` and CPU memory pools, with and without the plugin's hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_harness import SchedulerHarness, batch_chunks, decoding_reqs, make_req

from lookahead_sdk.scheduling import (
    BatchShape,
    LatencyModel,
    PrefillChunk,
    load_profile,
)
from lookahead_sdk.sglang_plugin.state import plugin_state

MODEL = LatencyModel(load_profile("h100-qwen3-8b"))
# The paper's Algorithm 2: BE fills a batch up to the bound, beside LC prefill too.
PAPER_FILL: dict[str, Any] = {"be_step_ms": None, "be_beside_lc_prefill": True}


def lookahead(group: str, **extra: Any) -> dict[str, Any]:
    return {"priority_class": "be", "is_lookahead": True, "lookahead_group_id": group, **extra}


def est_ms(batch: Any, decode_contexts: list[int]) -> float:
    """Eq. 1 over what SGLang actually put in the batch, plus the running decodes."""
    chunks = [PrefillChunk(new, prefix) for new, prefix in batch_chunks(batch).values()]
    return MODEL.est_ms(BatchShape(tuple(decode_contexts), tuple(chunks)))


def decodes_taking(ms: float) -> list[int]:
    """One running decode whose context makes the decode-only batch take about `ms` (Eq. 1)."""
    profile = MODEL.profile
    return [round((ms - MODEL.gemm_ms(1)) / profile.alpha_decode_ms)]


def test_without_the_plugin_sglang_admits_best_effort_work(
    plugin_settings: Callable[..., Any],
) -> None:
    """Baseline: stock SGLang fills the batch first-come-first-served, lookahead or not."""
    harness = SchedulerHarness()
    harness.enqueue(make_req("be", 3000, lookahead("g")), make_req("lc", 500))
    batch, _ = harness.prefill_pass(running=decoding_reqs(decodes_taking(45.0)))
    assert set(batch_chunks(batch)) == {"be", "lc"}


def test_tight_tbt_bound_defers_best_effort_and_admits_latency_critical(
    plugin_hooks: None, plugin_settings: Callable[..., Any]
) -> None:
    plugin_settings(policy="hybrid", tbt_bound_ms=40.0, **PAPER_FILL)
    decodes = decodes_taking(45.0)
    harness = SchedulerHarness()
    harness.enqueue(make_req("be", 3000, lookahead("g")), make_req("lc", 200))

    batch, _ = harness.prefill_pass(running=decoding_reqs(decodes))

    # Decodes alone exceed the bound: LC still progresses (the policy's minimum LC chunk), BE waits.
    assert batch_chunks(batch) == {"lc": (200, 0)}
    assert harness.waiting_rids() == ["be"]
    assert plugin_state().stats.deferred["be:over_bound"] == 1


def test_slack_admits_best_effort_within_the_bound(
    plugin_hooks: None, plugin_settings: Callable[..., Any]
) -> None:
    """The paper's fill: BE rides in the LC request's batch, in the slack the bound leaves."""
    bound = 50.0
    plugin_settings(policy="hybrid", tbt_bound_ms=bound, be_step_ms=None, be_beside_lc_prefill=True)
    harness = SchedulerHarness()
    harness.enqueue(make_req("lc", 400), make_req("be", 6000, lookahead("g")))

    batch, _ = harness.prefill_pass()

    chunks = batch_chunks(batch)
    assert chunks["lc"][0] == 400
    assert 0 < chunks["be"][0] < 6000  # a chunk, sized to the slack
    assert est_ms(batch, []) <= bound
    assert harness.scheduler.chunked_req.rid == "be"


def test_best_effort_waits_out_the_batch_that_prefills_an_agents_turn(
    plugin_hooks: None, plugin_settings: Callable[..., Any]
) -> None:
    """By default the LC request's batch holds no BE chunk (its first token waits for none);
    the warm-up starts in the next batch, beside the new reply's decode."""
    plugin_settings(policy="hybrid", tbt_bound_ms=50.0)
    harness = SchedulerHarness()
    harness.enqueue(make_req("lc", 400), make_req("be", 6000, lookahead("g")))

    batch, _ = harness.prefill_pass()

    assert set(batch_chunks(batch)) == {"lc"}
    assert harness.waiting_rids() == ["be"]
    assert plugin_state().stats.deferred["be:beside_lc_prefill"] == 1
    _between_passes(harness)
    batch, _ = harness.prefill_pass(running=decoding_reqs([401]))
    assert 0 < batch_chunks(batch)["be"][0] < 6000


def test_best_effort_alone_runs_in_batches_of_the_be_step(
    plugin_hooks: None, plugin_settings: Callable[..., Any]
) -> None:
    """An idle engine prefills a warm-up in batches of about `be_step_ms`, not of the TBT bound,
    so an agent's request arriving meanwhile waits at most that long."""
    sizes = {}
    for step in (10.0, None):
        plugin_settings(policy="hybrid", tbt_bound_ms=50.0, be_step_ms=step)
        harness = SchedulerHarness(chunked_prefill_size=8192)
        harness.enqueue(make_req("be", 6000, lookahead("g")))
        batch, _ = harness.prefill_pass()
        sizes[step] = batch_chunks(batch)["be"][0]
        assert 0 < sizes[step] < 6000
        assert est_ms(batch, []) <= (step or 50.0) + 1e-9
    assert sizes[10.0] < sizes[None]


def test_latency_critical_goes_first_even_when_it_arrived_last(
    plugin_hooks: None, plugin_settings: Callable[..., Any]
) -> None:
    plugin_settings(policy="hybrid", tbt_bound_ms=1000.0)
    harness = SchedulerHarness(chunked_prefill_size=2048)
    harness.enqueue(make_req("be", 2048, lookahead("g")), make_req("lc", 2048))

    batch, _ = harness.prefill_pass()

    assert set(batch_chunks(batch)) == {"lc"}
    assert harness.waiting_rids() == ["be"]


def test_promoted_group_is_admitted_as_latency_critical(
    plugin_hooks: None, plugin_settings: Callable[..., Any]
) -> None:
    bound = 40.0
    plugin_settings(policy="hybrid", tbt_bound_ms=bound)
    harness = SchedulerHarness()
    harness.enqueue(
        make_req("other", 3000, lookahead("x")), make_req("warmup", 3000, lookahead("p:sum:s7"))
    )
    harness.enqueue(make_req("promote", 1, {"promote_group_id": "p:sum:s7"}, max_new_tokens=0))

    decodes = decodes_taking(bound - 5.0)
    batch, _ = harness.prefill_pass(running=decoding_reqs(decodes))

    chunks = batch_chunks(batch)
    assert "warmup" in chunks and "other" not in chunks
    assert est_ms(batch, decodes) <= bound
    assert plugin_state().stats.promoted_admissions == 1
    assert "p:sum:s7" in plugin_state().promoted


def test_lookahead_sent_as_lc_promotes_its_group(
    plugin_hooks: None, plugin_settings: Callable[..., Any]
) -> None:
    """The SDK's `RequestTags.promoted()` keeps is_lookahead and switches priority_class to lc:
    that request and the rest of its group are scheduled as LC."""
    bound = 40.0
    plugin_settings(policy="hybrid", tbt_bound_ms=bound)
    harness = SchedulerHarness()
    harness.enqueue(
        make_req("other", 3000, lookahead("x")), make_req("chunk-1", 600, lookahead("g"))
    )
    harness.enqueue(make_req("commit", 300, lookahead("g", priority_class="lc")))

    batch, _ = harness.prefill_pass(running=decoding_reqs(decodes_taking(bound - 5.0)))

    assert set(batch_chunks(batch)) >= {"chunk-1", "commit"}
    assert plugin_state().stats.promoted_admissions == 2


def _between_passes(harness: SchedulerHarness) -> None:
    """What `Scheduler.get_next_batch_to_run` does with the chunked request before the next
    prefill pass: publish the KV its last chunk computed (a parked chunk computed none)."""
    chunked = harness.scheduler.chunked_req
    if chunked is not None and chunked.extend_end > chunked.prefix_len:
        harness.scheduler.stash_chunked_request(chunked)


def test_best_effort_chunk_is_parked_for_an_lc_backlog_and_resumed_after(
    plugin_hooks: None, plugin_settings: Callable[..., Any]
) -> None:
    plugin_settings(policy="hybrid", tbt_bound_ms=1000.0, **PAPER_FILL)
    harness = SchedulerHarness(chunked_prefill_size=4096)
    harness.enqueue(make_req("be", 10000, lookahead("g")))
    batch, _ = harness.prefill_pass()
    assert batch_chunks(batch)["be"] == (4096, 0)
    _between_passes(harness)

    # Two LC requests, room for one: LC work is left over, so the BE chunk yields.
    harness.enqueue(make_req("lc-1", 4096), make_req("lc-2", 3000))
    batch, _ = harness.prefill_pass()
    assert set(batch_chunks(batch)) == {"lc-1"}
    assert harness.scheduler.chunked_req.rid == "be"  # parked, keeping its 4096 cached tokens
    assert plugin_state().stats.parked_chunks == 1

    _between_passes(harness)
    batch, _ = harness.prefill_pass()  # lc-2 fits now; the BE chunk continues in the slack
    chunks = batch_chunks(batch)
    assert chunks["lc-2"] == (3000, 0)
    assert chunks["be"][1] == 4096 and chunks["be"][0] > 0


def test_lc_that_needs_the_parked_chunk_slot_forces_the_chunk_to_finish(
    plugin_hooks: None, plugin_settings: Callable[..., Any]
) -> None:
    """SGLang tracks one partly prefilled request: an LC request that must be cut while a BE
    chunk holds the slot waits until that chunk completes (no deadlock, no second chunk)."""
    plugin_settings(policy="hybrid", tbt_bound_ms=1000.0, **PAPER_FILL)
    harness = SchedulerHarness(chunked_prefill_size=4096)
    harness.enqueue(make_req("be", 6000, lookahead("g")))
    harness.prefill_pass()
    _between_passes(harness)

    harness.enqueue(make_req("lc-1", 3000), make_req("lc-2", 3000))
    batch, _ = harness.prefill_pass()
    assert set(batch_chunks(batch)) == {"lc-1"}
    assert plugin_state().stats.forced_resumes == 1
    _between_passes(harness)

    batch, _ = harness.prefill_pass()
    assert batch_chunks(batch)["be"] == (6000 - 4096, 4096)  # the rest of the BE prompt
    assert harness.scheduler.chunked_req is None or harness.scheduler.chunked_req.rid != "be"


queues = st.fixed_dictionaries(
    {
        "lc": st.lists(st.integers(1, 3000), max_size=3),
        "be": st.lists(st.integers(1, 6000), min_size=1, max_size=3),
        "decode_ms": st.floats(0.0, 60.0),
        "bound_ms": st.floats(10.0, 80.0),
    }
)


def _run(plan: dict[str, Any], *, with_be: bool) -> tuple[Any, list[int]]:
    harness = SchedulerHarness(chunked_prefill_size=8192)
    reqs = [make_req(f"lc-{i}", size) for i, size in enumerate(plan["lc"])]
    if with_be:
        reqs += [make_req(f"be-{i}", size, lookahead(f"g{i}")) for i, size in enumerate(plan["be"])]
    harness.enqueue(*reqs)
    decodes = decodes_taking(plan["decode_ms"]) if plan["decode_ms"] > 1.0 else []
    batch, _ = harness.prefill_pass(running=decoding_reqs(decodes))
    return batch, decodes


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(queues)
def test_best_effort_never_pushes_the_batch_over_the_bound_nor_displaces_lc(
    plugin_hooks: None, plugin_settings: Callable[..., Any], plan: dict[str, Any]
) -> None:
    plugin_settings(policy="hybrid", tbt_bound_ms=plan["bound_ms"])
    batch, decodes = _run(plan, with_be=True)
    chunks = batch_chunks(batch)
    if any(rid.startswith("be-") for rid in chunks):
        assert est_ms(batch, decodes) <= plan["bound_ms"] + 1e-9

    plugin_settings(policy="hybrid", tbt_bound_ms=plan["bound_ms"])
    lc_only, _ = _run(plan, with_be=False)
    lc_chunks = {rid: chunk for rid, chunk in chunks.items() if rid.startswith("lc-")}
    assert lc_chunks == batch_chunks(lc_only)

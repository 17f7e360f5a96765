import dataclasses
import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk.scheduling import (
    H100_QWEN3_8B,
    Admit,
    BatchFeatures,
    Defer,
    DisaggConfig,
    HybridConfig,
    HybridPolicy,
    LatencyModel,
    RequestDescriptor,
    SlackAwarePolicy,
    VanillaConfig,
    VanillaPolicy,
)

MODEL = LatencyModel(H100_QWEN3_8B)
BOUND_MS = 50.0
EPS = 1e-9
PAPER_FILL = HybridConfig(tbt_bound_ms=BOUND_MS, be_step_ms=None, be_beside_lc_prefill=True)


def lc(
    rid: str, remaining: int, *, prefix: int = 0, arrival: float = 0.0, **kw
) -> RequestDescriptor:
    return RequestDescriptor(
        rid=rid,
        priority_class="lc",
        arrival_ms=arrival,
        cached_prefix_tokens=prefix,
        remaining_prefill_tokens=remaining,
        **kw,
    )


def be(
    rid: str, remaining: int, *, prefix: int = 0, arrival: float = 0.0, **kw
) -> RequestDescriptor:
    return RequestDescriptor(
        rid=rid,
        priority_class="be",
        is_lookahead=True,
        arrival_ms=arrival,
        cached_prefix_tokens=prefix,
        remaining_prefill_tokens=remaining,
        **kw,
    )


def estimate(decode_contexts, admitted) -> float:
    """Est of decodes + admitted chunks, recomputed from scratch (independent of the round)."""
    features = BatchFeatures().with_decodes(decode_contexts)
    for descriptor, tokens in admitted:
        features = features.with_chunk(tokens, descriptor.cached_prefix_tokens)
    return MODEL.est_features_ms(features)


def admitted_pairs(plan, waiting):
    by_rid = {d.rid: d for d in waiting}
    return [(by_rid[rid], tokens) for rid, tokens in plan.admitted_tokens().items()]


# --- co-located hybrid batching ----------------------------------------------------------------


def test_hybrid_fills_lc_first_then_be_under_the_tbt_bound() -> None:
    """The paper's Algorithm 2 (no BE step cap, BE beside LC prefill): BE fills the batch up to
    the bound."""
    policy = HybridPolicy(MODEL, PAPER_FILL)
    decodes = [4000] * 4
    waiting = [be("be1", 6000, arrival=0.0), lc("lc1", 300, prefix=2000, arrival=5.0)]
    plan = policy.plan(10.0, decodes, waiting)
    assert plan.decisions["lc1"] == Admit(300, "lc")
    be_decision = plan.decisions["be1"]
    assert isinstance(be_decision, Admit) and 0 < be_decision.tokens < 6000
    total = estimate(decodes, admitted_pairs(plan, waiting))
    assert total <= BOUND_MS + EPS
    # One more BE token would have crossed the bound: the chunk is as large as allowed.
    more = [(waiting[1], 300), (waiting[0], be_decision.tokens + 1)]
    assert estimate(decodes, more) > BOUND_MS
    assert list(plan.decisions) == ["lc1", "be1"]  # queue order: LC before BE


def test_hybrid_be_adds_at_most_be_step_ms_to_a_batch() -> None:
    """The default cap: BE chunks add at most `be_step_ms` to what the decodes take, so a request
    arriving mid-batch waits at most that long for best-effort work."""
    step = HybridConfig().be_step_ms
    assert step is not None
    decodes = [4000] * 4
    waiting = [be("be1", 6000)]
    capped = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=BOUND_MS)).plan(10.0, decodes, waiting)
    uncapped = HybridPolicy(MODEL, PAPER_FILL).plan(10.0, decodes, waiting)
    chunk = capped.decisions["be1"]
    assert isinstance(chunk, Admit) and chunk.scheduled_as == "be"
    assert 0 < chunk.tokens < uncapped.admitted_tokens()["be1"]
    decode_ms = estimate(decodes, [])
    assert estimate(decodes, [(waiting[0], chunk.tokens)]) <= decode_ms + step + EPS
    assert estimate(decodes, [(waiting[0], chunk.tokens + 1)]) > decode_ms + step


def test_hybrid_keeps_be_out_of_a_batch_that_prefills_lc_work() -> None:
    """By default an LC request's first token never waits for BE work in its own batch: BE runs
    in the batches around it (beside decodes), not beside LC prefill; the paper's fill mixes
    them. LC's own chunk is the same either way."""
    decodes = [4000] * 4
    waiting = [be("be1", 6000, arrival=0.0), lc("lc1", 300, prefix=2000, arrival=5.0)]
    default = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=BOUND_MS)).plan(10.0, decodes, waiting)
    paper = HybridPolicy(MODEL, PAPER_FILL).plan(10.0, decodes, waiting)
    assert default.decisions["lc1"] == paper.decisions["lc1"] == Admit(300, "lc")
    assert default.decisions["be1"] == Defer("beside_lc_prefill")
    assert isinstance(paper.decisions["be1"], Admit)
    # Next round, the LC request decoding: BE goes in beside the decodes.
    after = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=BOUND_MS)).plan(
        20.0, [*decodes, 2300], [waiting[0]]
    )
    assert isinstance(after.decisions["be1"], Admit)


def test_hybrid_best_effort_alone_runs_in_batches_of_at_most_be_step_ms() -> None:
    """With nothing foreground in the engine a warm-up runs in batches of about `be_step_ms`, not
    of the TBT bound: an LC request arriving during one waits at most that long."""
    config = HybridConfig(tbt_bound_ms=BOUND_MS, be_step_ms=12.0)
    plan = HybridPolicy(MODEL, config).plan(0.0, [], [be("warm", 8000, prefix=1000)])
    chunk = plan.decisions["warm"]
    assert isinstance(chunk, Admit) and 0 < chunk.tokens < 8000
    assert plan.est_ms is not None and plan.est_ms <= 12.0 + EPS
    assert MODEL.est_features_ms(BatchFeatures().with_chunk(chunk.tokens + 1, 1000)) > 12.0


def test_a_promoted_lookahead_is_not_held_to_the_be_step() -> None:
    """A promoted lookahead is LC work: it fills up to the TBT bound like any LC chunk, and the
    other BE work stays out of its batch."""
    config = HybridConfig(tbt_bound_ms=BOUND_MS, be_step_ms=5.0)
    waiting = [be("warm", 2000, promoted=True), be("other", 8000)]
    plan = HybridPolicy(MODEL, config).plan(0.0, [], waiting)
    assert plan.decisions["warm"] == Admit(2000, "lc")
    assert plan.est_ms is not None and 5.0 < plan.est_ms <= BOUND_MS + EPS
    assert plan.decisions["other"] == Defer("beside_lc_prefill")


def test_lc_backlog_preempts_be_and_pauses_a_chunked_be_request() -> None:
    policy = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=BOUND_MS))
    waiting = [
        be("be-running", 4000, prefix=3000, in_progress=True),
        lc("lc-long", 20_000, prefix=8000),
    ]
    plan = policy.plan(0.0, [2000] * 2, waiting)
    lc_decision = plan.decisions["lc-long"]
    assert isinstance(lc_decision, Admit) and lc_decision.tokens < 20_000
    assert plan.lc_backlog
    assert plan.decisions["be-running"] == Defer("lc_backlog")
    assert plan.preempted == ("be-running",)


def test_lc_progresses_even_when_decodes_alone_exceed_the_bound() -> None:
    config = HybridConfig(tbt_bound_ms=BOUND_MS, min_lc_chunk_tokens=128)
    decodes = [30_000] * 4  # about 78 ms of decode attention alone
    assert estimate(decodes, []) > BOUND_MS
    plan = HybridPolicy(MODEL, config).plan(0.0, decodes, [lc("a", 1000), be("b", 1000)])
    assert plan.decisions["a"] == Admit(128, "lc")
    assert isinstance(plan.decisions["b"], Defer)


def test_lookahead_near_its_commit_deadline_is_promoted_to_lc() -> None:
    config = HybridConfig(tbt_bound_ms=BOUND_MS, promote_within_ms=200.0)
    waiting = [
        be("soon", 500, commit_deadline_ms=1100.0, arrival=0.0),
        be("later", 500, commit_deadline_ms=5000.0, arrival=0.0),
        be("flagged", 500, promoted=True, arrival=0.0),
    ]
    admission = HybridPolicy(MODEL, config).begin_round(1000.0, [], waiting)
    assert [admission.scheduled_class(d) for d in waiting] == ["lc", "be", "lc"]
    assert [d.rid for d in admission.ordered(waiting)][:2] == ["soon", "flagged"]
    decisions = {d.rid: admission.offer(d) for d in admission.ordered(waiting)}
    assert decisions["soon"] == Admit(500, "lc") and decisions["flagged"] == Admit(500, "lc")
    assert set(admission.promoted) == {"soon", "flagged"}


def test_be_queue_is_earliest_deadline_first() -> None:
    waiting = [
        be("no-deadline", 10, arrival=0.0),
        be("late", 10, commit_deadline_ms=9000.0, arrival=1.0),
        be("early", 10, commit_deadline_ms=4000.0, arrival=2.0),
    ]
    admission = HybridPolicy(MODEL).begin_round(0.0, [], waiting)
    assert [d.rid for d in admission.ordered(waiting)] == ["early", "late", "no-deadline"]


def test_a_lookahead_past_its_deadline_never_goes_ahead_of_one_that_can_be_on_time() -> None:
    """Plain EDF would serve the missed deadline first and make the next one late too."""
    waiting = [
        be("missed", 4000, commit_deadline_ms=900.0),
        be("feasible", 4000, commit_deadline_ms=5000.0),
    ]
    admission = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=BOUND_MS)).begin_round(
        1000.0, [], waiting
    )
    assert [d.rid for d in admission.ordered(waiting)] == ["feasible", "missed"]
    assert admission.infeasible == {"missed"}
    decisions = {d.rid: admission.offer(d) for d in admission.ordered(waiting)}
    assert isinstance(decisions["feasible"], Admit)
    assert admission.plan().infeasible == ("missed",)


def test_a_lookahead_that_cannot_make_its_deadline_is_neither_promoted_nor_ahead() -> None:
    config = HybridConfig(tbt_bound_ms=BOUND_MS, promote_within_ms=500.0)
    alone_ms = MODEL.est_features_ms(BatchFeatures().with_chunk(8000, 0))
    assert alone_ms > 100.0  # far more than the 100 ms left before its deadline
    waiting = [
        be("hopeless", 8000, commit_deadline_ms=1100.0),
        be("close", 200, commit_deadline_ms=1300.0),
        be("feasible", 2000, commit_deadline_ms=9000.0),
    ]
    admission = HybridPolicy(MODEL, config).begin_round(1000.0, [], waiting)
    assert admission.scheduled_class(waiting[0]) == "be"
    assert admission.scheduled_class(waiting[1]) == "lc"  # due soon and can make it: promoted
    assert [d.rid for d in admission.ordered(waiting)] == ["close", "feasible", "hopeless"]


def test_settle_returns_unused_room_to_later_be_offers() -> None:
    policy = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=BOUND_MS, max_batch_tokens=4096))
    first, second = be("first", 4096), be("second", 4096)
    admission = policy.begin_round(0.0, [], [first, second])
    decision = admission.offer(first)
    assert isinstance(decision, Admit)
    assert admission.features.forward_tokens == decision.tokens
    admission.settle("first", 100)  # the engine could only fit 100 tokens
    assert admission.features.forward_tokens == 100
    assert isinstance(admission.offer(second), Admit)
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        admission.settle("first", 101)
    with pytest.raises(ValueError, match="already offered"):
        admission.offer(first)


def test_settle_to_zero_records_an_engine_decline() -> None:
    admission = HybridPolicy(MODEL).begin_round(0.0, [], [lc("a", 10)])
    admission.offer(lc("a", 10))
    admission.settle("a", 0)
    assert admission.plan().decisions["a"] == Defer("engine_declined")
    assert admission.features.forward_tokens == 0


def test_token_budget_caps_the_batch() -> None:
    policy = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=1e9, max_batch_tokens=1000))
    plan = policy.plan(0.0, [10] * 100, [lc("a", 800), lc("b", 800)])
    assert plan.decisions["a"] == Admit(800, "lc")
    assert plan.decisions["b"] == Admit(100, "lc")
    assert plan.features.forward_tokens == 1000


# --- disaggregated slack-aware admission -------------------------------------------------------


def test_slack_budget_is_min_lc_slack_after_estimated_prefill_ahead() -> None:
    config = DisaggConfig(slo_ttft_ms=500.0)
    policy = SlackAwarePolicy(MODEL, config)
    first, second = lc("a", 2000, arrival=0.0), lc("b", 2000, arrival=100.0)
    single = MODEL.est_features_ms(BatchFeatures().with_chunk(2000, 0))
    now = 200.0
    expected = min(500.0 - now - single, 600.0 - now - 2 * single)
    assert policy.lc_slack_budget_ms(now, [first, second]) == pytest.approx(max(0.0, expected))


def test_no_slack_means_no_be_work() -> None:
    policy = SlackAwarePolicy(MODEL, DisaggConfig(slo_ttft_ms=500.0))
    late = lc("late", 100, arrival=0.0)  # waited 600 ms already: slack < 0
    plan = policy.plan(600.0, [], [late, be("x", 100, in_progress=True)])
    assert plan.decisions["late"] == Admit(100, "lc")
    assert plan.decisions["x"] == Defer("no_slack")
    assert plan.preempted == ("x",)


def test_be_adds_at_most_the_budget_to_the_prefill_batch() -> None:
    policy = SlackAwarePolicy(MODEL, DisaggConfig(slo_ttft_ms=500.0))
    waiting = [lc("a", 1000, arrival=0.0), be("x", 16_000, prefix=10_000)]
    plan = policy.plan(100.0, [], waiting)
    budget = policy.lc_slack_budget_ms(100.0, waiting[:1])
    lc_only = estimate([], [(waiting[0], 1000)])
    with_be = estimate([], admitted_pairs(plan, waiting))
    assert isinstance(plan.decisions["x"], Admit)
    assert with_be - lc_only <= budget + EPS


def test_idle_prefill_instance_bounds_be_batches_by_idle_budget() -> None:
    policy = SlackAwarePolicy(MODEL, DisaggConfig(idle_be_budget_ms=30.0))
    plan = policy.plan(0.0, [], [be("x", 16_000, prefix=10_000)])
    assert plan.est_ms is not None and 0 < plan.est_ms <= 30.0 + EPS


# --- vanilla baseline -------------------------------------------------------------------------


def test_vanilla_is_class_blind_fcfs_under_a_token_budget() -> None:
    policy = VanillaPolicy(VanillaConfig(max_batch_tokens=5000))
    waiting = [lc("lc-late", 1000, arrival=5.0), be("be-early", 4500, arrival=1.0)]
    plan = policy.plan(10.0, [], waiting)
    assert list(plan.decisions) == ["be-early", "lc-late"]
    assert plan.decisions["be-early"] == Admit(4500, "lc")
    assert plan.decisions["lc-late"] == Admit(500, "lc")


# --- input validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"priority_class": "urgent"}, "priority_class"),
        ({"priority_class": "lc", "is_lookahead": True}, "priority_class"),
        ({"remaining_prefill_tokens": -1}, "remaining_prefill_tokens"),
        ({"cached_prefix_tokens": 1.5}, "cached_prefix_tokens"),
        ({"arrival_ms": float("nan")}, "arrival_ms"),
        ({"slo_ttft_ms": 0.0}, "slo_ttft_ms"),
        ({"rid": ""}, "rid"),
    ],
)
def test_descriptor_validation_names_the_field(kwargs, field) -> None:
    base = {
        "rid": "r",
        "priority_class": "be",
        "arrival_ms": 0.0,
        "cached_prefix_tokens": 0,
        "remaining_prefill_tokens": 1,
    }
    with pytest.raises(ValueError, match=field):
        RequestDescriptor(**{**base, **kwargs})


def test_round_inputs_are_validated() -> None:
    policy = HybridPolicy(MODEL)
    with pytest.raises(ValueError, match=r"waiting\[1\]\.rid"):
        policy.plan(0.0, [], [lc("a", 1), lc("a", 2)])
    with pytest.raises(ValueError, match=r"decode_contexts\[0\]"):
        policy.plan(0.0, [-1], [])
    with pytest.raises(ValueError, match="tbt_bound_ms"):
        HybridConfig(tbt_bound_ms=0)
    with pytest.raises(ValueError, match="be_step_ms"):
        HybridConfig(be_step_ms=0)
    with pytest.raises(ValueError, match="be_beside_lc_prefill"):
        HybridConfig(be_beside_lc_prefill="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_batch_tokens"):
        DisaggConfig(max_batch_tokens=0)


# --- properties -------------------------------------------------------------------------------


def descriptors(max_prefix: int, max_remaining: int):
    return st.builds(
        lambda cls, arrival, prefix, remaining, deadline, promoted, in_progress: RequestDescriptor(
            rid="placeholder",  # replaced by a unique id in `scenarios`
            priority_class=cls,
            is_lookahead=cls == "be",
            arrival_ms=arrival,
            cached_prefix_tokens=prefix,
            remaining_prefill_tokens=remaining,
            commit_deadline_ms=deadline if cls == "be" else None,
            promoted=promoted and cls == "be",
            in_progress=in_progress,
        ),
        cls=st.sampled_from(["lc", "be"]),
        arrival=st.floats(0, 1000),
        prefix=st.integers(0, max_prefix),
        remaining=st.integers(0, max_remaining),
        deadline=st.one_of(st.none(), st.floats(0, 20_000)),
        promoted=st.booleans(),
        in_progress=st.booleans(),
    )


def scenarios(*, max_decodes: int, max_context: int, max_prefix: int, max_remaining: int):
    """Round inputs; the small variant leaves room for BE in most examples, the large one
    mostly exercises LC backlog and exhausted budgets."""
    return st.fixed_dictionaries(
        {
            "now": st.floats(0, 3000),
            "decodes": st.lists(st.integers(0, max_context), max_size=max_decodes),
            "waiting": st.lists(descriptors(max_prefix, max_remaining), max_size=8).map(
                lambda items: [dataclasses.replace(d, rid=f"r{i}") for i, d in enumerate(items)]
            ),
            "bound": st.floats(5, 200),
            "be_step": st.one_of(st.none(), st.floats(0.5, 100)),
            "beside": st.booleans(),
            "max_tokens": st.one_of(st.integers(1, 16_384), st.just(16_384)),
            "seed": st.integers(0, 1000),
        }
    )


scenario = st.one_of(
    scenarios(max_decodes=4, max_context=4000, max_prefix=3000, max_remaining=600),
    scenarios(max_decodes=24, max_context=30_000, max_prefix=20_000, max_remaining=12_000),
)


def offer_in_random_order(policy, s):
    admission = policy.begin_round(s["now"], s["decodes"], s["waiting"])
    order = list(s["waiting"])
    random.Random(s["seed"]).shuffle(order)
    for descriptor in order:
        admission.offer(descriptor)
    return admission, admission.plan()


@settings(max_examples=300, deadline=None)
@given(s=scenario)
def test_property_be_never_pushes_the_batch_over_the_tbt_bound_nor_adds_over_its_step(s) -> None:
    policy = scenario_policy(s, disagg=False)
    _, plan = offer_in_random_order(policy, s)
    pairs = admitted_pairs(plan, s["waiting"])
    be_admitted = {
        rid for rid, d in plan.decisions.items() if isinstance(d, Admit) and d.scheduled_as == "be"
    }
    if be_admitted:
        total = estimate(s["decodes"], pairs)
        assert total <= s["bound"] + EPS
        if s["be_step"] is not None:
            without_be = estimate(s["decodes"], [p for p in pairs if p[0].rid not in be_admitted])
            assert total <= without_be + s["be_step"] + EPS
        if not s["beside"]:
            assert all(rid in be_admitted for rid in plan.admitted_tokens())
    assert plan.features.forward_tokens <= max(len(s["decodes"]), s["max_tokens"])


def scenario_policy(s: dict, *, disagg: bool) -> SlackAwarePolicy | HybridPolicy:
    """The policy a property scenario runs: disaggregated (prefill instance) or co-located."""
    if disagg:
        return SlackAwarePolicy(MODEL, DisaggConfig(max_batch_tokens=s["max_tokens"]))
    return HybridPolicy(
        MODEL,
        HybridConfig(
            tbt_bound_ms=s["bound"],
            max_batch_tokens=s["max_tokens"],
            be_step_ms=s["be_step"],
            be_beside_lc_prefill=s["beside"],
        ),
    )


@settings(max_examples=300, deadline=None)
@given(s=scenario, disagg=st.booleans())
def test_property_lc_is_never_deferred_for_be(s, disagg) -> None:
    policy = scenario_policy(s, disagg=disagg)
    _, with_be = offer_in_random_order(policy, s)
    probe = policy.begin_round(s["now"], s["decodes"], s["waiting"])
    lc_only = [d for d in s["waiting"] if probe.scheduled_class(d) == "lc"]
    alone = policy.plan(s["now"], s["decodes"], lc_only)
    for descriptor in lc_only:
        assert with_be.decisions[descriptor.rid] == alone.decisions[descriptor.rid]


@settings(max_examples=200, deadline=None)
@given(s=scenario)
def test_property_promoted_requests_are_scheduled_as_lc(s) -> None:
    policy = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=s["bound"]))
    admission, plan = offer_in_random_order(policy, s)
    for descriptor in s["waiting"]:
        if not descriptor.promoted:
            continue
        assert admission.scheduled_class(descriptor) == "lc"
        decision = plan.decisions[descriptor.rid]
        if isinstance(decision, Admit):
            assert decision.scheduled_as == "lc"
        else:
            assert decision.reason not in ("lc_backlog", "no_slack")


@settings(max_examples=200, deadline=None)
@given(s=scenario)
def test_property_zero_slack_budget_admits_no_be(s) -> None:
    policy = SlackAwarePolicy(MODEL, DisaggConfig(max_batch_tokens=s["max_tokens"]))
    admission, plan = offer_in_random_order(policy, s)
    lc_waiting = [
        d for d in admission.ordered(s["waiting"]) if admission.scheduled_class(d) == "lc"
    ]
    budget = policy.lc_slack_budget_ms(s["now"], lc_waiting)
    be_admitted = [
        d for d in plan.decisions.values() if isinstance(d, Admit) and d.scheduled_as == "be"
    ]
    if budget == 0:
        assert not be_admitted
    if be_admitted:
        lc_pairs = [
            (d, t)
            for d, t in admitted_pairs(plan, s["waiting"])
            if admission.scheduled_class(d) == "lc"
        ]
        decodes = s["decodes"]
        added = estimate(decodes, admitted_pairs(plan, s["waiting"])) - estimate(decodes, lc_pairs)
        assert added <= budget + 1e-6


@settings(max_examples=100, deadline=None)
@given(s=scenario)
def test_property_whole_batch_plan_equals_incremental_offers_in_queue_order(s) -> None:
    policy = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=s["bound"]))
    plan = policy.plan(s["now"], s["decodes"], s["waiting"])
    admission = policy.begin_round(s["now"], s["decodes"], s["waiting"])
    incremental = {d.rid: admission.offer(d) for d in admission.ordered(s["waiting"])}
    assert incremental == plan.decisions
    assert list(itertools.chain(incremental)) == list(plan.decisions)


@settings(max_examples=300, deadline=None)
@given(s=scenario, disagg=st.booleans())
def test_property_no_infeasible_lookahead_is_queued_ahead_of_a_feasible_one(s, disagg) -> None:
    policy = scenario_policy(s, disagg=disagg)
    admission = policy.begin_round(s["now"], s["decodes"], s["waiting"])
    best_effort = [
        d for d in admission.ordered(s["waiting"]) if admission.scheduled_class(d) == "be"
    ]
    infeasible = [d.rid in admission.infeasible for d in best_effort]
    assert infeasible == sorted(infeasible)  # every feasible one first
    feasible_deadlines = [
        math.inf if d.commit_deadline_ms is None else d.commit_deadline_ms
        for d, late in zip(best_effort, infeasible, strict=True)
        if not late
    ]
    assert feasible_deadlines == sorted(feasible_deadlines)  # earliest deadline first
    for descriptor in s["waiting"]:
        deadline = descriptor.commit_deadline_ms
        if descriptor.is_lookahead and not descriptor.promoted and deadline is not None:
            if deadline < s["now"] and descriptor.remaining_prefill_tokens > 0:
                assert descriptor.rid in admission.infeasible
            if descriptor.rid in admission.infeasible:
                assert admission.scheduled_class(descriptor) == "be"


@settings(max_examples=200, deadline=None)
@given(s=scenario)
def test_property_infeasible_lookaheads_never_take_room_from_feasible_ones(s) -> None:
    """Feasible requests get the same decisions whether or not the infeasible ones exist."""
    policy = HybridPolicy(MODEL, HybridConfig(tbt_bound_ms=s["bound"]))
    full = policy.plan(s["now"], s["decodes"], s["waiting"])
    dropped = set(full.infeasible)
    reduced = policy.plan(s["now"], s["decodes"], [d for d in s["waiting"] if d.rid not in dropped])
    for rid, decision in reduced.decisions.items():
        assert full.decisions[rid] == decision


@pytest.mark.parametrize("disagg", [False, True])
def test_a_lookahead_with_nothing_left_to_prefill_is_not_ranked_late(disagg: bool) -> None:
    # Found by the property above: ranked "late" past its deadline, but not infeasible for the
    # deadline triage, it was queued after a lookahead without a deadline.
    waiting = [be("r0", 0), be("r1", 0, commit_deadline_ms=0.0)]
    s = {"now": 1.0, "decodes": [], "waiting": waiting, "bound": 5.0, "max_tokens": 16384}
    s["be_step"], s["beside"] = None, True
    admission = scenario_policy(s, disagg=disagg).begin_round(1.0, [], waiting)
    assert not admission.infeasible
    assert [d.rid for d in admission.ordered(waiting)] == ["r1", "r0"]


def test_plugin_settings_carry_the_be_step_through_the_environment() -> None:
    """`sglang launch` hands settings to SGLang's processes in environment variables: the BE step
    survives the trip, 0 meaning no cap, and reaches the policy the plugin builds."""
    from lookahead_sdk.sglang_plugin.settings import (
        ENV_BE_BESIDE_LC_PREFILL,
        ENV_BE_STEP_MS,
        PluginSettings,
    )

    default = PluginSettings()
    assert default.be_step_ms == HybridConfig().be_step_ms
    assert default.be_beside_lc_prefill is HybridConfig().be_beside_lc_prefill
    tuned = PluginSettings(policy="hybrid", be_step_ms=7.5, be_beside_lc_prefill=True)
    for chosen in (default, tuned):
        assert PluginSettings.from_env(chosen.to_env()) == chosen
    uncapped = PluginSettings(policy="hybrid", be_step_ms=None)
    assert uncapped.to_env()[ENV_BE_STEP_MS] == "0.0"
    assert PluginSettings.from_env(uncapped.to_env()).be_step_ms is None
    policy = tuned.build_policy(disaggregated_prefill=False, engine_batch_tokens=8192)
    assert isinstance(policy, HybridPolicy)
    assert (policy.config.be_step_ms, policy.config.be_beside_lc_prefill) == (7.5, True)
    with pytest.raises(ValueError, match=ENV_BE_STEP_MS):
        PluginSettings.from_env({ENV_BE_STEP_MS: "-1"})
    with pytest.raises(ValueError, match=ENV_BE_BESIDE_LC_PREFILL):
        PluginSettings.from_env({ENV_BE_BESIDE_LC_PREFILL: "yes"})

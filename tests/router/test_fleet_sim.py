import random
import re
from dataclasses import replace

import pytest

from lookahead_sdk.router import make_policy
from lookahead_sdk.router.fleet_sim import (
    EngineRequest,
    FleetConfig,
    SimEngine,
    WorkloadConfig,
    run_fleet,
    sample_program,
)
from lookahead_sdk.scheduling import LatencyModel, load_profile
from lookahead_sdk.scheduling.latency_model import attention_units

MODEL = LatencyModel(load_profile("h200-qwen3-8b"))
WORKLOAD = WorkloadConfig()


def fleet(programs: int, overload_at: int, **overrides: object) -> FleetConfig:
    """`overload_at` programs demand 2x the KV of the 2 backends."""
    kv = round(overload_at * WORKLOAD.mean_resident_tokens() / 4)
    base = FleetConfig(programs=programs, kv_tokens_per_backend=kv, duration_s=240.0, warmup_s=60.0)
    return replace(base, **overrides)  # type: ignore[arg-type]


# --- the engine --------------------------------------------------------------------------------


def run_until_done(engine: SimEngine, now: float = 0.0) -> tuple[float, list[EngineRequest]]:
    done: list[EngineRequest] = []
    while (end := engine.start_batch(now)) is not None:
        now = end
        done += engine.finish_batch()
    return now, done


def test_a_lone_request_takes_its_prefill_then_its_decode_iterations() -> None:
    engine = SimEngine("e", 100_000, MODEL, max_macro_s=10.0)
    engine.submit(EngineRequest("r", "p", 1000, 3, fresh_tokens=1000), 0.0)
    prefill_s = (
        MODEL.gemm_ms(1000) + MODEL.profile.alpha_prefill_ms * attention_units(1000, 0)
    ) / 1e3
    assert engine.start_batch(0.0) == pytest.approx(prefill_s)
    assert engine.finish_batch() == []  # the first token comes with the prefill
    end, done = run_until_done(engine, prefill_s)
    alpha = MODEL.profile.alpha_decode_ms
    decode_s = (2 * MODEL.gemm_ms(1) + alpha * (1001 + 1002)) / 1e3
    assert end == pytest.approx(prefill_s + decode_s)
    assert [r.request_id for r in done] == ["r"] and done[0].first_token_s == pytest.approx(
        prefill_s
    )
    assert engine.stats.decode_tokens == 3 and engine.stats.prefill_tokens == 1000


def test_a_program_reuses_its_cached_prefix() -> None:
    engine = SimEngine("e", 100_000, MODEL)
    engine.submit(EngineRequest("r1", "p", 2000, 10, fresh_tokens=2000), 0.0)
    now, _ = run_until_done(engine)
    assert engine.cached_tokens("p") == 2010
    engine.submit(EngineRequest("r2", "p", 2600, 10, fresh_tokens=590), now)
    run_until_done(engine, now)
    assert engine.stats.prefill_tokens == 2000 + 590
    assert engine.stats.cached_hit_tokens == 2010 and engine.stats.reprefill_tokens == 0


def test_lru_eviction_makes_a_returning_program_re_prefill() -> None:
    engine = SimEngine("e", 5000, MODEL)
    now = 0.0
    for program in ("old", "recent"):
        engine.submit(EngineRequest(f"{program}-1", program, 2000, 10, 2000), now)
        now, _ = run_until_done(engine, now)
    # 4020 cached; a newcomer needing 2010 evicts the least recently used entry's tail.
    engine.submit(EngineRequest("new-1", "new", 2000, 10, 2000), now)
    now, _ = run_until_done(engine, now)
    assert engine.cached_tokens("recent") == 2010
    assert engine.cached_tokens("old") == 5000 - 2010 - 2010
    assert engine.stats.evicted_tokens == 2010 - (5000 - 4020)
    engine.submit(EngineRequest("old-2", "old", 2600, 10, fresh_tokens=590), now)
    run_until_done(engine, now)
    # 980 of old's 2010 tokens survived: of the 2600-token prompt, 2600 - 980 are prefilled,
    # 590 of them new, the other 1030 computed before.
    assert engine.stats.cached_hit_tokens == 980
    assert engine.stats.reprefill_tokens == 2600 - 980 - 590


def test_a_request_waits_while_running_requests_hold_the_kv() -> None:
    engine = SimEngine("e", 3000, MODEL)
    engine.submit(EngineRequest("a", "pa", 2000, 50, 2000), 0.0)
    engine.submit(EngineRequest("b", "pb", 1500, 50, 1500), 0.0)
    engine.start_batch(0.0)
    engine.finish_batch()
    _, done = run_until_done(engine)
    assert [r.request_id for r in done] == ["a", "b"]
    assert done[1].first_token_s is not None and done[0].first_token_s is not None
    assert done[1].first_token_s > done[0].first_token_s


# --- the workload ------------------------------------------------------------------------------


def test_mean_resident_tokens_matches_sampled_programs() -> None:
    rng = random.Random(7)
    samples = []
    for _ in range(3000):
        spec = sample_program(rng, WORKLOAD)
        per_step = [spec.prompt_tokens(k) + spec.decode_tokens[k] / 2 for k in range(spec.steps)]
        samples += per_step
    # Steps weighted equally (the formula's assumption): compare against the per-step mean.
    assert sum(samples) / len(samples) == pytest.approx(WORKLOAD.mean_resident_tokens(), rel=0.03)


def test_workload_settings_are_validated() -> None:
    with pytest.raises(ValueError, match=re.escape("WorkloadConfig.steps")):
        WorkloadConfig(steps=(10, 5))
    with pytest.raises(ValueError, match=re.escape("FleetConfig needs 0 <= warmup_s < duration_s")):
        FleetConfig(programs=1, kv_tokens_per_backend=10, duration_s=10, warmup_s=10)


# --- the fleet ---------------------------------------------------------------------------------


def test_a_seed_determines_the_run() -> None:
    config = fleet(24, overload_at=24, duration_s=120.0, warmup_s=20.0)
    first = run_fleet(make_policy("thunder"), config)
    again = run_fleet(make_policy("thunder"), config)
    other = run_fleet(make_policy("thunder"), replace(config, seed=1))
    assert first == again
    assert first.step_latency_s != other.step_latency_s


def test_without_the_router_an_overloaded_fleet_thrashes() -> None:
    light = run_fleet(make_policy("session"), fleet(12, overload_at=48))
    heavy = run_fleet(make_policy("session"), fleet(48, overload_at=48))
    assert light.engine.reprefill_tokens <= 0.02 * light.engine.prefill_tokens
    assert heavy.engine.reprefill_tokens >= 0.8 * heavy.engine.prefill_tokens


def test_thunder_outpaces_session_affinity_when_overloaded() -> None:
    config = fleet(48, overload_at=48)
    thunder = run_fleet(make_policy("thunder"), config)
    session = run_fleet(make_policy("session"), config)
    assert thunder.steps > 1.1 * session.steps
    assert thunder.engine.reprefill_tokens < session.engine.reprefill_tokens
    assert thunder.pauses > 0 and session.pauses == 0

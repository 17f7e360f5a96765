import math
import re

import pytest

from lookahead_sdk.router import BaselineConfig, Ignored, ThunderConfig, make_policy

from .helpers import snapshot, thunder


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pause_at": 0}, "ThunderConfig.pause_at must be a finite number > 0"),
        ({"pause_to": 1.2}, "ThunderConfig.pause_to (1.2) must be <= pause_at (1.0)"),
        ({"restore_to": 1.5}, "lower restore_to or raise pause_at"),
        ({"decay_half_life_s": -1}, "use 0 to turn acting-token decay off"),
        ({"aging_s": 0}, "ThunderConfig.aging_s"),
        ({"hold_timeout_s": math.inf}, "ThunderConfig.hold_timeout_s"),
        ({"lease_s": "600"}, "ThunderConfig.lease_s"),
        ({"tick_s": True}, "ThunderConfig.tick_s"),
        ({"global_queue": 1}, "ThunderConfig.global_queue must be True or False"),
        ({"new_program_order": "largest"}, "ThunderConfig.new_program_order"),
        ({"swap_budget": -0.1}, "ThunderConfig.swap_budget must be a finite number >= 0"),
        ({"swap_budget": math.nan}, "0 turns preemption off"),
        ({"pause_order": "largest"}, "ThunderConfig.pause_order must be 'idle_longest'"),
    ],
)
def test_thunder_config_names_the_field_and_the_fix(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ThunderConfig(**kwargs)


def test_baseline_config_and_policy_names_are_checked() -> None:
    with pytest.raises(ValueError, match=re.escape("BaselineConfig.lease_s")):
        BaselineConfig(lease_s=0)
    with pytest.raises(ValueError, match="unknown policy 'fastest'"):
        make_policy("fastest")
    with pytest.raises(TypeError, match="ThunderConfig"):
        make_policy("thunder", thunder=BaselineConfig())  # type: ignore[arg-type]


def test_backends_are_validated() -> None:
    policy = thunder(("a", 1000))
    with pytest.raises(ValueError, match="already added"):
        policy.add_backend("a", 10)
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="KV capacity in tokens"):
            policy.add_backend("b", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown backend 'zz'"):
        policy.mark_down("zz", 0.0)
    assert policy.backend_names == ("a",)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: p.request_arrived("", "r9", 10, 5.0), "program_id must be a non-empty"),
        (lambda p: p.request_arrived("x", "r9", -1, 5.0), "new_tokens must be an int >= 0"),
        (lambda p: p.request_arrived("x", "r9", 10, 5.0, lookahead="maybe"), "lookahead must"),
        (lambda p: p.request_arrived("x", "r1", 10, 5.0), "already in flight or held"),
        (lambda p: p.request_arrived("x", "r9", 10, 0.5), "now_s went backwards"),
        (lambda p: p.request_arrived("x", "r9", 10, math.nan), "finite number of seconds"),
        (lambda p: p.request_finished("r1", 5.0, total_tokens=-3), "total_tokens must be"),
        (lambda p: p.request_finished("r1", 5.0, ok=None), "ok must be True or False"),
        (lambda p: p.request_finished("r1", 0.1), "now_s went backwards"),
        (lambda p: p.release("p1", 0.1), "now_s went backwards"),
        (lambda p: p.tick(-1.0), "now_s went backwards"),
        (lambda p: p.mark_down("a", 0.1), "now_s went backwards"),
    ],
)
def test_a_rejected_call_leaves_the_table_exactly_as_it_was(call, message: str) -> None:
    policy = thunder(("a", 1000), ("b", 1000))
    policy.request_arrived("p1", "r1", 400, 1.0)
    policy.request_arrived("p2", "r2", 800, 1.0)
    policy.request_arrived("p3", "r3", 900, 1.0)  # held: fits nowhere
    before = snapshot(policy)
    with pytest.raises(ValueError, match=message):
        call(policy)
    assert snapshot(policy) == before
    # ... and the clock did not move: an event at the old time is still accepted.
    policy.request_finished("r1", 1.0, total_tokens=450)


def test_unknown_ids_are_answered_without_changing_anything() -> None:
    policy = thunder(("a", 1000))
    policy.request_arrived("p1", "r1", 400, 1.0)
    before = snapshot(policy)
    assert policy.request_finished("nope", 2.0) == [
        Ignored("nope", "unknown request (finished, released or lost already)")
    ]
    assert policy.release("nobody", 2.0) == []
    assert snapshot(policy) == before

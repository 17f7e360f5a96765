"""Hook functions installed in SGLang's scheduler process (signatures follow HookRegistry:
AROUND hooks get the original first, AFTER hooks the result first, BEFORE hooks the arguments)."""

from __future__ import annotations

from collections.abc import MutableSequence
from typing import Any

from lookahead_sdk.sglang_plugin.adder import adder_class_for
from lookahead_sdk.sglang_plugin.prefill_pass import (
    active_pass,
    open_pass,
    policy_for,
    start_round,
    tags_or_default,
)
from lookahead_sdk.sglang_plugin.state import plugin_state

STATS_KEY = "lookahead"


def around_get_new_batch_prefill_raw(
    original: Any, scheduler: Any, *args: Any, **kwargs: Any
) -> Any:
    """`Scheduler._get_new_batch_prefill_raw(prefill_delayer_single_pass, running_batch)`."""
    with open_pass(scheduler, plugin_state()):
        return original(scheduler, *args, **kwargs)


def after_calc_priority(
    result: None,
    schedule_policy: Any,
    waiting_queue: MutableSequence[Any],
    running_batch: Any = None,
    processed_tokens: int = 0,
) -> None:
    """`SchedulePolicy.calc_priority(waiting_queue, running_batch, processed_tokens)`: the queue is
    sorted; begin the round and put its order (LC first) on the queue SGLang is about to walk."""
    prefill_pass = active_pass()
    if prefill_pass is None or prefill_pass.round is not None:
        return None  # not a prefill pass we opened (e.g. a decode instance's queue)
    scheduler = prefill_pass.scheduler
    policy = policy_for(scheduler, prefill_pass.state)
    if policy is None:
        return None
    refresh_prefix_matches(waiting_queue, schedule_policy.tree_cache)
    running_reqs = running_batch.reqs if running_batch is not None else []
    start_round(prefill_pass, policy, waiting_queue, running_reqs, scheduler.chunked_req)
    return None


def refresh_prefix_matches(waiting_queue: MutableSequence[Any], tree_cache: Any) -> None:
    """Match every waiting request against the radix cache, as SGLang's own cache-aware policies
    do in `calc_priority`: the policy needs each request's cached prefix before admission starts."""
    from sglang.srt.mem_cache.common import match_kv_cache

    for req in waiting_queue:
        match_kv_cache(req, tree_cache)


def around_get_prefill_adder_class(original: Any, scheduler: Any) -> type:
    """`Scheduler.get_prefill_adder_class()`: SGLang's adder class with the policy in front."""
    base = original(scheduler)
    if policy_for(scheduler, plugin_state()) is None:
        return base
    return adder_class_for(base)


def before_add_request_to_queue(scheduler: Any, req: Any, *args: Any, **kwargs: Any) -> None:
    """`Scheduler._add_request_to_queue(req, is_retracted=False)`: a request that promotes a
    lookahead group does so the moment it reaches the scheduler, before any admission."""
    state = plugin_state()
    group = tags_or_default(state, req).group_to_promote
    if group is not None:
        state.promote(group)
    return None


def after_get_internal_state(result: Any, controller: Any, *args: Any, **kwargs: Any) -> Any:
    """`SchedulerInternalStateController.get_internal_state(recv_req)`: add the plugin's counters
    to what `/server_info` reports per scheduler."""
    state = plugin_state()
    result.internal_state[STATS_KEY] = {
        "policy": state.settings.policy,
        "profile": state.settings.profile,
        **state.stats.snapshot(),
    }
    return result

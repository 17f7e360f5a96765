"""Property: under random interleavings of appends, model turns, boundaries, edits, slow / failing
transforms and commits (at the limit or decided ahead), a committed context is always the
synchronous transform of exactly the prefix it covers plus the suffix; a stale result is never
committed; nothing is left running after close."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_sdk import CommitKind, LookaheadRuntime

from .policies import CountingPolicy, drop_middle, user

operation = st.one_of(
    st.tuples(st.just("step"), st.integers(1, 3)),
    st.tuples(st.just("settle"), st.just(0)),
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("boundary"), st.just(0)),
    st.tuples(st.just("commit"), st.just(0)),
    st.tuples(st.just("advance"), st.integers(0, 12)),
    st.tuples(st.just("edit"), st.integers(0, 30)),
    st.tuples(st.just("model_turn"), st.just(0)),
)


async def run_scenario(
    ops: list[tuple[str, int]], delays: list[float], fail_calls: set[int], counter
) -> None:
    policy = CountingPolicy(soft=5, hard=9, ahead=7, delays=delays)
    original_transform = policy.transform

    async def transform(messages, ctx):
        call = len(policy.seen_inputs)
        if ctx.is_lookahead and call in fail_calls:
            policy.seen_inputs.append((True, list(messages)))
            raise RuntimeError("injected")
        return await original_transform(messages, ctx)

    policy.transform = transform  # type: ignore[method-assign]
    runtime = LookaheadRuntime(
        policy,
        messages=[{"role": "system", "content": "s"}],
        token_counter=counter,
        transform_timeout_s=0.05,
    )
    counter_value = 0
    for name, arg in ops:
        if name in ("append", "step"):
            for _ in range(arg):
                counter_value += 1
                runtime.append(user(f"m{counter_value}"))
            if name == "step":
                await runtime.boundary()
        elif name == "settle":
            await runtime.settle()
        elif name == "boundary":
            await runtime.boundary()
        elif name == "model_turn":  # a turn with a tool call: a commit may be decided ahead
            counter_value += 1
            call = {"id": f"c{counter_value}", "type": "function", "function": {"name": "t"}}
            runtime.append({"role": "assistant", "content": None, "tool_calls": [call]})
            await runtime.boundary()
        elif name == "advance":
            await asyncio.sleep(arg / 1000)
        elif name == "edit" and len(runtime.main) > 1:
            runtime.main.edit(1 + arg % (len(runtime.main) - 1), user(f"edited{counter_value}"))
        elif name == "commit":
            before = list(runtime.main.messages)
            outcome = await runtime.commit()
            if outcome.kind is CommitKind.NONE:
                assert outcome.messages == before
                continue
            # Below the limit only a decision made ahead, on a prefix still in place, commits.
            assert len(before) >= policy.hard or outcome.decided_ahead
            if outcome.kind is CommitKind.HIT:
                end = outcome.covered_end
                assert end is not None and 0 < end <= len(before)
                lookahead_inputs = [
                    messages for is_lookahead, messages in policy.seen_inputs if is_lookahead
                ]
                assert before[:end] in lookahead_inputs, (
                    "committed a result whose covered prefix changed"
                )
                expected = drop_middle(before[:end]) + before[end:]
                if outcome.reason == "overflow":
                    expected = drop_middle(expected)
            else:
                assert outcome.kind is CommitKind.FALLBACK
                expected = drop_middle(before)
            assert outcome.messages == expected
            assert list(runtime.main.messages) == expected
    await runtime.aclose()
    pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    assert pending == [], f"tasks left after close: {pending}"


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(operation, min_size=5, max_size=60),
    delays=st.lists(st.sampled_from([0.0, 0.001, 0.004, 0.01, 0.08]), min_size=1, max_size=5),
    fail_calls=st.sets(st.integers(0, 10), max_size=4),
)
def test_commit_equals_sync_transform_of_covered_prefix_plus_suffix(
    ops, delays, fail_calls, approx_counter
) -> None:
    asyncio.run(run_scenario(ops, delays, fail_calls, approx_counter))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    appends_between=st.lists(st.integers(0, 3), min_size=3, max_size=12),
    delay=st.sampled_from([0.0, 0.003, 0.02]),
)
def test_append_only_histories_always_hit_once_the_lookahead_is_ready(
    appends_between, delay, approx_counter
) -> None:
    """Without edits or failures, a ready lookahead is committed (never needlessly thrown away)."""

    async def scenario() -> None:
        policy = CountingPolicy(soft=3, hard=6, delays=[delay])
        async with LookaheadRuntime(
            policy, messages=[user("task")], token_counter=approx_counter
        ) as runtime:
            for count in appends_between:
                runtime.append(*[user(f"x{i}") for i in range(count + 1)])
                await runtime.boundary()
                await runtime.settle()
                outcome = await runtime.commit()
                # A boundary that already crosses the hard limit starts nothing (the commit right
                # after it does the work itself): that fallback had no lookahead to throw away.
                assert outcome.kind in (CommitKind.NONE, CommitKind.HIT) or (
                    outcome.kind is CommitKind.FALLBACK and outcome.reason == "not started"
                )
            assert runtime.stats.stale == 0 and runtime.stats.abandoned == 0
            assert runtime.stats.wasted_prompt_tokens == 0

    asyncio.run(scenario())

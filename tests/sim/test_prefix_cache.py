import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk.sim.prefix_cache import KvPool, block_names


def test_block_names_identify_whole_prefixes() -> None:
    a = block_names(list(range(64)), 16)
    b = block_names([*range(32), 999, *range(33, 64)], 16)
    assert len(a) == 4
    assert a[:2] == b[:2] and a[2] != b[2] and a[3] != b[3]  # a change taints every later block
    assert block_names(list(range(15)), 16) == []  # partial blocks are never named


def test_match_counts_leading_cached_blocks() -> None:
    pool = KvPool(1024, 16)
    names = block_names(list(range(80)), 16)
    pool.insert(names[:3])
    assert pool.match(names) == 3
    assert pool.match(block_names([7, *range(1, 80)], 16)) == 0
    assert pool.cached_tokens == 48


def test_eviction_takes_least_recently_used_unlocked_leaves() -> None:
    pool = KvPool(96, 16)  # six blocks
    old = block_names([1] * 48, 16)
    new = block_names([2] * 48, 16)
    pool.insert(old)
    pool.insert(new)
    assert pool.free_tokens == 0
    assert pool.reserve(32)  # evicts two blocks: the old prompt's last two
    assert pool.match(new) == 3
    assert pool.match(old) == 1
    assert pool.evicted_tokens == 32


def test_locked_blocks_survive_and_reservations_fail_cleanly() -> None:
    pool = KvPool(64, 16)
    names = block_names(list(range(64)), 16)
    pool.insert(names)
    pool.lock(names)
    assert not pool.reserve(16)
    assert pool.match(names) == 4 and pool.reserved_tokens == 0
    pool.unlock(names)
    assert pool.reserve(16)
    with pytest.raises(RuntimeError, match="double release"):
        pool.unlock(names[:1])


def test_a_middle_block_is_never_evicted_before_its_descendants() -> None:
    pool = KvPool(48, 16)
    names = block_names(list(range(48)), 16)
    pool.insert(names)
    pool.touch(names[2:])  # the leaf is now the most recently used block
    assert pool.reserve(16)
    assert pool.match(names) == 2  # still the leaf went first: a prefix stays matchable


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert", "reserve", "release"]),
            st.integers(0, 5),  # which prompt
            st.integers(1, 6),  # blocks / amount
        ),
        max_size=60,
    )
)
def test_property_usage_never_exceeds_capacity(ops) -> None:
    pool = KvPool(160, 16)
    prompts = [block_names([p] * 96, 16) for p in range(6)]
    reserved: list[int] = []
    for op, prompt, amount in ops:
        if op == "insert":
            tokens = amount * 16
            if pool.reserve(tokens):  # the engine converts a reservation into cached blocks
                added = pool.insert(prompts[prompt][:amount])
                pool.release(tokens)
                assert added <= tokens
        elif op == "reserve":
            if pool.reserve(amount * 16):
                reserved.append(amount * 16)
        elif reserved:
            pool.release(reserved.pop())
        assert pool.cached_tokens + pool.reserved_tokens <= pool.capacity_tokens
        # No orphans: every cached block is reachable, i.e. its whole prefix is cached too.
        assert sum(pool.match(names) for names in prompts) * 16 == pool.cached_tokens

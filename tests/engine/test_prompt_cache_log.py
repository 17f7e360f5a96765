"""llama-server's RAM prompt cache as its trace log tells it (`engine.prompt_cache_log`): parsed
from real log lines, and from a real llama-server made to save a prompt and load it back."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from lookahead_sdk.base.protocol import DISCARD_SLOT_PROMPT_FIELD
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.prompt_cache_log import (
    TRACE_VERBOSITY_ARGS,
    PromptCacheActivity,
    prompt_cache_activity,
)
from lookahead_sdk.engine.server import ensure_engine, stop_engine

# Lines of a bench run's engine log (llama-server at -lv 4), in their order there.
LOG = """\
4.17.843.538 I srv   prompt_save:  - saving prompt with length 753, total state size = 16.555 MiB (draft: 0.000 MiB)
4.18.098.993 I srv          load:  - looking for better prompt, base f_keep = 0.150, f_sim = 0.051
4.18.099.056 I srv          load:    - prompt with length    3032, lcp =     113, f_keep = 0.037, f_sim = 0.051
4.18.099.074 I srv          load:    - prompt with length    1732, lcp =    1732, f_keep = 1.000, f_sim = 0.778
4.18.099.079 I srv          load:    - prompt with length     753, lcp =     113, f_keep = 0.150, f_sim = 0.051
4.18.099.080 I srv          load:  - found better prompt with f_keep = 1.000, f_sim = 0.778
4.18.109.124 I srv        update:  - cache state: 9 prompts, 557.480 MiB (limits: 1024.000 MiB, 98304 tokens, 98304 est)
4.18.109.161 I srv  get_availabl: prompt cache update took 265.88 ms
4.20.001.000 I srv   prompt_save:  - saving prompt with length 3208, total state size = 70.526 MiB (draft: 0.000 MiB)
4.20.002.000 I srv          load:  - looking for better prompt, base f_keep = 0.022, f_sim = 0.032
4.20.002.100 I srv          load:    - prompt with length    1732, lcp =     72, f_keep = 0.042, f_sim = 0.032
4.20.950.000 I srv  get_availabl: prompt cache update took 948.37 ms
4.21.000.000 I srv  get_availabl: prompt cache update took 0.01 ms
"""


def test_saves_loads_and_update_times_are_read_from_the_trace_log() -> None:
    activity = prompt_cache_activity(LOG)
    assert activity == PromptCacheActivity(
        saves=2,
        saved_tokens=753 + 3208,
        saved_mib=round(16.555 + 70.526, 3),
        loads=1,
        loaded_tokens=1732,  # the chosen candidate's common prefix, not another's
        update_s=round((265.88 + 948.37 + 0.01) / 1000, 4),
        longest_update_s=0.9484,
    )
    assert activity.to_json()["loaded_tokens"] == 1732


def test_a_log_at_the_default_verbosity_shows_no_activity() -> None:
    log = (
        "0.15.911.627 I slot get_availabl: id  0 | task -1 | selected slot by id (0)\n"
        "0.16.201.175 I slot launch_slot_: id  0 | task 203 | processing task, is_child = 0\n"
    )
    assert prompt_cache_activity(log) == PromptCacheActivity()


def test_a_save_the_request_skipped_is_counted_as_a_discard() -> None:
    log = (
        "2.03.114.020 I srv  get_availabl:  - discarding prompt with length 2612, marked dead "
        "by the request\n"
        "2.03.114.051 I srv          load:  - looking for better prompt, base f_keep = 0.031, "
        "f_sim = 0.154\n"
        "2.03.114.300 I srv  get_availabl: prompt cache update took 0.31 ms\n"
    )
    assert prompt_cache_activity(log) == PromptCacheActivity(
        discards=1, discarded_tokens=2612, update_s=0.0003, longest_update_s=0.0003
    )


def _words(seed: int, count: int) -> str:
    rng = random.Random(seed)
    words = ("river", "stone", "cloud", "paper")
    return " ".join(f"{rng.choice(words)}{rng.randint(0, 99)}" for _ in range(count))


def _a_b_a_in_slot_zero(
    port: int, *, b_marks_a_dead: bool
) -> tuple[PromptCacheActivity, list[int], int]:
    """On a real llama-server (2 slots, trace log): prompt A, then B (sharing a short prefix,
    so A is replaced: saved unless B carries `discard_slot_prompt`), then A again, each pinned
    to slot 0. The cache's activity, each request's cached tokens, A's length in tokens."""
    config = EngineConfig(port=port, slots=2, ctx_per_slot=2048, extra_args=TRACE_VERBOSITY_ARGS)
    handle = ensure_engine(config, show_progress=False)
    try:
        prefix = _words(0, 20)
        first, second = f"{prefix} {_words(1, 120)}", f"{prefix} {_words(2, 120)}"
        cached: list[int] = []
        with httpx.Client(base_url=handle.base_url, timeout=120) as client:
            for prompt, dead in ((first, False), (second, b_marks_a_dead), (first, False)):
                body = {"prompt": prompt, "n_predict": 1, "cache_prompt": True, "id_slot": 0}
                reply = client.post("/completion", json=body | {DISCARD_SLOT_PROMPT_FIELD: dead})
                reply.raise_for_status()
                cached.append(reply.json()["timings"]["cache_n"])
            tokenized = client.post("/tokenize", json={"content": first, "add_special": True})
            first_tokens = len(tokenized.json()["tokens"])
        activity = prompt_cache_activity(Path(handle.log_path).read_text(errors="replace"))
    finally:
        stop_engine(port)
    return activity, cached, first_tokens


@pytest.mark.engine
def test_a_real_llama_server_saves_a_replaced_prompt_and_loads_it_back(free_port: int) -> None:
    """A comes back from the RAM cache, its tokens not computed again."""
    activity, cached, first_tokens = _a_b_a_in_slot_zero(free_port, b_marks_a_dead=False)
    assert activity.saves >= 2  # A when B took the slot, B when A came back
    assert activity.loads == 1 and activity.discards == 0
    # A's tokens came back from the cache (llama.cpp computes the last one again for logits).
    assert first_tokens - 2 <= activity.loaded_tokens <= first_tokens
    assert cached[2] >= first_tokens - 2 and cached[1] < first_tokens // 2
    assert activity.update_s > 0 and activity.longest_update_s <= activity.update_s


@pytest.mark.engine
def test_a_prompt_the_request_marks_dead_is_not_saved(free_port: int) -> None:
    """The embedded engine's `discard_slot_prompt` (engine.patches): B says A is dead, so A is
    not saved, and coming back A finds nothing to load; B, replaced without the mark, is saved
    as before."""
    activity, cached, first_tokens = _a_b_a_in_slot_zero(free_port, b_marks_a_dead=True)
    assert activity.discards == 1
    assert first_tokens - 2 <= activity.discarded_tokens <= first_tokens + 1  # A, with B's token
    assert activity.saves == 1 and activity.loads == 0  # B saved; A was not there to load
    assert cached[2] < first_tokens // 2  # A computed again

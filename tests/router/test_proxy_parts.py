"""The proxy's pure parts: capacity parsing per engine, SSE framing and usage stripping, token
deltas of a program's prompts, settings validation, the metrics text."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_sdk.router.capacity import from_llamacpp, from_server_info, from_vllm_metrics
from lookahead_sdk.router.config import ThunderConfig
from lookahead_sdk.router.exposition import ProxyCounters, render
from lookahead_sdk.router.prompt_delta import PromptTracker
from lookahead_sdk.router.proxy import RouterProxy
from lookahead_sdk.router.proxy_config import ProxyConfig, parse_capacity
from lookahead_sdk.router.slots import SlotTable
from lookahead_sdk.router.sse import SseFramer, UsageTap
from lookahead_sdk.router.thunder import ThunderPolicy

URL = "http://gpu0:8000"


def test_capacity_from_each_engine() -> None:
    assert from_server_info(URL, {"max_total_num_tokens": 500_000}).kind == "sglang"
    nested = {"internal_states": [{"max_total_num_tokens": 7}], "simulator": {}}
    info = from_server_info(URL, nested)
    assert (info.kind, info.capacity_tokens) == ("sim", 7)
    assert from_server_info(URL, {"model_path": "x"}) is None
    metrics = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9",'
        'num_cpu_blocks="None",num_gpu_blocks="27000"} 1.0\n'
    )
    assert from_vllm_metrics(URL, metrics).capacity_tokens == 16 * 27000
    assert from_vllm_metrics(URL, 'vllm:cache_config_info{num_gpu_blocks="None"} 1') is None
    slots = [{"id": 0, "n_ctx": 4096}, {"id": 1, "n_ctx": 4096}]
    info = from_llamacpp(URL, {"default_generation_settings": {"n_ctx": 4096}}, slots)
    assert (info.kind, info.capacity_tokens, info.slots) == ("llamacpp", 8192, 2)
    props = {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 4}
    assert from_llamacpp(URL, props, None).capacity_tokens == 8192


def test_sse_framing_across_reads_and_usage_stripping() -> None:
    content = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    usage = {"choices": [], "usage": {"total_tokens": 42}}
    stream = (
        f"data: {json.dumps(content)}\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode()
    )
    for cut in range(1, len(stream)):
        framer, tap = SseFramer(), UsageTap(keep_usage=False)
        events = framer.feed(stream[:cut]) + framer.feed(stream[cut:])
        assert framer.rest() == b""
        out = b"".join(tap.pass_event(e) for e in events)
        assert b"usage" not in out and b"[DONE]" in out and b'"hi"' in out
        assert tap.total_tokens == 42 and tap.content_chunks == 1
    kept = UsageTap(keep_usage=True)
    assert b"usage" in b"".join(kept.pass_event(e) for e in SseFramer().feed(stream))
    # usage a backend puts on a content chunk by itself is read, and passed on untouched
    both = {"choices": [{"index": 0, "delta": {"content": "x"}}], "usage": {"total_tokens": 5}}
    event = f"data: {json.dumps(both)}\r\n\r\n".encode()
    tap = UsageTap(keep_usage=False)
    assert tap.pass_event(event) == event and tap.total_tokens == 5


# Each event ends at the earliest blank line, "\n\n" or "\r\n\r\n" (either may follow the other).
_EVENT = re.compile(rb"(?s).*?(?:\n\n|\r\n\r\n)")


@given(
    st.lists(st.sampled_from([b"data: x", b"\n", b"\r", b"\r\n", b"\n\n", b":"]), max_size=40),
    st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_sse_framing_finds_each_event_whatever_the_reads(
    pieces: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(pieces)
    expected = [match.group() for match in _EVENT.finditer(stream)]
    tail = stream[sum(map(len, expected)) :]
    bounds = sorted({min(cut, len(stream)) for cut in cuts} | {0, len(stream)})
    framer = SseFramer()
    events = [e for a, b in itertools.pairwise(bounds) for e in framer.feed(stream[a:b])]
    assert events == expected
    assert framer.rest() == tail


def test_prompt_deltas_count_what_a_request_adds() -> None:
    tracker = PromptTracker(lambda text: len(text.split()), lambda m: len(m["content"].split()))
    first = [{"role": "system", "content": "a b"}, {"role": "user", "content": "c d e"}]
    assert tracker.new_tokens("p", {"messages": first}, remember=True) == 5
    second = [*first, {"role": "assistant", "content": "f"}, {"role": "tool", "content": "g h"}]
    assert tracker.new_tokens("p", {"messages": second}, remember=False) == 2  # a lookahead
    assert tracker.new_tokens("p", {"messages": second}, remember=True) == 2  # reply skipped
    rewritten = [{"role": "system", "content": "summary"}, {"role": "user", "content": "go"}]
    assert tracker.new_tokens("p", {"messages": rewritten}, remember=True) == 2  # all of it
    assert tracker.new_tokens("q", {"input_ids": [1, 2, 3]}, remember=True) == 3
    assert tracker.new_tokens("q", {"input_ids": [1, 2, 3, 4, 5]}, remember=True) == 2  # no usage
    assert tracker.new_tokens("r", {"prompt": "one two"}, remember=True) == 2
    tracker.served("r", 4)  # its usage: the prompt's 2 tokens and a 2-token reply
    assert tracker.new_tokens("r", {"prompt": "one two x y three"}, remember=True) == 1
    tracker.forget("p")
    tracker.forget("q")
    tracker.forget("r")
    assert len(tracker) == 0


@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=6),
    st.integers(0, 5),
    st.integers(0, 30),
)
def test_an_extending_prompt_counts_its_program_to_the_prompts_length(
    steps: list[int], reply: int, first: int
) -> None:
    """Token-id prompts that resend the history and the reply: the program's tokens (its last
    usage plus the new tokens, as the core adds them) are the prompt's length, each step. The
    reply is inside the last usage, so it must not count again (the chat path skips it too)."""
    tracker = PromptTracker(len, lambda m: 0)
    prompt = list(range(first + 1))
    usage = 0
    for added in steps:
        assert usage + tracker.new_tokens("p", {"input_ids": prompt}, remember=True) == len(prompt)
        usage = len(prompt) + reply
        tracker.served("p", usage)
        prompt = prompt + [-1] * reply + list(range(added))


def test_proxy_settings_are_validated() -> None:
    config = ProxyConfig(("http://a:1/", "http://b:2/v1"), capacities={"http://a:1": 10})
    assert config.backends == ("http://a:1", "http://b:2")
    assert parse_capacity("http://a:1/v1=5") == ("http://a:1", 5)
    for bad in (
        {"backends": ()},
        {"backends": ("a:1",)},
        {"backends": ("http://a:1", "http://a:1/")},
        {"backends": ("http://a:1",), "capacities": {"http://c:3": 5}},
        {"backends": ("http://a:1",), "capacities": {"http://a:1": 0}},
        {"backends": ("http://a:1",), "policy": "random"},
        {"backends": ("http://a:1",), "retry_s": 0},
    ):
        with pytest.raises(ValueError):
            ProxyConfig(**bad)  # type: ignore[arg-type]
    for bad_capacity in ("http://a:1", "http://a:1=x", "http://a:1=0", "a:1=5"):
        with pytest.raises(ValueError):
            parse_capacity(bad_capacity)


def test_metrics_text_escapes_labels_and_counts() -> None:
    core = ThunderPolicy()
    core.add_backend('http://a"b', 100)
    core.request_arrived("p", "r1", 10, 0.0)
    counters = ProxyCounters()
    counters.request("chat", "ok")
    text = render(core.metrics(), core.programs(), counters, pending_backends=["http://c"])
    assert 'lookahead_router_backend_up{backend="http://a\\"b"} 1' in text
    assert 'lookahead_router_backend_up{backend="http://c"} 0' in text
    assert 'lookahead_router_programs{status="active",phase="reasoning"} 1' in text
    assert 'lookahead_router_requests_total{route="chat",outcome="ok"} 1' in text
    assert text.endswith("\n")


def test_slot_table_keeps_a_program_in_its_slot() -> None:
    table = SlotTable(3)
    assert table.slot_for("a") == 0
    assert table.slot_for("b") == 1
    assert table.branch_slot("a", "r1") == 2  # the lookahead branch: another slot
    assert table.slot_for("a") == 0
    assert table.slot_for("c") is None  # all taken: llama.cpp picks
    table.forget("a")
    assert table.slot_for("c") == 0 and len(table) == 2


def test_slot_table_frees_the_branch_slot_with_the_last_branch() -> None:
    table = SlotTable(3)
    table.slot_for("a")
    assert table.branch_slot("a", "r1") == table.branch_slot("a", "r2") == 1  # shared
    table.branch_ended("a", "r1")
    assert table.slot_for("b") == 2  # r2 still runs in slot 1
    table.branch_ended("a", "r2")
    table.branch_ended("a", "r2")  # twice, or for a branch never placed: nothing happens
    assert len(table) == 2 and table.slot_for("c") == 1
    assert table.branch_slot("a", "r3") is None  # every slot holds a context
    table.branch_ended("a", "r3")
    assert len(table) == 3


def test_program_view_reports_the_policys_restore_order() -> None:
    config = ProxyConfig(
        ("http://b:1",), prepare_window=2, thunder=ThunderConfig(decay_half_life_s=0)
    )
    proxy = RouterProxy(config, count_text=len)
    core = proxy.core
    core.add_backend("http://b:1", 1000)
    now = 0.0
    for program_id, tokens in (("Z", 100), ("I1", 300), ("I2", 300), ("H", 200)):
        now += 1
        core.request_arrived(program_id, f"{program_id}-1", tokens, now)
        core.request_finished(f"{program_id}-1", now, total_tokens=tokens)
    core.request_arrived("Z", "z-a", 0, now)
    core.request_arrived("Z", "z-b", 0, now)
    core.request_finished("z-a", now, total_tokens=850)  # over capacity: I1, I2, H pause
    assert core.waiting() == ("I1", "I2", "H")
    core.request_arrived("H", "h-1", 5, now)  # held: H comes back first
    views = {p: proxy.program_view(p) for p in ("H", "I1", "I2")}
    positions = {p: (v["queue_position"], v["restoring_soon"]) for p, v in views.items() if v}
    assert positions == {"H": (0, True), "I1": (1, True), "I2": (2, False)}

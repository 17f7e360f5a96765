"""Lookahead tags travel from the HTTP body to the scheduler's `Req` through SGLang's own code:
ChatCompletionRequest -> OpenAIServingChat._convert_to_internal_request -> the plugin's ingress
merge -> TokenizerManager._create_tokenized_object -> msgpack IPC -> Req."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, TokenizeRequest
from sglang.srt.managers import io_struct
from sglang.srt.managers.io_struct import (
    GenerateReqInput,
    TokenizedGenerateReqInput,
    sock_recv,
    sock_send,
)
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.tokenizer_manager import TokenizerManager
from sglang.srt.observability.req_time_stats import APIServerReqTimeStats
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang_chat import make_chat_serving, make_tokenizer_manager
from starlette.requests import Request

from lookahead_sdk.base.protocol import TAG_FIELDS, merge_tag_fields
from lookahead_sdk.base.protocol import RequestTags as LookaheadTags
from lookahead_sdk.sglang_plugin.descriptors import describe, request_tags
from lookahead_sdk.sglang_plugin.ingress import attach_tags, json_body, tagged_generate_request

MESSAGES = [
    {"role": "system", "content": "you are a helpful agent"},
    {"role": "user", "content": "summarize the tool output"},
]
LOOKAHEAD_TAGS = {
    "priority_class": "be",
    "is_lookahead": True,
    "lookahead_group_id": "prog-1:summarize:s3",
    "program_id": "prog-1",
    "commit_deadline_ms": 4000,
}


def starlette_request(body: dict[str, Any], path: str = "/v1/chat/completions") -> Request:
    """A real Starlette request whose body has been read once, as FastAPI does before a route."""
    payload = json.dumps(body).encode()
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": payload, "more_body": False}

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
    }
    return Request(scope, receive)


@pytest.fixture(params=["pickle", "msgpack"])
def ipc_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """SGLang 0.5.23 sends requests to the scheduler pickled by default
    (SGLANG_USE_PICKLE_IPC=1) and msgpack-encoded otherwise: check both."""
    monkeypatch.setattr(io_struct, "_USE_PICKLE_IPC", request.param == "pickle")
    return request.param


def scheduler_req(adapted: GenerateReqInput) -> Req:
    """What the scheduler process builds from the tokenizer manager's IPC message: SGLang's own
    tokenizer-side conversion, its socket send/receive (over an in-process zmq pair), and the
    `Req(...)` call of `Scheduler._handle_generate_request`."""
    manager = make_tokenizer_manager()
    manager.sampling_params_class = SamplingParams
    manager.tokenized_generate_req_type = TokenizedGenerateReqInput
    adapted.normalize_batch_and_arguments()
    manager.rid_to_state = {adapted.rid: SimpleNamespace(time_stats=APIServerReqTimeStats())}
    tokenized = TokenizerManager._create_tokenized_object(
        manager, adapted, adapted.text or "", adapted.input_ids
    )
    context = zmq.Context.instance()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    address = f"inproc://lookahead-{id(tokenized)}"
    try:
        receiver.bind(address)
        sender.connect(address)
        tokenized.wrap_pickle_fields()
        sock_send(sender, tokenized)
        received = sock_recv(receiver)
    finally:
        sender.close(linger=0)
        receiver.close(linger=0)
    assert isinstance(received, TokenizedGenerateReqInput)
    received.unwrap_pickle_fields()
    return Req(
        received.rid,
        received.input_text,
        received.input_ids,
        received.sampling_params,
        priority=received.priority,
        time_stats=received.time_stats,
    )


async def test_chat_request_model_drops_top_level_tags() -> None:
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": MESSAGES, **LOOKAHEAD_TAGS}
    )
    assert not any(name in request.model_dump() for name in TAG_FIELDS)


async def test_top_level_chat_tags_reach_the_scheduler_req(ipc_mode: str) -> None:
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 8, **LOOKAHEAD_TAGS}
    raw = starlette_request(body)
    await raw.body()  # FastAPI reads the body to build ChatCompletionRequest
    chat, _ = make_chat_serving()
    adapted, _ = chat._convert_to_internal_request(ChatCompletionRequest.model_validate(body), raw)
    attach_tags(adapted, await json_body(raw))
    req = scheduler_req(adapted)

    assert request_tags(req) == LookaheadTags.from_mapping(LOOKAHEAD_TAGS)
    descriptor = describe(req, request_tags(req), promoted_groups=set())
    assert descriptor.priority_class == "be" and descriptor.is_lookahead
    assert descriptor.lookahead_group_id == LOOKAHEAD_TAGS["lookahead_group_id"]
    assert descriptor.commit_deadline_ms == pytest.approx(
        descriptor.arrival_ms + LOOKAHEAD_TAGS["commit_deadline_ms"]
    )
    assert descriptor.remaining_prefill_tokens == len(adapted.input_ids)


async def test_custom_params_carrier_needs_no_hook(ipc_mode: str) -> None:
    body = {"model": "m", "messages": MESSAGES, "custom_params": LOOKAHEAD_TAGS, "priority": 10}
    chat, _ = make_chat_serving()
    adapted, _ = chat._convert_to_internal_request(ChatCompletionRequest.model_validate(body), None)
    req = scheduler_req(adapted)
    assert request_tags(req) == LookaheadTags.from_mapping(LOOKAHEAD_TAGS)
    assert req.priority == 10


async def test_generate_body_top_level_custom_params_are_lifted(ipc_mode: str) -> None:
    """`/generate` has `custom_params` only inside `sampling_params`; a client that puts it at
    the top level (as for chat) still gets it through."""
    body = {
        "input_ids": [3, 4, 5, 6],
        "sampling_params": {"max_new_tokens": 0},
        "custom_params": LOOKAHEAD_TAGS,
    }
    adapted = GenerateReqInput(input_ids=body["input_ids"], sampling_params=body["sampling_params"])
    raw = starlette_request(body, path="/generate")
    attach_tags(adapted, await json_body(raw))
    req = scheduler_req(adapted)
    assert request_tags(req) == LookaheadTags.from_mapping(LOOKAHEAD_TAGS)
    assert req.sampling_params.max_new_tokens == 0 and req.is_prefill_only


@pytest.mark.parametrize(
    ("tags", "field"),
    [
        ({"priority_class": "urgent"}, "priority_class"),
        ({"is_lookahead": "yes", "lookahead_group_id": "g"}, "is_lookahead"),
        ({"is_lookahead": True}, "lookahead_group_id"),
        ({"commit_deadline_ms": -5}, "commit_deadline_ms"),
        ({"program_id": ""}, "program_id"),
    ],
)
async def test_invalid_tags_are_rejected_naming_the_field(tags: dict[str, Any], field: str) -> None:
    adapted = GenerateReqInput(input_ids=[1, 2], sampling_params={"max_new_tokens": 1})
    with pytest.raises(ValueError, match=field):
        attach_tags(adapted, tags)


async def test_ingress_hook_merges_tags_before_sglang_sees_the_request() -> None:
    seen: list[dict[str, Any]] = []
    closed: list[bool] = []

    async def original(manager: Any, obj: GenerateReqInput, request: Any) -> Any:
        seen.append(dict(obj.sampling_params["custom_params"]))
        try:
            yield {"text": "a"}
            yield {"text": "b"}
        finally:
            closed.append(True)

    body = {"model": "m", "messages": MESSAGES, **LOOKAHEAD_TAGS}
    raw = starlette_request(body)
    await raw.body()
    obj = GenerateReqInput(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 4})
    outputs = [item async for item in tagged_generate_request(original, object(), obj, raw)]

    assert outputs == [{"text": "a"}, {"text": "b"}]
    assert seen == [LookaheadTags.from_mapping(LOOKAHEAD_TAGS).to_custom_params()]
    assert closed == [True]


async def test_tokenize_endpoint_gives_the_chat_prompt_ids() -> None:
    """The warmer's source of exact token ids: `/v1/tokenize` with the chat messages renders as
    the chat request does; `add_generation_prompt=false` stops before the assistant opener."""
    chat, tokenize = make_chat_serving()
    adapted, _ = chat._convert_to_internal_request(
        ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES}), None
    )
    with_prompt = tokenize._tokenize_chat_request(TokenizeRequest(messages=MESSAGES))
    prefix = tokenize._tokenize_chat_request(
        TokenizeRequest(messages=MESSAGES, add_generation_prompt=False)
    )
    assert with_prompt == list(adapted.input_ids)
    assert len(prefix) < len(with_prompt) and with_prompt[: len(prefix)] == prefix


# Ids travel in a header too: printable ASCII (base.protocol.check_id).
ids = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=8)
tag_values = st.fixed_dictionaries(
    {},
    optional={
        "priority_class": st.sampled_from(["lc", "be"]),
        "program_id": ids,
        "commit_deadline_ms": st.integers(0, 10**7),
        "slo_ttft_ms": st.floats(0, 1e6),
        "promote_group_id": ids,
    },
)


@given(tag_values, st.booleans(), ids)
def test_tags_survive_the_custom_params_round_trip(
    fields: dict[str, Any], is_lookahead: bool, group: str
) -> None:
    if is_lookahead:
        fields = {**fields, "is_lookahead": True, "lookahead_group_id": group}
    tags = LookaheadTags.from_mapping(fields)
    assert LookaheadTags.from_mapping(tags.to_custom_params()) == tags
    params = SamplingParams(custom_params=tags.to_custom_params())
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(params), type=SamplingParams)
    assert LookaheadTags.from_mapping(decoded.custom_params or {}) == tags


@given(tag_values, tag_values)
def test_custom_params_win_over_top_level_fields(
    top: dict[str, Any], nested: dict[str, Any]
) -> None:
    merged = merge_tag_fields(top, nested) or {}
    for name in TAG_FIELDS:
        if name in nested:
            assert merged[name] == nested[name]
        elif name in top:
            assert merged[name] == top[name]
        else:
            assert name not in merged

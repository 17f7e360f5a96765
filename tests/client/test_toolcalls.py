"""Tool calls by constrained decoding: the schema offered, and decoding replies whole or streamed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk.client.toolcalls import (
    StreamDecoder,
    call_schema,
    call_text,
    decode_reply,
    render_tool_calls,
)


def tool(name: str, properties: dict | None = None) -> dict:
    parameters = {
        "type": "object",
        "properties": properties or {"path": {"type": "string"}},
        "required": ["path"],
    }
    return {
        "type": "function",
        "function": {"name": name, "description": name, "parameters": parameters},
    }


TOOLS = [tool("read_source"), tool("read_offloaded", {"key": {"type": "string"}})]


def variants(schema: dict) -> list[dict]:
    return schema.get("anyOf", [schema])


def test_auto_offers_every_tool_and_a_plain_answer() -> None:
    offered = variants(call_schema(TOOLS, "auto"))
    names = [v["properties"]["name"]["const"] for v in offered if "name" in v["properties"]]
    assert names == ["read_source", "read_offloaded"]
    assert sum("response" in v["properties"] for v in offered) == 1
    for variant, spec in zip(offered, TOOLS, strict=False):
        assert variant["properties"]["arguments"] == spec["function"]["parameters"]


def test_required_and_named_choices_restrict_the_reply() -> None:
    required = variants(call_schema(TOOLS, "required"))
    assert all("name" in v["properties"] for v in required) and len(required) == 2
    forced = variants(
        call_schema(TOOLS, {"type": "function", "function": {"name": "read_offloaded"}})
    )
    assert [v["properties"]["name"]["const"] for v in forced] == ["read_offloaded"]


def test_no_constraint_without_tools_or_with_none() -> None:
    assert call_schema([], "auto") is None
    assert call_schema(TOOLS, "none") is None


@pytest.mark.parametrize(
    "choice", ["sometimes", {"type": "function", "function": {"name": "missing"}}]
)
def test_bad_tool_choice_is_a_clear_error(choice: object) -> None:
    with pytest.raises(ValueError, match="tool_choice"):
        call_schema(TOOLS, choice)


def test_a_tool_without_a_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="function"):
        call_schema([{"type": "function", "function": {}}])


def test_whole_replies_decode_to_calls_answers_or_text() -> None:
    call = decode_reply('{\n  "name": "read_source",\n  "arguments": {"path": "csv.py"}\n}')
    assert call.content is None and call.finish_reason == "tool_calls"
    assert call.tool_calls[0]["function"]["name"] == "read_source"
    assert json.loads(call.tool_calls[0]["function"]["arguments"]) == {"path": "csv.py"}
    assert call.tool_calls[0]["id"].startswith("call_")
    answer = decode_reply('{"response": "all fine"}')
    assert answer.content == "all fine" and answer.tool_calls is None
    prose = decode_reply("plain words")
    assert prose.content == "plain words" and prose.tool_calls is None


def test_history_calls_are_rendered_as_what_the_model_writes() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_source", "arguments": '{"path": "a.py"}'},
    }
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
    ]
    rendered = render_tool_calls(messages)
    assert rendered[0] == messages[0] and rendered[2] == messages[2]
    assert rendered[1]["tool_calls"] == [call]
    assert decode_reply(rendered[1]["content"]).tool_calls[0]["function"]["name"] == "read_source"
    assert messages[1]["content"] is None  # the caller's messages are not modified
    assert json.loads(call_text(call)) == {"name": "read_source", "arguments": {"path": "a.py"}}


# -- streaming equals whole decoding, however the reply is split ---------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=16)


def split_points(text: str) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, len(text)), max_size=12).map(sorted)


def stream(text: str, cuts: list[int]) -> tuple[str | None, str, str, str]:
    """(tool name, arguments, content, finish) from feeding `text` in pieces."""
    decoder = StreamDecoder()
    deltas = []
    previous = 0
    for cut in [*cuts, len(text)]:
        deltas += decoder.feed(text[previous:cut])
        previous = cut
    tail, finish = decoder.finish()
    deltas += tail
    name = None
    arguments = content = ""
    for delta in deltas:
        for call in delta.get("tool_calls", ()):
            name = call["function"].get("name", name)
            arguments += call["function"].get("arguments", "")
        content += delta.get("content", "")
    return name, arguments, content, finish


@settings(max_examples=150, deadline=None)
@given(
    name=names,
    arguments=st.dictionaries(st.text(max_size=6), json_values, max_size=4),
    indent=st.sampled_from([None, 2, 4]),
    data=st.data(),
)
def test_streamed_calls_equal_whole_calls(
    name: str, arguments: dict, indent: int | None, data: st.DataObject
) -> None:
    text = json.dumps(
        {"name": name, "arguments": arguments}, indent=indent, ensure_ascii=data.draw(st.booleans())
    )
    streamed_name, streamed_arguments, content, finish = stream(text, data.draw(split_points(text)))
    whole = decode_reply(text).tool_calls[0]["function"]
    assert streamed_name == whole["name"] == name
    assert json.loads(streamed_arguments) == json.loads(whole["arguments"]) == arguments
    assert content == "" and finish == "tool_calls"


@settings(max_examples=150, deadline=None)
@given(answer=st.text(max_size=40), indent=st.sampled_from([None, 2]), data=st.data())
def test_streamed_answers_equal_whole_answers(
    answer: str, indent: int | None, data: st.DataObject
) -> None:
    text = json.dumps({"response": answer}, indent=indent, ensure_ascii=data.draw(st.booleans()))
    name, arguments, content, finish = stream(text, data.draw(split_points(text)))
    assert content == decode_reply(text).content == answer
    assert name is None and arguments == "" and finish == "stop"


def test_a_reply_cut_inside_the_arguments_finishes_with_length() -> None:
    _, arguments, _, finish = stream('{"name": "read_source", "arguments": {"path": "cs', [5, 30])
    assert finish == "length" and arguments == '{"path":"cs'


def test_unconstrained_prose_streams_through_unchanged() -> None:
    name, _, content, finish = stream("The code looks fine.", [3, 9])
    assert name is None and content == "The code looks fine." and finish == "stop"

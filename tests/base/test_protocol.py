"""The wire protocol: one tags type, written into every wire form and read back from each."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_sdk.base.protocol import (
    DYNAMO_SESSION_HEADER,
    NUMERIC_PRIORITY,
    PROGRAM_HEADER,
    RequestTags,
    merge_tag_fields,
    program_id_of,
    release_body,
)

ids = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40
)
tags_strategy = st.builds(
    RequestTags,
    program_id=ids,
    priority_class=st.sampled_from(["lc", "be"]),
    commit_deadline_ms=st.none() | st.integers(0, 10**7),
    slo_ttft_ms=st.none() | st.floats(0, 1e6, allow_nan=False),
    slo_tbt_ms=st.none() | st.integers(0, 10**4),
) | st.builds(lambda program, group: RequestTags(program).lookahead(group), ids, ids)


@given(tags_strategy)
def test_every_wire_form_reads_back_as_the_same_tags(tags: RequestTags) -> None:
    assert RequestTags.from_mapping(tags.to_body()) == tags
    assert RequestTags.from_request(tags.to_body()) == tags
    sglang = tags.body_fields("sglang")
    assert sglang["priority"] == NUMERIC_PRIORITY[tags.priority_class]
    assert RequestTags.from_request({"custom_params": sglang["custom_params"]}) == tags
    # SGLang's native /generate carries them in sampling_params.custom_params.
    generate = {"sampling_params": {"custom_params": tags.to_custom_params()}}
    assert RequestTags.from_request(generate) == tags
    assert tags.body_fields("vllm")["priority"] == NUMERIC_PRIORITY[tags.priority_class]


def test_identity_comes_from_the_body_our_header_or_dynamos_fields() -> None:
    assert program_id_of({"program_id": "a"}, {PROGRAM_HEADER: "b"}) == "a"
    assert program_id_of({}, {PROGRAM_HEADER.lower(): "b"}) == "b"
    assert program_id_of({}, {DYNAMO_SESSION_HEADER: "c"}) == "c"
    assert program_id_of({"nvext": {"agent_context": {"trajectory_id": "d"}}}) == "d"
    assert program_id_of({"messages": []}, {}) is None
    tags = RequestTags.from_request({"priority_class": "be"}, {DYNAMO_SESSION_HEADER: "c"})
    assert tags == RequestTags("c", priority_class="be")
    assert RequestTags.from_request({"messages": []}, {"content-type": "x"}) is None


def test_custom_params_win_over_top_level_fields() -> None:
    merged = merge_tag_fields({"program_id": "top", "priority_class": "be"}, {"program_id": "cp"})
    assert merged == {"program_id": "cp", "priority_class": "be"}
    assert merge_tag_fields({"messages": []}, None) is None  # untagged stays untouched


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"program_id": "agent-é"}, "program_id must be printable ASCII"),
        ({"program_id": "a\r\nX-Injected: 1"}, "program_id must be printable ASCII"),
        ({"program_id": "agent\n7"}, "program_id must be printable ASCII"),
        ({"program_id": "  "}, "program_id must be non-empty"),
        ({"program_id": ""}, "program_id must be non-empty"),
        ({"program_id": "x" * 300}, "program_id must be at most"),
        ({"program_id": 7}, "program_id must be a string"),
        ({"priority_class": "urgent"}, "priority_class must be 'lc'"),
        ({"is_lookahead": "yes", "lookahead_group_id": "g"}, "is_lookahead must be true or false"),
        ({"is_lookahead": True}, "lookahead_group_id is required"),
        ({"commit_deadline_ms": -1}, "commit_deadline_ms must be a number"),
        ({"slo_ttft_ms": float("nan")}, "slo_ttft_ms must be a number"),
        ({"slo_tbt_ms": True}, "slo_tbt_ms must be a number"),
    ],
)
def test_a_malformed_field_is_named(fields: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RequestTags.from_mapping(fields)
    with pytest.raises(ValueError, match=match):
        RequestTags(**fields)


def test_malformed_fields_read_from_a_request_name_where_they_were() -> None:
    with pytest.raises(ValueError, match=r"custom_params\.priority_class"):
        RequestTags.from_request({"custom_params": {"priority_class": "x"}})
    with pytest.raises(ValueError, match="custom_params must be a JSON object"):
        RequestTags.from_request({"custom_params": "x"})


def test_client_side_hints_and_unset_fields_never_go_on_the_wire() -> None:
    tags = RequestTags("p").lookahead("g").extending_live_context()
    body = tags.to_body()
    assert "extends_live_context" not in body and "commit_deadline_ms" not in body
    assert "is_lookahead" not in RequestTags("p").to_body()
    assert RequestTags("p").headers() == {PROGRAM_HEADER: "p"}
    assert RequestTags().headers() == {}


def test_a_promoted_lookahead_promotes_its_group_and_stays_best_effort_by_nature() -> None:
    promoted = RequestTags("p").lookahead("g").promoted()
    assert promoted.priority_class == "lc" and promoted.is_best_effort
    assert promoted.group_to_promote == "g"
    assert RequestTags("p").lookahead("g").group_to_promote is None


def test_release_body_checks_the_id() -> None:
    assert release_body("agent-7") == {"program_id": "agent-7"}
    with pytest.raises(ValueError, match="program_id"):
        release_body("a\nb")


def test_the_router_identity_and_the_tags_agree_on_the_program() -> None:
    """`custom_params` wins for the program id as for every other tag, in both readers."""
    body = {"program_id": "top", "custom_params": {"program_id": "carried"}}
    tags = RequestTags.from_request(body)
    assert tags is not None and tags.program_id == "carried"
    assert program_id_of(body) == "carried"
    assert program_id_of({"program_id": "top"}, {"X-Program-Id": "header"}) == "top"

"""Hypothesis strategies for realistic agent histories (tool calls answered by tool results)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from lookahead_sdk.base.messages import Message


@st.composite
def agent_history(draw: st.DrawFn, max_steps: int = 14) -> list[Message]:
    messages: list[Message] = [
        {"role": "system", "content": "You analyze code."},
        {"role": "user", "content": "Review the repository."},
    ]
    for step in range(draw(st.integers(0, max_steps))):
        calls = draw(st.integers(0, 2))
        if calls == 0:
            messages.append(
                {
                    "role": "assistant",
                    "content": draw(st.sampled_from(["ok", "looking", "noted " * 30])),
                }
            )
            continue
        tool_calls = [
            {
                "id": f"c{step}_{i}",
                "type": "function",
                "function": {"name": "read", "arguments": json.dumps({"n": i})},
            }
            for i in range(calls)
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
        for call in tool_calls:
            size = draw(st.sampled_from([5, 40, 300, 900]))
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": f"line {step}\n" * size}
            )
    return messages


def assert_tool_pairs_intact(messages: list[Message]) -> None:
    """Every tool result follows the assistant message that called it, and every call is answered."""
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, "tool result without its call"
            open_calls.discard(message["tool_call_id"])
            continue
        assert not open_calls, "tool call left without its result"
        if message["role"] == "assistant" and message.get("tool_calls"):
            open_calls = {call["id"] for call in message["tool_calls"]}
    assert not open_calls

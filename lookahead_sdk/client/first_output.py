"""Where a streamed reply's first output is: the chunk a user (or an agent framework) sees as the
first token.

A server's first body bytes are not always output. llama.cpp streams a tool call's tokens
through its tool-call parser, which sends the call only once it has parsed its name: a
LangChain agent on the embedded engine saw its first token 0.2-1.1 s after the first chunk
arrived. Best-effort work admitted at the first byte ran during that wait (the slack gate took
the request for decoding), and it came out of the agent's TTFT. So the transports tell the
slack gate and the request timeline about the first chunk that carries output, found by reading
the few server-sent events before it.
"""

from __future__ import annotations

import json
from typing import Any

# Fields that carry output in the streamed formats we serve: OpenAI chat (`delta.content`,
# `delta.reasoning_content`, `delta.tool_calls`), OpenAI completions (`text`), llama.cpp
# `/completion` (`content`), SGLang `/generate` (`text`).
DELTA_OUTPUT_FIELDS = ("content", "reasoning_content", "tool_calls")
EVENT_OUTPUT_FIELDS = ("content", "text")


def event_carries_output(event: Any) -> bool:
    """One server-sent event's JSON: does it carry model output (or end the wait: an error)?"""
    if not isinstance(event, dict):
        return True  # not a format we know: its arrival is all we can go by
    if "error" in event:
        return True
    choices = event.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict) and any(delta.get(f) for f in DELTA_OUTPUT_FIELDS):
                return True
            if choice.get("text") or choice.get("finish_reason"):
                return True
        return False
    return any(event.get(f) for f in EVENT_OUTPUT_FIELDS) or bool(event.get("stop"))


class FirstOutput:
    """Fed a response's body chunks in order, says which one carries its first output. A body
    that is not a stream of server-sent events (a whole JSON reply) has it in its first chunk."""

    def __init__(self, *, streamed: bool) -> None:
        self._streamed = streamed
        self._partial = b""  # a line split across chunks
        self.seen = False

    def feed(self, chunk: bytes) -> bool:
        """True from the chunk that carries the first output on."""
        if self.seen or not chunk:
            return self.seen
        if not self._streamed:
            self.seen = True
            return True
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            if self._line_carries_output(line.strip()):
                self.seen, self._partial = True, b""
                return True
        return False

    @staticmethod
    def _line_carries_output(line: bytes) -> bool:
        if not line.startswith(b"data:"):
            return False  # event names, comments (keep-alive pings), blank separators
        payload = line[len(b"data:") :].strip()
        if payload == b"[DONE]":
            return True
        try:
            return event_carries_output(json.loads(payload))
        except ValueError:
            return True

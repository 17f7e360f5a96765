"""Tool calls from a model that cannot emit them, through constrained decoding.

llama-server (`--jinja`) returns OpenAI `tool_calls` only when the model's chat template can
render tools. SmolLM2's template cannot: the server picks its "Content-only" chat format, drops
`tools` from the prompt and answers in prose, even with `tool_choice="required"`. It does honour
`response_format` json_schema (a grammar over the output). So a request offering tools is
rewritten to a schema admitting exactly one call of an offered tool, or, under
`tool_choice="auto"`, a plain answer; the constrained JSON reply is turned back into
`tool_calls`:

    {"name": "<tool>", "arguments": {...}}      -> one tool call
    {"response": "<text>"}                      -> an ordinary assistant answer

Earlier assistant tool calls in the history are written back in that same format as the
message content (`render_tool_calls`), so the model sees its own calls and the server's prefix
cache keeps the tokens it generated. One call per reply (no parallel calls).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lookahead_sdk.base.messages import Message

ANSWER_KEY = "response"
_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_ANSWER_HEAD = re.compile(r'\s*\{\s*"response"\s*:\s*"')
_HEX = frozenset("0123456789abcdefABCDEF")


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _tool_name(tool: dict[str, Any]) -> str:
    function = tool.get("function") if isinstance(tool, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"each tool must look like {{'type': 'function', 'function': {{'name': ...}}}}, got {tool!r}"
        )
    return name


def _forced_tool(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function") or {}
        return function.get("name") if isinstance(function, dict) else None
    return None


def call_schema(
    tools: Sequence[dict[str, Any]], tool_choice: Any = "auto"
) -> dict[str, Any] | None:
    """The JSON schema of one reply offering `tools`; None when no call may be made."""
    if not tools or tool_choice == "none":
        return None
    if tool_choice not in (None, "auto", "required") and _forced_tool(tool_choice) is None:
        raise ValueError(
            f"tool_choice must be 'auto', 'required', 'none' or a function choice, got {tool_choice!r}"
        )
    forced = _forced_tool(tool_choice)
    variants: list[dict[str, Any]] = []
    for tool in tools:
        name = _tool_name(tool)
        if forced is not None and name != forced:
            continue
        parameters = tool["function"].get("parameters") or {"type": "object", "properties": {}}
        variants.append(
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    if forced is not None and not variants:
        raise ValueError(f"tool_choice names {forced!r}, which is not among the offered tools")
    if tool_choice in (None, "auto"):
        variants.append(
            {
                "type": "object",
                "properties": {ANSWER_KEY: {"type": "string"}},
                "required": [ANSWER_KEY],
                "additionalProperties": False,
            }
        )
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def call_text(call: dict[str, Any]) -> str:
    """A tool call in the wire format the model writes (how it reads its own earlier calls)."""
    function = call.get("function") or {}
    arguments: Any = function.get("arguments") or "{}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass  # kept as the raw string the model produced
    return json.dumps(
        {"name": function.get("name", ""), "arguments": arguments}, ensure_ascii=False
    )


def render_tool_calls(messages: Sequence[Message]) -> list[Message]:
    """Assistant tool-call messages without text get their calls as content."""
    rendered: list[Message] = []
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls and not message.get("content"):
            message = {**message, "content": "\n".join(call_text(call) for call in calls)}
        rendered.append(message)
    return rendered


@dataclass(frozen=True)
class DecodedReply:
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"

    def message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


def tool_call(name: str, arguments: str, call_id: str | None = None) -> dict[str, Any]:
    return {
        "id": call_id or new_call_id(),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def decode_reply(text: str) -> DecodedReply:
    """A whole constrained reply as an assistant message; anything else stays plain text."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return DecodedReply(text)
    if isinstance(parsed, dict) and isinstance(parsed.get("name"), str) and "arguments" in parsed:
        arguments = json.dumps(parsed["arguments"], ensure_ascii=False, separators=(",", ":"))
        return DecodedReply(None, [tool_call(parsed["name"], arguments)])
    if isinstance(parsed, dict) and isinstance(parsed.get(ANSWER_KEY), str):
        return DecodedReply(parsed[ANSWER_KEY])
    return DecodedReply(text)


StreamMode = Literal["detect", "call", "answer", "raw", "done"]


@dataclass
class StreamDecoder:
    """Decodes a constrained reply as it streams, into OpenAI chat-completion deltas.

    A call is announced (id and name) as soon as its name is complete, then its arguments stream
    through (whitespace outside strings dropped); an answer streams as decoded text.
    """

    call_id: str = field(default_factory=new_call_id)
    mode: StreamMode = "detect"
    text: str = ""
    called: bool = False
    _pos: int = 0
    _depth: int = 0
    _in_string: bool = False
    _escaped: bool = False
    _answer_raw: str = ""
    _answer_safe: int = 0  # length of _answer_raw that ends on a whole character or escape
    _answer_escape: str | None = None  # an escape sequence being read
    _answer_sent: int = 0

    def feed(self, piece: str) -> list[dict[str, Any]]:
        self.text += piece
        if self.mode == "detect":
            return self._detect()
        if self.mode == "call":
            return self._call_arguments()
        if self.mode == "answer":
            return self._answer()
        if self.mode == "raw":
            return [{"content": piece}] if piece else []
        return []

    def finish(self) -> tuple[list[dict[str, Any]], str]:
        """Flush what is left and the finish_reason to report."""
        if self.mode == "detect":
            self.mode = "raw"
            return ([{"content": self.text}] if self.text else []), "stop"
        if self.mode == "call":  # cut off (max_tokens) inside the arguments
            return [], "length"
        if self.called:
            return [], "tool_calls"
        return [], "stop"

    def _detect(self) -> list[dict[str, Any]]:
        stripped = self.text.lstrip()
        if stripped and not stripped.startswith("{"):
            self.mode = "raw"
            return [{"content": self.text}]
        if match := _CALL_HEAD.match(self.text):
            self.mode, self._pos, self.called = "call", match.end(), True
            name = json.loads(f'"{match.group(1)}"')
            header = {
                "index": 0,
                "id": self.call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            return [{"tool_calls": [header]}, *self._call_arguments()]
        if match := _ANSWER_HEAD.match(self.text):
            self.mode, self._pos = "answer", match.end()
            return self._answer()
        return []

    def _call_arguments(self) -> list[dict[str, Any]]:
        out: list[str] = []
        for ch in self.text[self._pos :]:
            self._pos += 1
            if self._in_string:
                out.append(ch)
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
                continue
            if ch.isspace():
                continue
            out.append(ch)
            if ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth <= 0:
                    self.mode = "done"
                    break
        arguments = "".join(out)
        return (
            [{"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}]
            if arguments
            else []
        )

    def _answer(self) -> list[dict[str, Any]]:
        for ch in self.text[self._pos :]:
            self._pos += 1
            if self._answer_escape is not None:
                self._answer_escape += ch
                self._answer_raw += ch
                unicode = self._answer_escape.startswith("u")
                malformed = unicode and len(self._answer_escape) > 1 and ch not in _HEX
                if not unicode or len(self._answer_escape) == 5 or malformed:
                    self._answer_escape = None
                    self._answer_safe = len(self._answer_raw)
                continue
            if ch == "\\":
                self._answer_escape = ""
                self._answer_raw += ch
                continue
            if ch == '"':
                self.mode = "done"
                break
            self._answer_raw += ch
            self._answer_safe = len(self._answer_raw)
        try:
            decoded = json.loads(f'"{self._answer_raw[: self._answer_safe]}"')
        except ValueError:  # a malformed escape: show it as written
            decoded = self._answer_raw[: self._answer_safe]
        if self.mode != "done" and decoded and 0xD800 <= ord(decoded[-1]) <= 0xDBFF:
            decoded = decoded[:-1]  # half a surrogate pair: wait for the other half
        new = decoded[self._answer_sent :]
        self._answer_sent += len(new)
        return [{"content": new}] if new else []

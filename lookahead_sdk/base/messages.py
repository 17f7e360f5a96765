"""OpenAI chat-format messages: validation, stable digests, and tool-call grouping."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

Message = dict[str, Any]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
SYSTEM_ROLES = frozenset({"system", "developer"})


def validate_message(message: object, index: int | None = None) -> Message:
    """Check one message is OpenAI chat format; raise a TypeError/ValueError naming the field."""
    where = "message" if index is None else f"messages[{index}]"
    if not isinstance(message, dict):
        raise TypeError(
            f"{where} must be a dict in OpenAI chat format like "
            f"{{'role': 'user', 'content': '...'}}, got {type(message).__name__}"
        )
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}.role must be one of {sorted(ROLES)}, got {role!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise TypeError(
            f"{where}.content must be a string, a list of content parts or None, "
            f"got {type(content).__name__}"
        )
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise ValueError(f"{where}.tool_call_id is required on a role='tool' message (a string)")
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            raise ValueError(f"{where}.tool_calls is only allowed on role='assistant' messages")
        if not isinstance(tool_calls, list) or not all(
            isinstance(call, dict) and isinstance(call.get("id"), str) for call in tool_calls
        ):
            raise ValueError(f"{where}.tool_calls must be a list of dicts, each with a string 'id'")
        for position, call in enumerate(tool_calls):
            function = call.get("function")
            if function is not None and not isinstance(function, dict):
                raise ValueError(
                    f"{where}.tool_calls[{position}].function must be a dict like "
                    f"{{'name': ..., 'arguments': '...'}}, got {type(function).__name__}"
                )
    if content is None and not tool_calls and role != "assistant":
        raise ValueError(f"{where}.content is required on a role={role!r} message")
    return message


def validate_messages(messages: object) -> list[Message]:
    if isinstance(messages, str | bytes | dict) or not isinstance(messages, Iterable):
        raise TypeError("messages must be a list of OpenAI chat-format dicts")
    return [validate_message(message, index) for index, message in enumerate(messages)]


def copy_message(message: Message) -> Message:
    """A copy deep enough that later edits by the caller cannot change what we hashed."""
    return _copy_json(message)


def _copy_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_json(item) for item in value]
    return value


def message_digest(message: Message, where: str = "message") -> bytes:
    """A stable digest of a message; ValueError naming `where` for one that is not JSON text
    (a set, bytes, a lone surrogate...): it could never be sent to a server either."""
    try:
        encoded = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.blake2b(encoded.encode(), digest_size=16).digest()
    except (TypeError, ValueError, UnicodeEncodeError) as error:
        raise ValueError(f"{where} must hold only JSON values and valid text: {error}") from None


def chain_digest(previous: bytes, message_digest_: bytes) -> bytes:
    """Prefix signature: the digest of prefix[:i+1] from the digest of prefix[:i]."""
    return hashlib.blake2b(previous + message_digest_, digest_size=16).digest()


def content_text(message: Message) -> str:
    """All text a message contributes to the prompt: content parts plus tool-call names/arguments."""
    content = message.get("content")
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") in (None, "text")
        ]
    else:
        parts = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(str(function.get("name", "")))
        parts.append(str(function.get("arguments", "")))
    return "\n".join(part for part in parts if part)


def with_content(message: Message, content: str) -> Message:
    return {**message, "content": content}


def calls_tools(message: Message) -> bool:
    """An assistant message with tool calls (their results follow it)."""
    return message.get("role") == "assistant" and bool(message.get("tool_calls"))


def leading_system_count(messages: Sequence[Message]) -> int:
    count = 0
    for message in messages:
        if message.get("role") not in SYSTEM_ROLES:
            break
        count += 1
    return count


def atomic_groups(messages: Sequence[Message], start: int = 0) -> list[tuple[int, int]]:
    """Split messages[start:] into [begin, end) groups that must be kept or dropped together.

    An assistant message with tool_calls is grouped with the tool results answering it, so no
    transform ever separates a tool call from its result (servers reject orphaned tool results).
    """
    groups: list[tuple[int, int]] = []
    index = start
    while index < len(messages):
        end = index + 1
        message = messages[index]
        if calls_tools(message):
            pending = {call["id"] for call in message["tool_calls"]}
            while end < len(messages) and messages[end].get("role") == "tool" and pending:
                pending.discard(messages[end].get("tool_call_id"))
                end += 1
        groups.append((index, end))
        index = end
    return groups


def answered_prefix_end(messages: Sequence[Message], start: int = 0) -> int:
    """Length of the longest prefix with no tool call still waiting for its result."""
    end = len(messages)
    for begin, group_end in reversed(atomic_groups(messages, start)):
        message = messages[begin]
        answered = {m.get("tool_call_id") for m in messages[begin + 1 : group_end]}
        if message.get("role") == "assistant" and any(
            call["id"] not in answered for call in message.get("tool_calls") or ()
        ):
            end = begin
        break
    return end


def orphaned_results(messages: Sequence[Message]) -> list[int]:
    """Indices of tool results that follow no call of theirs (the nearest assistant turn before
    them did not make it): a context servers reject."""
    called: set[str] = set()
    orphans = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            called = {call["id"] for call in message.get("tool_calls") or ()}
        elif role == "tool" and message.get("tool_call_id") not in called:
            orphans.append(index)
    return orphans

"""Checks on the simulator's request fields, each raising ValueError naming the field (the server
answers 400), so a malformed request is refused before anything is simulated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool", "function")


def flag(fields: Mapping[str, Any], name: str, *, where: str = "", default: bool = False) -> bool:
    value = fields.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"{where}{name} must be true or false, got {value!r}")
    return value


def stream_options(body: Mapping[str, Any]) -> Mapping[str, Any]:
    options = body.get("stream_options")
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"stream_options must be a JSON object or null, got {options!r}")
    flag(options, "include_usage", where="stream_options.")
    return options


def tools(body: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    value = body.get("tools")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(tool, Mapping) for tool in value):
        raise ValueError(f"tools must be a list of tool objects, got {value!r}"[:200])
    return value


def messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    value = body.get("messages")
    if not isinstance(value, list) or not value:
        raise ValueError("messages must be a non-empty list of chat messages")
    for index, message in enumerate(value):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{index}] must be an object with a 'role'")
        role = message.get("role")
        if role not in ROLES:
            raise ValueError(f"messages[{index}].role must be one of {ROLES}, got {role!r}")
    return value


def input_ids(value: Any, vocab_size: int) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(token, int) and not isinstance(token, bool) for token in value
    ):
        raise ValueError("input_ids must be a list of token ids (ints)")
    for index, token in enumerate(value):
        if not 0 <= token < vocab_size:
            raise ValueError(
                f"input_ids[{index}] = {token} is out of range: token ids are 0..{vocab_size - 1}"
            )
    return value

"""Isolate: sub-agent isolation with the sub-agent's context prefilled while it is delegated.

The main agent delegates by calling the `delegate_tool` (argument `instruction`). While that call
streams, the runtime reports the partial output; Isolate builds the sub-agent's context
[its system prompt, the instruction so far] and the runtime prefills it chunk by chunk, leaving
the last message open, so the sub-agent's first request finds its prefix cached. The commit
spawns: the main history is untouched and the sub-agent starts from the committed context.

The finished delegation call must carry its instruction: arguments (a JSON string, or a dict as
some frameworks hand them over) with a non-empty string `instruction` (or `task`). Otherwise the
commit raises `InvalidInputError` naming the call and field, and nothing is spawned: no sub-agent
ever starts from an empty instruction. The agent can answer the call with the error and let the
model delegate again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lookahead_sdk.base.checks import require_int, require_text
from lookahead_sdk.base.messages import Message
from lookahead_sdk.core.policy import ContextPolicy, TransformContext, TransformResult
from lookahead_sdk.core.state import LookaheadState, LookaheadStatus, MainState, PartialOutput
from lookahead_sdk.errors import InvalidInputError

SubagentPrompt = str | Callable[[Sequence[Message]], str]

INSTRUCTION_KEYS = ("instruction", "task")  # "task": an alternative name some models use
_VALUE_STARTS = [re.compile(rf'"{key}"\s*:\s*"') for key in INSTRUCTION_KEYS]
# A JSON string's body up to its end or its first escape that is cut short (or invalid).
_COMPLETE_STRING_PART = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')


def instruction_from_arguments(arguments: str | Mapping[str, Any] | None) -> str:
    """The instruction written so far in delegation arguments still streaming (a JSON prefix),
    for the lookahead to prefill: always a prefix of the final instruction, "" until one is
    readable. For the finished call use `delegated_instruction`, which rejects a missing one."""
    if isinstance(arguments, Mapping):
        value = _instruction_value(arguments)
        return value if isinstance(value, str) else ""
    if not isinstance(arguments, str):
        return ""
    for value_start in _VALUE_STARTS:
        start = value_start.search(arguments)
        if start is not None:
            body = _COMPLETE_STRING_PART.match(arguments, start.end())
            # strict=False: raw control characters (a model writing a real newline) are text.
            text: str = json.loads(f'"{body.group() if body else ""}"', strict=False)
            # Half a surrogate pair becomes a different character once its other half arrives.
            return text[:-1] if text and "\ud800" <= text[-1] <= "\udbff" else text
    return ""


def delegated_instruction(call: Mapping[str, Any]) -> str:
    """The instruction of a finished delegation call. Raises `InvalidInputError` naming the call
    and the field when there is no non-empty instruction to give the sub-agent."""
    function = call.get("function") or {}
    where = f"the {function.get('name')!r} call {call.get('id')!r}: function.arguments"
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise InvalidInputError(
                f"{where} is not valid JSON ({_clip(arguments)}); expected an object such as "
                '{"instruction": "..."}'
            ) from None
    if not isinstance(arguments, Mapping):
        raise InvalidInputError(
            f"{where} must be a JSON object with an 'instruction' string, got {_clip(arguments)}"
        )
    instruction = _instruction_value(arguments)
    if not isinstance(instruction, str) or not instruction.strip():
        raise InvalidInputError(
            f"{where}: 'instruction' must be a non-empty string, got {_clip(instruction)}"
        )
    return instruction


def _instruction_value(arguments: Mapping[str, Any]) -> object:
    return next((arguments[key] for key in INSTRUCTION_KEYS if key in arguments), None)


def _clip(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def delegation_call(message: Message, tool_name: str) -> dict | None:
    if message.get("role") != "assistant":
        return None
    for call in message.get("tool_calls") or ():
        if (call.get("function") or {}).get("name") == tool_name:
            return call
    return None


@dataclass
class Isolate(ContextPolicy):
    """`subagent_system` is the sub-agent's system prompt, or a function of the main history
    (before the delegation) returning it, e.g. to hand over relevant context."""

    subagent_system: SubagentPrompt
    delegate_tool: str = "delegate"
    chunk_chars: int = 128

    name = "isolate"
    commit_mode = "spawn"

    def __post_init__(self) -> None:
        if not (isinstance(self.subagent_system, str) or callable(self.subagent_system)):
            raise TypeError("subagent_system must be a string or a function of the main history")
        require_text(
            "delegate_tool", self.delegate_tool, meaning="the tool the main agent delegates with"
        )
        require_int("chunk_chars", self.chunk_chars, low=1)

    def partial_instruction(self, partial: PartialOutput | None) -> str | None:
        if partial is None or partial.tool_name != self.delegate_tool:
            return None
        text = partial.text
        return instruction_from_arguments(text) if text.lstrip().startswith("{") else text

    def should_lookahead(self, main: MainState, lookahead: LookaheadState) -> bool:
        instruction = self.partial_instruction(main.partial_output)
        if instruction is None or lookahead.status is LookaheadStatus.RUNNING:
            return False
        covered = (
            self.partial_instruction(lookahead.covered_partial)
            if lookahead.status is LookaheadStatus.READY
            else None
        )
        if covered is None or not instruction.startswith(covered):
            return True
        return len(instruction) - len(covered) >= self.chunk_chars

    def should_commit(self, main: MainState, lookahead: LookaheadState) -> bool:
        return (
            bool(main.messages)
            and delegation_call(main.messages[-1], self.delegate_tool) is not None
        )

    def system_prompt(self, history: Sequence[Message]) -> str:
        return (
            self.subagent_system
            if isinstance(self.subagent_system, str)
            else self.subagent_system(history)
        )

    async def transform(
        self, messages: Sequence[Message], ctx: TransformContext
    ) -> TransformResult:
        instruction = self.partial_instruction(ctx.partial_output)
        history = messages
        if instruction is None:
            call = delegation_call(messages[-1], self.delegate_tool) if messages else None
            if call is None:
                raise InvalidInputError(
                    f"Isolate.transform needs a {self.delegate_tool!r} call as the last message "
                    "or streaming"
                )
            instruction = delegated_instruction(call)
            history = messages[:-1]
        return TransformResult(
            [
                {"role": "system", "content": self.system_prompt(history)},
                {"role": "user", "content": instruction},
            ],
            {"instruction_chars": len(instruction)},
        )

    def assemble(self, result: TransformResult, suffix: Sequence[Message]) -> list[Message]:
        """The final instruction replaces the partial one the lookahead prefilled."""
        call = delegation_call(suffix[-1], self.delegate_tool) if suffix else None
        if call is None:
            return list(result.messages)
        return [result.messages[0], {"role": "user", "content": delegated_instruction(call)}]

"""Isolate: sub-agent isolation with the sub-agent's context prefilled while it is delegated.

The main agent delegates by calling the `delegate_tool` (argument `instruction`). While that call
streams, the runtime reports the partial output; Isolate builds the sub-agent's context
[its system prompt, the instruction so far] and the runtime prefills it chunk by chunk, leaving
the last message open, so the sub-agent's first request finds its prefix cached. The commit
spawns: the main history is untouched and the sub-agent starts from the committed context.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lookahead_sdk.base.messages import Message
from lookahead_sdk.core.policy import ContextPolicy, TransformContext, TransformResult
from lookahead_sdk.core.state import LookaheadState, LookaheadStatus, MainState, PartialOutput

SubagentPrompt = str | Callable[[Sequence[Message]], str]

_PARTIAL_STRING = re.compile(r'"(?:instruction|task)"\s*:\s*"((?:[^"\\]|\\.)*)')


def instruction_from_arguments(arguments: str) -> str:
    """The instruction inside (possibly incomplete) JSON tool arguments."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        match = _PARTIAL_STRING.search(arguments)
        if not match:
            return ""
        raw = match.group(1)
        raw = raw[:-1] if raw.endswith("\\") and not raw.endswith("\\\\") else raw
        try:
            return json.loads(f'"{raw}"')
        except ValueError:
            return raw
    if isinstance(parsed, dict):
        return str(parsed.get("instruction", parsed.get("task", "")))
    return str(parsed)


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
        if not self.delegate_tool:
            raise ValueError("delegate_tool must name the tool the main agent delegates with")
        if self.chunk_chars < 1:
            raise ValueError(f"chunk_chars must be >= 1, got {self.chunk_chars}")

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
                raise ValueError(
                    f"Isolate.transform needs a {self.delegate_tool!r} call as the last message or streaming"
                )
            instruction = instruction_from_arguments(call["function"].get("arguments", ""))
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
        instruction = instruction_from_arguments(call["function"].get("arguments", ""))
        return [result.messages[0], {"role": "user", "content": instruction}]

"""How many tokens a request adds to its program, counted before it is sent (after it, the
response's `usage.total_tokens` replaces the estimate).

A program's requests usually resend its history plus new messages. The tracker remembers, per
program, how far the last request's prompt went and a fingerprint of its end; a request that
extends it counts only what was added (the previous reply, already in the last usage, is
skipped). Anything else (the first request, a rewritten or compacted history) counts the whole
prompt. Token-id prompts count exactly (one id, one token); text is counted with the injected
counter. Pure: counters are passed in."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

CountText = Callable[[str], int]
CountMessage = Callable[[Mapping[str, Any]], int]


@dataclass(slots=True)
class _Seen:
    length: int  # messages, characters or token ids of the last prompt
    fingerprint: int  # of the last message, or of the whole last prompt


class PromptTracker:
    def __init__(self, count_text: CountText, count_message: CountMessage) -> None:
        self._count_text = count_text
        self._count_message = count_message
        self._seen: dict[str, _Seen] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def forget(self, program_id: str) -> None:
        self._seen.pop(program_id, None)

    def new_tokens(self, program_id: str, body: Mapping[str, Any], *, remember: bool) -> int:
        """Tokens `body` adds to the program. `remember=False` (a lookahead branch): count the
        branch's own tokens without moving the program's mark."""
        messages = body.get("messages")
        if isinstance(messages, list):
            return self._messages(program_id, messages, body.get("tools"), remember)
        prompt = _prompt(body)
        if prompt is None:
            return 0
        return self._sequence(program_id, prompt, remember)

    def _messages(self, program_id: str, messages: list[Any], tools: Any, remember: bool) -> int:
        seen = self._seen.get(program_id)
        start = 0
        if seen is not None and 0 < seen.length < len(messages):
            if _fingerprint(messages[seen.length - 1]) == seen.fingerprint:
                start = seen.length
                first = messages[start]
                if isinstance(first, Mapping) and first.get("role") == "assistant":
                    start += 1  # the previous reply: counted in that response's usage
        count = sum(self._count_message(m) for m in messages[start:] if isinstance(m, Mapping))
        if start == 0 and tools:
            count += self._count_text(_stable_json(tools))
        if remember and messages:
            self._seen[program_id] = _Seen(len(messages), _fingerprint(messages[-1]))
        return count

    def _sequence(self, program_id: str, prompt: str | list[int], remember: bool) -> int:
        seen = self._seen.get(program_id)
        start = 0
        if seen is not None and 0 < seen.length <= len(prompt):
            if _fingerprint(prompt[: seen.length]) == seen.fingerprint:
                start = seen.length
        added = prompt[start:]
        count = self._count_text(added) if isinstance(added, str) else len(added)
        if remember and prompt:
            self._seen[program_id] = _Seen(len(prompt), _fingerprint(prompt))
        return count


def _prompt(body: Mapping[str, Any]) -> str | list[int] | None:
    """A completions `prompt`, or SGLang's `text` / `input_ids` (one prompt, not a batch)."""
    for name in ("prompt", "text", "input_ids"):
        value = body.get(name)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            return value
    return None


def _fingerprint(value: Any) -> int:
    if isinstance(value, str):
        return hash(value)
    if isinstance(value, list):
        return hash(tuple(value)) if all(isinstance(v, int) for v in value) else hash(repr(value))
    return hash(_stable_json(value))


def _stable_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)

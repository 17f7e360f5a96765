"""How many tokens a request adds to its program, counted before it is sent (after it, the
response's `usage.total_tokens` replaces the estimate).

A program's requests usually resend its history plus new messages. The tracker remembers, per
program, how far the last request's prompt went and a fingerprint of its end; a request that
extends it counts only what was added (the previous reply, already in the last usage, is
skipped). Anything else (the first request, a rewritten or compacted history) counts the whole
prompt. Token-id prompts count exactly (one id, one token); text is counted with the injected
counter. Pure: counters are passed in.

The previous reply: in chat messages it is the assistant message right after the last prompt. In
a `prompt` (or SGLang's `text` / `input_ids`) it has no boundary, so its tokens are taken from the
usage: `served` reports the response's total, whose part beyond the last prompt is the reply; an
extending prompt's added part counts without it. (Without a reported total, all of it counts.)"""

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
    tokens: int = 0  # a prompt's (`prompt`, `text`, `input_ids`) tokens, as counted
    served: int | None = None  # its response's total tokens (prompt and reply), once known


class PromptTracker:
    def __init__(self, count_text: CountText, count_message: CountMessage) -> None:
        self._count_text = count_text
        self._count_message = count_message
        self._seen: dict[str, _Seen] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def forget(self, program_id: str) -> None:
        self._seen.pop(program_id, None)

    def served(self, program_id: str, total_tokens: int) -> None:
        """The program's last main request was answered with `total_tokens` (its usage, or the
        proxy's estimate): the part beyond that prompt is the reply the next prompt repeats."""
        seen = self._seen.get(program_id)
        if seen is not None:
            seen.served = total_tokens

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
        if seen is not None and 0 < seen.length <= len(messages):
            # The same messages again (a client's retry, another sample) add nothing.
            if _fingerprint(messages[seen.length - 1]) == seen.fingerprint:
                start = seen.length
                first = messages[start] if start < len(messages) else None
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
        extends = (
            seen is not None
            and 0 < seen.length <= len(prompt)
            and _fingerprint(prompt[: seen.length]) == seen.fingerprint
        )
        added = prompt[seen.length :] if extends and seen is not None else prompt
        count = self._count_text(added) if isinstance(added, str) else len(added)
        tokens = count
        if extends and seen is not None:
            tokens += seen.tokens
            if seen.served is not None:
                reply = max(seen.served - seen.tokens, 0)
                count = max(count - reply, 0)  # the previous reply: in that response's usage
        if remember and prompt:
            self._seen[program_id] = _Seen(len(prompt), _fingerprint(prompt), tokens)
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

"""Server-sent events as the proxy passes them through: split an upstream byte stream into whole
events (a read may end mid-event), read the token usage they carry, and drop the usage chunk the
proxy asked for on the client's behalf. Pure: bytes in, bytes out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_SEPARATORS = (b"\n\n", b"\r\n\r\n")


class SseFramer:
    """Feed upstream reads; get back the complete events they finish (each with its blank-line
    terminator). Bytes of an unfinished event wait for the rest: framing, not buffering."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._pending + data if self._pending else data
        if b"\r" not in buffer:
            # The common case (every engine we relay ends events with a bare blank line): one
            # C-level split instead of a search per event. Splitting at each b"\n\n" finds the
            # same events as searching from the end of the previous one.
            *complete, self._pending = buffer.split(b"\n\n")
            return [event + b"\n\n" for event in complete]
        events: list[bytes] = []
        start = 0
        while True:
            end, width = _next_separator(buffer, start)
            if end < 0:
                break
            events.append(buffer[start : end + width])
            start = end + width
        self._pending = buffer[start:]
        return events

    def rest(self) -> bytes:
        """What is left once the stream ended (an event the backend did not terminate)."""
        rest, self._pending = self._pending, b""
        return rest


def _next_separator(buffer: bytes, start: int) -> tuple[int, int]:
    found = [(buffer.find(sep, start), len(sep)) for sep in _SEPARATORS]
    found = [(index, width) for index, width in found if index >= 0]
    return min(found) if found else (-1, 0)


def event_data(event: bytes) -> bytes | None:
    """The `data:` payload of an event (its lines joined), None when it has none."""
    lines = [line for line in event.splitlines() if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[5:].removeprefix(b" ") for line in lines)


def ends_stream(event: bytes) -> bool:
    """The OpenAI stream's last event, `data: [DONE]` (parsed only when it holds those bytes)."""
    return b"[DONE]" in event and event_data(event) == b"[DONE]"


def event_json(event: bytes) -> dict[str, Any] | None:
    data = event_data(event)
    if data is None or data.strip() == b"[DONE]":
        return None
    try:
        value = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def data_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


@dataclass(slots=True)
class UsageTap:
    """Watches an OpenAI-style stream (chat or completions) as it passes: remembers the usage,
    counts content chunks (the output estimate when a backend reports no usage) and, when the
    client did not ask for usage, drops the usage-only chunk (`choices: []`) that the proxy's
    `include_usage` added. Usage a backend sends on its own, on a content chunk, passes."""

    keep_usage: bool
    total_tokens: int | None = None
    content_chunks: int = 0

    def pass_event(self, event: bytes) -> bytes:
        if b'"usage"' not in event:
            if b'"choices"' in event:
                self.content_chunks += 1
            return event
        payload = event_json(event)
        if payload is None:
            return event
        usage = payload.get("usage")
        if payload.get("choices"):
            self.content_chunks += 1
        if not isinstance(usage, dict):
            return event
        total = usage.get("total_tokens")
        if isinstance(total, int) and not isinstance(total, bool) and total > 0:
            self.total_tokens = total
        if self.keep_usage or payload.get("choices"):
            return event
        return b""


@dataclass(slots=True)
class GenerateTap:
    """Watches SGLang's native `/generate` stream: every event carries `meta_info` with the
    prompt and completion token counts so far; the last one is the total."""

    total_tokens: int | None = None
    content_chunks: int = 0
    _last: bytes = b""

    def pass_event(self, event: bytes) -> bytes:
        if event_data(event) not in (None, b"[DONE]"):
            self._last = event
            self.content_chunks += 1
        return event

    def finish(self) -> None:
        if self._last:
            self.total_tokens = generate_total(event_json(self._last))


def response_total(payload: Any) -> int | None:
    """`usage.total_tokens` of a whole (non-streamed) OpenAI-style response."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return total
    return None


def generate_total(payload: Any) -> int | None:
    """Prompt + completion tokens of a `/generate` result (`meta_info`)."""
    meta = payload.get("meta_info") if isinstance(payload, dict) else None
    if not isinstance(meta, dict):
        return None
    prompt, completion = meta.get("prompt_tokens"), meta.get("completion_tokens")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (prompt, completion)):
        return None
    total = prompt + completion
    return total if total > 0 else None

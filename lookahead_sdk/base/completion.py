"""The completion-client protocol transforms call (e.g. Summarize's summary), and its
implementation for any OpenAI-compatible server: a streaming chat client that also measures time
to first token (the reference agent's client)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from lookahead_sdk.base.messages import Message

if TYPE_CHECKING:
    from openai import AsyncOpenAI


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0


@runtime_checkable
class CompletionClient(Protocol):
    """What a transform needs from an LLM (e.g. Summarize). Requests are tagged by the caller's
    contextvar, so a lookahead's summary goes out best-effort and a fallback's latency-critical."""

    async def complete(
        self, messages: Sequence[Message], *, max_tokens: int, temperature: float
    ) -> Completion: ...


# Awaited before each request, e.g. `SlackGate.wait`: best-effort calls wait for slack.
Admission = Callable[[], Awaitable[object]]

# Called with (text so far, tool name being written or None) as output streams in.
DeltaCallback = Callable[[str, str | None], Awaitable[None] | None]


@dataclass(frozen=True)
class ChatResult:
    message: Message
    ttft_s: float  # request start -> first content (or tool-call) token
    total_s: float
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


def usage_numbers(usage: Any, extra: dict[str, Any] | None) -> tuple[int, int, int]:
    """(prompt, cached, completion) tokens from an OpenAI usage object or llama.cpp timings."""
    prompt = getattr(usage, "prompt_tokens", 0) or 0
    completion = getattr(usage, "completion_tokens", 0) or 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    timings = (extra or {}).get("timings") or {}
    if not cached and timings.get("cache_n"):
        cached = int(timings["cache_n"])
    if not prompt and "prompt_n" in timings:
        prompt = int(timings["prompt_n"]) + int(timings.get("cache_n", 0))
    return int(prompt), int(cached), int(completion)


class OpenAICompletionClient:
    """A `CompletionClient` (and streaming chat client) over an `openai.AsyncOpenAI` client. Give
    that client a tagging `http_client` (`ServerSession.async_http_client()`, `Endpoint`) so its
    requests carry the program's tags."""

    def __init__(
        self,
        client: AsyncOpenAI,
        model: str,
        *,
        admission: Admission | None = None,
    ) -> None:
        if not hasattr(client, "chat"):
            raise TypeError(f"client must be an openai.AsyncOpenAI, got {type(client).__name__}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be the server's model name, got {model!r}")
        self.openai = client
        self.model = model
        self.admission = admission

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        tools: Sequence[dict[str, Any]] | None = None,
        on_delta: DeltaCallback | None = None,
        started_at: float | None = None,
        **request_fields: Any,
    ) -> ChatResult:
        """`started_at` (perf_counter) is when the caller wanted the answer: TTFT counts from it,
        so a commit done just before the request is part of the measured stall."""
        started = time.perf_counter() if started_at is None else started_at
        if self.admission is not None:
            await self.admission()
        stream = await self.openai.chat.completions.create(
            model=self.model,
            messages=list(messages),  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=temperature,
            stream=True,
            stream_options={"include_usage": True},
            **({"tools": list(tools)} if tools else {}),
            **request_fields,
        )
        first_token_at: float | None = None
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: Any = None
        extra: dict[str, Any] | None = None
        async for chunk in stream:
            usage = chunk.usage or usage
            extra = chunk.model_extra or extra
            for choice in chunk.choices:
                delta = choice.delta
                tool_name = None
                if delta.content:
                    text.append(delta.content)
                for call in delta.tool_calls or ():
                    slot = calls.setdefault(
                        call.index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    slot["id"] = call.id or slot["id"]
                    if call.function is not None:
                        slot["function"]["name"] += call.function.name or ""
                        slot["function"]["arguments"] += call.function.arguments or ""
                        tool_name = slot["function"]["name"]
                if (delta.content or delta.tool_calls) and first_token_at is None:
                    first_token_at = time.perf_counter()
                if on_delta is not None and (delta.content or delta.tool_calls):
                    partial = (
                        calls[max(calls)]["function"]["arguments"] if tool_name else "".join(text)
                    )
                    maybe = on_delta(partial, tool_name)
                    if inspect.isawaitable(maybe):
                        await maybe
        finished = time.perf_counter()
        message: Message = {"role": "assistant", "content": "".join(text) or None}
        if calls:
            message["tool_calls"] = [
                {**call, "id": call["id"] or f"call_{index}"}
                for index, call in sorted(calls.items())
            ]
        prompt, cached, completion = usage_numbers(usage, extra)
        return ChatResult(
            message=message,
            ttft_s=(first_token_at or finished) - started,
            total_s=finished - started,
            prompt_tokens=prompt,
            cached_tokens=cached,
            completion_tokens=completion,
        )

    async def complete(
        self, messages: Sequence[Message], *, max_tokens: int, temperature: float
    ) -> Completion:
        result = await self.chat(messages, max_tokens=max_tokens, temperature=temperature)
        return Completion(
            text=result.message.get("content") or "",
            prompt_tokens=result.prompt_tokens,
            cached_tokens=result.cached_tokens,
            completion_tokens=result.completion_tokens,
        )

    async def aclose(self) -> None:
        await self.openai.close()

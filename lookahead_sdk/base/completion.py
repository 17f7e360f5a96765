"""A streaming chat client for any OpenAI-compatible server that measures time to first token."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from openai import AsyncOpenAI

from lookahead_sdk.base.messages import Message
from lookahead_sdk.client.slack import SlackGate
from lookahead_sdk.client.transport import WireFormat, tagged_async_http_client
from lookahead_sdk.core.policy import Completion

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


class ChatClient:
    """Wraps AsyncOpenAI with the tagging transport; also the `CompletionClient` transforms use."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "default",
        api_key: str = "not-needed",
        wire: WireFormat = "openai",
        client: AsyncOpenAI | None = None,
        slack_gate: SlackGate | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.slack_gate = slack_gate  # best-effort calls (lookahead summaries) wait for slack
        self.openai = client or AsyncOpenAI(
            base_url=self.base_url if self.base_url.endswith("/v1") else f"{self.base_url}/v1",
            api_key=api_key,
            http_client=tagged_async_http_client(wire=wire),
            max_retries=0,
        )

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
        if self.slack_gate is not None:
            await self.slack_gate.wait()
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

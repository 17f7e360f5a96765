"""The completion-client protocol transforms call (e.g. Summarize's summary), and its
implementation for any OpenAI-compatible server: a streaming chat client that also measures time
to first token (the reference agent's client)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
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
    # perf_counter stamps: the request went out, its first content token came (0.0: not known).
    sent_at: float = 0.0
    first_token_at: float = 0.0


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


@dataclass
class _StreamedPiece:
    """What one streamed request returned before it ended or was interrupted."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: Any = None
    extra: dict[str, Any] | None = None
    first_token_at: float | None = None
    tokens: int = 0  # content chunks seen: a streaming server sends one token per chunk
    interrupted: bool = False


class OpenAICompletionClient:
    """A `CompletionClient` (and streaming chat client) over an `openai.AsyncOpenAI` client. Give
    that client a tagging `http_client` (`ServerSession.async_http_client()`, `Endpoint`) so its
    requests carry the program's tags.

    `admission` is awaited before each request (best-effort calls wait for slack there).
    `must_yield` is asked after each streamed token: True stops a text reply there (the engine
    then serves the foreground request that arrived), waits for `admission` again, and continues
    it by sending the text so far as the start of the assistant's reply (llama.cpp continues a
    final assistant message). Give it only for servers that do (`SlackGate.must_yield` says False
    for latency-critical callers)."""

    def __init__(
        self,
        client: AsyncOpenAI,
        model: str,
        *,
        admission: Admission | None = None,
        must_yield: Callable[[], bool] | None = None,
    ) -> None:
        if not hasattr(client, "chat"):
            raise TypeError(f"client must be an openai.AsyncOpenAI, got {type(client).__name__}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be the server's model name, got {model!r}")
        self.openai = client
        self.model = model
        self.admission = admission
        self.must_yield = must_yield
        self.yields = 0  # replies stopped for a foreground request and continued later

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
        sent_at = first_token_at = None
        written = ""  # text of earlier pieces, sent back as the start of the reply
        generated = prefilled = 0
        while True:
            if self.admission is not None:
                await self.admission()
            sent_at = sent_at or time.perf_counter()
            prompt = list(messages)
            if written:
                prompt.append({"role": "assistant", "content": written})
            piece = await self._stream(
                prompt,
                max_tokens=max_tokens - generated,
                temperature=temperature,
                tools=tools,
                on_delta=on_delta,
                must_yield=self.must_yield if on_delta is None else None,
                **request_fields,
            )
            first_token_at = first_token_at or piece.first_token_at
            text = "".join(piece.text)
            # llama.cpp repeats the continued text in its reply; other servers send only the rest.
            written += text.removeprefix(written) if written else text
            generated += piece.tokens
            prompt_n, cached_n, completion_n = usage_numbers(piece.usage, piece.extra)
            prefilled += max(0, prompt_n - cached_n)
            if not piece.interrupted or generated >= max_tokens:
                break
            self.yields += 1
        finished = time.perf_counter()
        message: Message = {"role": "assistant", "content": written or None}
        if piece.calls:
            message["tool_calls"] = [
                {**call, "id": call["id"] or f"call_{index}"}
                for index, call in sorted(piece.calls.items())
            ]
        # The prompt as the caller sent it; cached: what of it the engine did not compute.
        prompt_tokens = max(0, prompt_n - (generated - piece.tokens))
        return ChatResult(
            message=message,
            ttft_s=(first_token_at or finished) - started,
            total_s=finished - started,
            prompt_tokens=prompt_tokens,
            cached_tokens=max(0, prompt_tokens - prefilled),
            completion_tokens=max(completion_n, generated) if written else completion_n,
            sent_at=sent_at,
            first_token_at=first_token_at or finished,
        )

    async def _stream(
        self,
        messages: list[Message],
        *,
        max_tokens: int,
        temperature: float,
        tools: Sequence[dict[str, Any]] | None,
        on_delta: DeltaCallback | None,
        must_yield: Callable[[], bool] | None,
        **request_fields: Any,
    ) -> _StreamedPiece:
        piece = _StreamedPiece()
        # The history and tools go in the body as they are: given as `messages=` / `tools=`,
        # the openai SDK walks every message (for aliases and formats, which chat requests do
        # not have) before sending, 18 ms a call at a 5K-token history on this machine, all of
        # it on the turn's TTFT. The JSON sent is the same.
        body: dict[str, Any] = {
            **(request_fields.pop("extra_body", None) or {}),
            "messages": messages,
            **({"tools": list(tools)} if tools else {}),
        }
        if must_yield is not None:
            # llama.cpp: usage in every chunk, so a stopped piece still counts its prefill.
            body["timings_per_token"] = True
        stream = await self.openai.chat.completions.create(
            model=self.model,
            messages=[],
            max_tokens=max_tokens,
            temperature=temperature,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=body,
            **request_fields,
        )
        # Closed however reading ends: a callback that raises, or a cancellation while one
        # is awaited, would otherwise leave the server decoding into an open connection
        # (and the session counting a foreground request in flight) until a GC pass.
        async with stream:
            async for chunk in stream:
                piece.usage = chunk.usage or piece.usage
                piece.extra = chunk.model_extra or piece.extra
                for choice in chunk.choices:
                    delta = choice.delta
                    tool_name = None
                    if delta.content:
                        piece.text.append(delta.content)
                        piece.tokens += 1
                    for call in delta.tool_calls or ():
                        slot = piece.calls.setdefault(
                            call.index,
                            {
                                "id": "",
                                "type": "function",
                                "function": {"name": "", "arguments": ""},
                            },
                        )
                        slot["id"] = call.id or slot["id"]
                        if call.function is not None:
                            slot["function"]["name"] += call.function.name or ""
                            slot["function"]["arguments"] += call.function.arguments or ""
                            tool_name = slot["function"]["name"]
                    if (delta.content or delta.tool_calls) and piece.first_token_at is None:
                        piece.first_token_at = time.perf_counter()
                    if on_delta is not None and (delta.content or delta.tool_calls):
                        partial = (
                            piece.calls[max(piece.calls)]["function"]["arguments"]
                            if tool_name
                            else "".join(piece.text)
                        )
                        maybe = on_delta(partial, tool_name)
                        if inspect.isawaitable(maybe):
                            await maybe
                if must_yield is not None and piece.text and not piece.calls and must_yield():
                    piece.interrupted = True
                    await stream.close()  # the server cancels the request at its next token
                    break
        return piece

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

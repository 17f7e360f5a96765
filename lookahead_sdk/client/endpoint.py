"""One OpenAI-compatible server, and every client an adapter needs to talk to it the same way.

Framework requests, lookahead summaries and warm-ups must render identically on the server, or
the warmed prefix is never hit. `Endpoint` hands out matching pieces:
- `http_client()` / `async_http_client()`: tagging httpx clients for the framework's own OpenAI
  client; for a llama.cpp server whose template cannot emit tool calls (the embedded SmolLM2
  engine) they also obtain tool calls by constrained decoding (`toolcall_transport`);
- `chat_client()`: the CompletionClient for Summarize (and the reference agent's client),
  through the same transport;
- `warmer()`: llama.cpp `/apply-template` + `/completion` warm-ups on llama.cpp (slot-paired, with
  client-side slack admission), OpenAI-style warm-ups elsewhere; wrapped to render tool calls
  like the transport does.

    endpoint = Endpoint.connect("http://127.0.0.1:8089")          # any server
    with Endpoint.embedded() as endpoint: ...                      # starts the embedded engine
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from openai import AsyncOpenAI

from lookahead_sdk.base.completion import ChatClient
from lookahead_sdk.base.tokens import TokenCounter, auto_token_counter
from lookahead_sdk.client.slack import SlackGate
from lookahead_sdk.client.toolcall_transport import (
    ToolCallWarmer,
    server_needs_tool_emulation,
    tool_call_async_http_client,
    tool_call_http_client,
)
from lookahead_sdk.client.transport import WireFormat, tagged_async_http_client, tagged_http_client
from lookahead_sdk.client.warmers import LlamaCppWarmer, OpenAIWarmer, Warmer

API_KEY = "not-needed"


@dataclass(frozen=True)
class ServerFacts:
    model: str
    window_tokens: int | None
    llamacpp: bool
    needs_tool_emulation: bool


def probe_server(base_url: str, *, timeout_s: float = 10.0) -> ServerFacts:
    """Model name, context window and engine kind, from what the server reports."""
    model, window, llamacpp = "default", None, False
    with httpx.Client(timeout=timeout_s) as client:
        try:
            models = client.get(f"{base_url}/v1/models").json().get("data") or []
            model = models[0]["id"] if models else model
        except (httpx.HTTPError, ValueError, KeyError, AttributeError):
            pass
        try:
            props = client.get(f"{base_url}/props").json()
            window = int(props["default_generation_settings"]["n_ctx"])
            llamacpp = True
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
    return ServerFacts(model, window, llamacpp, llamacpp and server_needs_tool_emulation(base_url))


@dataclass
class Endpoint:
    base_url: str  # the server root, without /v1
    model: str = "default"
    window_tokens: int = 8192
    llamacpp: bool = False
    emulate_tool_calls: bool = False
    _engine: Any = field(default=None, repr=False)  # the embedded engine this endpoint started

    @classmethod
    def connect(
        cls,
        base_url: str,
        *,
        model: str | None = None,
        window_tokens: int | None = None,
        emulate_tool_calls: bool | None = None,
    ) -> Endpoint:
        base_url = base_url.rstrip("/").removesuffix("/v1")
        facts = probe_server(base_url)
        return cls(
            base_url,
            model=model or facts.model,
            window_tokens=window_tokens or facts.window_tokens or 8192,
            llamacpp=facts.llamacpp,
            emulate_tool_calls=facts.needs_tool_emulation
            if emulate_tool_calls is None
            else emulate_tool_calls,
        )

    @classmethod
    def embedded(cls, *, port: int = 8089, slots: int = 4) -> Endpoint:
        """The embedded llama.cpp engine (SmolLM2-135M), started if it is not running."""
        from lookahead_sdk.engine.config import EngineConfig
        from lookahead_sdk.engine.server import ensure_engine

        handle = ensure_engine(EngineConfig(port=port, slots=slots))
        endpoint = cls.connect(handle.base_url)
        endpoint._engine = None if handle.reused else handle
        return endpoint

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def wire(self) -> WireFormat:
        return "llamacpp" if self.llamacpp else "openai"

    def http_client(self) -> httpx.Client:
        if self.emulate_tool_calls:
            return tool_call_http_client(wire=self.wire)
        return tagged_http_client(wire=self.wire)

    def async_http_client(self) -> httpx.AsyncClient:
        if self.emulate_tool_calls:
            return tool_call_async_http_client(wire=self.wire)
        return tagged_async_http_client(wire=self.wire)

    def async_openai(self) -> AsyncOpenAI:
        return AsyncOpenAI(
            base_url=self.openai_base_url,
            api_key=API_KEY,
            http_client=self.async_http_client(),
            max_retries=0,
        )

    def slack_gate(self) -> SlackGate | None:
        """llama.cpp has no request priorities: lookahead work waits for foreground slack."""
        return SlackGate(self.base_url) if self.llamacpp else None

    def chat_client(self, gate: SlackGate | None = None) -> ChatClient:
        """A streaming chat client rendering like the framework's requests: the CompletionClient
        a Summarize policy calls (its lookahead calls wait for `gate`), or the reference agent's."""
        return ChatClient(
            self.base_url, model=self.model, client=self.async_openai(), slack_gate=gate
        )

    def warmer(self, gate: SlackGate | None = None) -> Warmer:
        inner: Warmer = (
            LlamaCppWarmer(self.base_url, gate=gate)
            if self.llamacpp
            else OpenAIWarmer(self.base_url)
        )
        return ToolCallWarmer(inner) if self.emulate_tool_calls else inner

    def token_counter(self) -> TokenCounter:
        return auto_token_counter(self.base_url)

    def close(self) -> None:
        """Stop the embedded engine if this endpoint started it."""
        if self._engine is not None:
            self._engine.stop()
            self._engine = None

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

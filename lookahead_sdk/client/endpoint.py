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

    endpoint = Endpoint.connect("http://127.0.0.1:8089")          # any server (blocking probe)
    endpoint = await Endpoint.aconnect("http://127.0.0.1:8089")   # the same from async code
    with Endpoint.embedded() as endpoint: ...                      # starts the embedded engine
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from openai import AsyncOpenAI

from lookahead_sdk.base.completion import OpenAICompletionClient
from lookahead_sdk.base.protocol import WireFormat
from lookahead_sdk.base.tokens import TokenCounter, auto_token_counter
from lookahead_sdk.client.session import ServerSession
from lookahead_sdk.client.slack import SlackGate
from lookahead_sdk.client.toolcall_transport import (
    ToolCallWarmer,
    tool_call_async_http_client,
    tool_call_http_client,
)
from lookahead_sdk.client.transport import tagged_async_http_client, tagged_http_client
from lookahead_sdk.client.warmers import LlamaCppWarmer, OpenAIWarmer
from lookahead_sdk.core.config import RuntimeConfig, RuntimeMode
from lookahead_sdk.core.warmer import Warmer
from lookahead_sdk.errors import ConfigurationError

API_KEY = "not-needed"


@dataclass
class Endpoint:
    """Every client of one server, built on one `ServerSession` (so the transports' foreground
    counts reach the gate, and slot placement is shared)."""

    session: ServerSession
    model: str = "default"
    window_tokens: int | None = None  # None: the server did not say (pass window_tokens=)
    emulate_tool_calls: bool = False
    _engine: Any = field(default=None, repr=False)  # the embedded engine this endpoint started

    @classmethod
    def from_session(
        cls,
        session: ServerSession,
        *,
        model: str | None = None,
        window_tokens: int | None = None,
        emulate_tool_calls: bool | None = None,
    ) -> Endpoint:
        facts = session.facts
        return cls(
            session,
            model=model or facts.model,
            window_tokens=window_tokens or facts.window_tokens,
            emulate_tool_calls=(
                facts.needs_tool_emulation if emulate_tool_calls is None else emulate_tool_calls
            ),
        )

    @classmethod
    def connect(cls, base_url: str, **settings: Any) -> Endpoint:
        """Probe the server (blocking; `aconnect` from async code) and build its clients."""
        return cls.from_session(ServerSession.connect_blocking(base_url), **settings)

    @classmethod
    async def aconnect(cls, base_url: str, **settings: Any) -> Endpoint:
        return cls.from_session(await ServerSession.connect(base_url), **settings)

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
    def base_url(self) -> str:
        """The server root, without /v1."""
        return self.session.base_url

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def llamacpp(self) -> bool:
        return self.session.facts.llamacpp

    @property
    def wire(self) -> WireFormat:
        return self.session.wire

    def http_client(self) -> httpx.Client:
        if self.emulate_tool_calls:
            return tool_call_http_client(session=self.session)
        return tagged_http_client(session=self.session)

    def async_http_client(self) -> httpx.AsyncClient:
        if self.emulate_tool_calls:
            return tool_call_async_http_client(session=self.session)
        return tagged_async_http_client(session=self.session)

    def async_openai(self) -> AsyncOpenAI:
        return AsyncOpenAI(
            base_url=self.openai_base_url,
            api_key=API_KEY,
            http_client=self.async_http_client(),
            max_retries=0,
        )

    def slack_gate(self) -> SlackGate | None:
        """llama.cpp has no request priorities: lookahead work waits for foreground slack."""
        return self.session.gate() if self.llamacpp else None

    def chat_client(self, gate: SlackGate | None = None) -> OpenAICompletionClient:
        """A streaming chat client rendering like the framework's requests: the summarizer a
        Summarize policy calls (its lookahead calls wait for `gate`), or the reference agent's."""
        return OpenAICompletionClient(
            self.async_openai(),
            self.model,
            admission=gate.wait if gate is not None else None,
            # A gate exists for llama.cpp, which continues a stopped reply (see the client).
            must_yield=gate.must_yield if gate is not None else None,
        )

    def warmer(self, gate: SlackGate | None = None) -> Warmer:
        inner: Warmer = (
            LlamaCppWarmer(self.session, gate=gate) if self.llamacpp else OpenAIWarmer(self.session)
        )
        return ToolCallWarmer(inner) if self.emulate_tool_calls else inner

    def token_counter(self) -> TokenCounter:
        """The server's own tokenizer (llama.cpp, vLLM, SGLang), else the best local one."""
        return auto_token_counter(self.base_url, model=self.model)

    def runtime_config(self, mode: RuntimeMode = "lookahead", **overrides: Any) -> RuntimeConfig:
        """A `RuntimeConfig` for agents on this server: its window and tokenizer, a summarizer
        and (in lookahead mode) a warmer, both waiting for slack on llama.cpp. `overrides`
        replace any field (e.g. `summarizer=` the agent's own client). Whoever uses the config
        closes its summarizer and warmer (framework adapters do, on `close()`). A server that
        reports no window needs `window_tokens=` here (ConfigurationError otherwise)."""
        if self.window_tokens is None and "window_tokens" not in overrides:
            raise ConfigurationError(
                f"{self.base_url} reports no context window: pass window_tokens= (the model's "
                "context size in tokens) to Endpoint.connect(...) or runtime_config(...)"
            )
        gate = self.slack_gate()
        fields: dict[str, Any] = {
            "mode": mode,
            "window_tokens": self.window_tokens,
            "token_counter": self.token_counter(),
            **overrides,
        }
        if "summarizer" not in overrides:
            fields["summarizer"] = self.chat_client(gate)
        if "warmer" not in overrides:
            fields["warmer"] = self.warmer(gate) if mode == "lookahead" else None
        return RuntimeConfig(**fields)

    def close(self) -> None:
        """Stop the embedded engine if this endpoint started it."""
        if self._engine is not None:
            self._engine.stop()
            self._engine = None

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

"""Small real HTTP servers that answer like a hosted OpenAI-style API, vLLM or SGLang: enough of
their `/v1/models`, info and tokenize endpoints for a client to probe them, and a chat endpoint
that (like hosted APIs) rejects unknown top-level fields."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, Any]
Route = Callable[[Any], Reply]

# What a hosted chat-completions endpoint accepts at the top level of a body.
OPENAI_CHAT_FIELDS = frozenset(
    {
        "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
        "stream", "stream_options", "stop", "tools", "tool_choice", "parallel_tool_calls",
        "response_format", "seed", "user", "logprobs", "top_logprobs", "presence_penalty",
        "frequency_penalty", "logit_bias", "metadata", "store",
    }
)  # fmt: skip


def chat_reply(text: str = "ok", prompt_tokens: int = 12) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": 13},
    }


def strict_chat(body: Any) -> Reply:
    """A hosted API: 400 for any top-level field it does not know."""
    unknown = sorted(set(body) - OPENAI_CHAT_FIELDS) if isinstance(body, dict) else []
    if unknown:
        return 400, {
            "error": {
                "message": f"Unrecognized request argument supplied: {unknown[0]}",
                "type": "invalid_request_error",
            }
        }
    return 200, chat_reply()


def tokens_of(text: str) -> list[int]:
    return list(range(len(text.split())))


@dataclass
class FakeServer:
    """GET and POST routes by path; every request is recorded (path, headers, body)."""

    routes: dict[str, Route]
    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: Any) -> None:
                path = self.path.split("?")[0]
                server.requests.append((path, dict(self.headers), body))
                route = server.routes.get(path)
                status, reply = route(body) if route is not None else (404, {"error": "no route"})
                payload = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._answer(None)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(json.loads(raw) if raw else None)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def bodies(self, path: str) -> list[Any]:
        return [body for p, _, body in self.requests if p == path]

    def headers(self, path: str) -> list[dict[str, str]]:
        return [headers for p, headers, _ in self.requests if p == path]

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def hosted_api() -> FakeServer:
    """Like api.openai.com to a client without a key on `/v1/models`; strict chat."""
    return FakeServer(
        {
            "/v1/models": lambda _: (401, {"error": {"message": "missing key"}}),
            "/v1/chat/completions": strict_chat,
        }
    )


def vllm_server(max_model_len: int = 32768) -> FakeServer:
    def tokenize(body: Any) -> Reply:
        if not isinstance(body, dict) or "prompt" not in body or "model" not in body:
            return 400, {"error": "prompt and model are required"}
        tokens = tokens_of(body["prompt"])
        return 200, {"count": len(tokens), "max_model_len": max_model_len, "tokens": tokens}

    models = {"data": [{"id": "qwen", "owned_by": "vllm", "max_model_len": max_model_len}]}
    return FakeServer(
        {
            "/v1/models": lambda _: (200, models),
            "/tokenize": tokenize,
            "/v1/chat/completions": lambda _: (200, chat_reply()),
        }
    )


def sglang_server(context_length: int = 40960) -> FakeServer:
    def tokenize(body: Any) -> Reply:
        if not isinstance(body, dict) or "prompt" not in body:
            return 400, {"error": "prompt is required"}
        tokens = tokens_of(body["prompt"])
        return 200, {"tokens": tokens, "count": len(tokens), "max_model_len": context_length}

    info = {"model_path": "Qwen/Qwen3-8B", "context_length": context_length, "tp_size": 1}
    return FakeServer(
        {
            "/v1/models": lambda _: (200, {"data": [{"id": "qwen", "owned_by": "sglang"}]}),
            "/get_server_info": lambda _: (200, info),
            "/v1/tokenize": tokenize,
            "/v1/chat/completions": lambda _: (200, chat_reply()),
        }
    )

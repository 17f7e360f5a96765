"""`lookahead-sdk sim serve`: the simulator behind the SGLang-compatible HTTP subset the SDK uses.

Endpoints: POST /v1/chat/completions (stream and not), POST /generate (SGLang native; input_ids
or text; max_new_tokens=0 prefills only), POST /tokenize (also /v1/tokenize), GET /get_server_info, GET /health,
GET /v1/models, GET /stats, POST /lookahead/promote, POST /flush_cache, POST /programs/release.

Request bodies are limited in size (`SimServeConfig.max_body_bytes`, 413 beyond) and checked field
by field (400 naming the field); a client that disconnects aborts its simulated request, freeing
its KV at once.

Request tags are read with `lookahead_sdk.base.protocol` (as the SGLang plugin and the router
read them): top-level fields, `custom_params` (top level, or in `sampling_params` for /generate) and the
`X-Program-Id` header. Text is filler; timing, token counts and cache behaviour are simulated.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from lookahead_sdk.base.protocol import RequestTags
from lookahead_sdk.scheduling.latency_model import LatencyProfile
from lookahead_sdk.sim import request_checks as checks
from lookahead_sdk.sim.cluster import ClusterConfig, SimCluster
from lookahead_sdk.sim.ground_truth import GroundTruth
from lookahead_sdk.sim.http_body import (
    DEFAULT_BODY_LIMIT,
    BodyError,
    ClientGone,
    read_json_object,
    wait_for_disconnect,
)
from lookahead_sdk.sim.realtime import RealtimeDriver
from lookahead_sdk.sim.request import SimRequest
from lookahead_sdk.sim.tokenizer import ChatTemplate, default_tokenizer


@dataclass(frozen=True, slots=True)
class SimServeConfig:
    profile: LatencyProfile
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    time_scale: float = 1.0
    model: str = "sim-qwen3-8b"
    context_length: int = 40_960
    default_max_tokens: int = 32
    truth: GroundTruth | None = None
    max_body_bytes: int = DEFAULT_BODY_LIMIT


class _TokenStream:
    """Listener that hands a request's simulated tokens to the HTTP handler."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[int | None] = asyncio.Queue()

    def on_token(self, request: SimRequest, now_ms: float) -> None:
        self.events.put_nowait(request.generated - 1)

    def on_finish(self, request: SimRequest, now_ms: float) -> None:
        self.events.put_nowait(None)

    async def tokens(self) -> AsyncIterator[int]:
        while (index := await self.events.get()) is not None:
            yield index

    async def drain(self) -> None:
        async for _ in self.tokens():
            pass


class SimServer:
    def __init__(self, config: SimServeConfig) -> None:
        self.config = config
        self.cluster = SimCluster(config.profile, config.cluster, truth=config.truth)
        self.driver = RealtimeDriver(self.cluster, time_scale=config.time_scale)
        self.template = ChatTemplate(default_tokenizer())
        self._ids = itertools.count()

    # --- request building --------------------------------------------------------------------

    def tags_of(
        self, body: Mapping[str, Any], headers: Mapping[str, str]
    ) -> tuple[RequestTags, str | None]:
        """The request's tags (untagged: latency-critical) and the lookahead group it promotes."""
        tags = RequestTags.from_request(body, headers) or RequestTags()
        return tags, tags.group_to_promote

    def start(
        self,
        prompt: list[int],
        max_new_tokens: int,
        tags: RequestTags,
        group_to_promote: str | None,
    ) -> tuple[SimRequest, _TokenStream]:
        if not prompt:
            raise ValueError("the prompt is empty")
        total = len(prompt) + max_new_tokens
        if total > self.config.context_length:
            raise ValueError(
                f"prompt ({len(prompt)} tokens) + max tokens ({max_new_tokens}) exceed the "
                f"context length {self.config.context_length}"
            )
        if total > self.config.cluster.kv_tokens:
            raise ValueError(
                f"the request needs {total} KV tokens; the pool has {self.config.cluster.kv_tokens}"
            )
        stream = _TokenStream()
        request = SimRequest(
            rid=f"sim-{next(self._ids)}-{uuid.uuid4().hex[:8]}",
            prompt=prompt,
            max_new_tokens=max_new_tokens,
            arrival_ms=0.0,
            tags=tags,
            output_ids=self.template.filler(max_new_tokens),
            listener=stream,
        )
        self.driver.submit(request)
        if group_to_promote is not None:
            self.cluster.promote(lookahead_group_id=group_to_promote)
        return request, stream

    async def until_done(
        self, request: Request, sim_request: SimRequest, stream: _TokenStream
    ) -> None:
        """Wait for a non-streamed request to finish; abort it if its client goes away first."""
        done = asyncio.ensure_future(stream.drain())
        gone = asyncio.ensure_future(wait_for_disconnect(request.receive))
        completed = False
        try:
            await asyncio.wait((done, gone), return_when=asyncio.FIRST_COMPLETED)
            completed = done.done()
        finally:
            for task in (done, gone):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if not completed:
                self.driver.abort(sim_request)
        if not completed:
            raise ClientGone

    async def streamed(
        self, sim_request: SimRequest, events: AsyncIterator[str]
    ) -> AsyncIterator[str]:
        """`events`, aborting the simulated request when the client goes away mid-stream
        (Starlette then cancels this generator)."""
        try:
            async for event in events:
                yield event
        finally:
            if sim_request.finish_ms is None:
                self.driver.abort(sim_request)

    async def body(self, request: Request) -> dict[str, Any]:
        return await read_json_object(
            request.receive, request.headers.get("content-length"), self.config.max_body_bytes
        )

    def token_text(self, request: SimRequest, index: int) -> str:
        return self.template.tokenizer.decode([request.output_token(index)])

    def text_of(self, request: SimRequest, upto: int) -> str:
        return self.template.tokenizer.decode([request.output_token(i) for i in range(upto)])

    def max_tokens(self, value: Any, field_name: str, *, zero_means_default: bool) -> int:
        if value is None:
            return self.config.default_max_tokens
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{field_name} must be an int >= 0, got {value!r}")
        return self.config.default_max_tokens if value == 0 and zero_means_default else value


def create_app(config: SimServeConfig) -> FastAPI:
    server = SimServer(config)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        server.driver.start()
        try:
            yield
        finally:
            await server.driver.stop()

    app = FastAPI(title="lookahead-sdk simulated engine", lifespan=lifespan)
    app.state.sim = server

    @app.exception_handler(ValueError)
    async def bad_request(_: Request, error: ValueError) -> JSONResponse:
        return JSONResponse(
            {"error": {"message": str(error), "type": "invalid_request_error"}}, 400
        )

    @app.exception_handler(BodyError)
    async def bad_body(_: Request, error: BodyError) -> JSONResponse:
        return JSONResponse(
            {"error": {"message": str(error), "type": "invalid_request_error"}}, error.status
        )

    @app.exception_handler(ClientGone)
    async def client_gone(_: Request, error: ClientGone) -> JSONResponse:
        return JSONResponse({"error": {"message": "the client disconnected"}}, 499)

    @app.exception_handler(RecursionError)
    async def too_deep(_: Request, error: RecursionError) -> JSONResponse:
        return JSONResponse(
            {
                "error": {
                    "message": "the request is nested too deeply",
                    "type": "invalid_request_error",
                }
            },
            400,
        )

    @app.exception_handler(TypeError)
    async def bad_type(_: Request, error: TypeError) -> JSONResponse:
        return JSONResponse(
            {"error": {"message": str(error), "type": "invalid_request_error"}}, 400
        )

    @app.get("/health")
    async def health() -> JSONResponse:
        if not server.driver.running:
            return JSONResponse(
                {"status": "engine stopped", "error": repr(server.driver.error)}, 503
            )
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": config.model,
                    "object": "model",
                    "owned_by": "lookahead-sdk-sim",
                    "max_model_len": config.context_length,
                }
            ],
        }

    @app.get("/get_server_info")
    async def server_info() -> dict[str, Any]:
        kv = config.cluster.kv_tokens
        return {
            "model_path": config.model,
            "context_length": config.context_length,
            "max_total_num_tokens": kv,
            "internal_states": [{"max_total_num_tokens": kv}],
            "simulator": {
                "profile": config.profile.name,
                "mode": config.cluster.mode,
                "policy": config.cluster.policy,
                "time_scale": config.time_scale,
                "tokenizer": server.template.tokenizer.name,
            },
        }

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {
            **server.cluster.stats(),
            "sim_time_ms": server.driver.now_ms(),
            "time_scale": config.time_scale,
        }

    @app.post("/lookahead/promote")
    async def promote(request: Request) -> dict[str, Any]:
        body = await server.body(request)
        keys = {k: body.get(k) for k in ("rid", "lookahead_group_id", "program_id")}
        if not any(isinstance(v, str) and v for v in keys.values()):
            raise ValueError("promote needs one of rid, lookahead_group_id, program_id (a string)")
        return {"promoted": server.cluster.promote(**keys)}

    @app.post("/flush_cache")
    async def flush_cache() -> JSONResponse:
        if not server.cluster.flush_cache():
            return JSONResponse(
                {"error": {"message": "requests are in flight; retry when idle"}}, 409
            )
        return JSONResponse({"flushed": True})

    @app.post("/programs/release")
    async def release(request: Request) -> dict[str, Any]:
        body = await server.body(request)
        return {"released": body.get("program_id")}

    @app.post("/tokenize")
    @app.post("/v1/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body = await server.body(request)
        if "messages" in body:
            ids = server.template.render(
                checks.messages(body),
                tools=checks.tools(body),
                add_generation_prompt=checks.flag(body, "add_generation_prompt", default=True),
            )
        else:
            text = next((body[k] for k in ("prompt", "text", "content") if k in body), None)
            if not isinstance(text, str):
                raise ValueError(
                    "tokenize needs 'messages' or a string 'prompt' / 'text' / 'content'"
                )
            ids = server.template.tokenizer.encode(text)
        return {"tokens": ids, "count": len(ids), "max_model_len": config.context_length}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await server.body(request)
        messages = checks.messages(body)
        tools = checks.tools(body)
        streaming = checks.flag(body, "stream")
        include_usage = checks.flag(checks.stream_options(body), "include_usage")
        max_completion_tokens = body.get("max_completion_tokens")
        max_tokens = server.max_tokens(
            body.get("max_tokens") if max_completion_tokens is None else max_completion_tokens,
            "max_tokens",
            zero_means_default=True,  # SGLang: chat max_tokens=0 means "no limit"
        )
        tags, promote_group = server.tags_of(body, request.headers)
        prompt = server.template.render(messages, tools=tools)
        sim_request, stream = server.start(prompt, max_tokens, tags, promote_group)
        completion_id = f"chatcmpl-{sim_request.rid}"
        created = int(time.time())
        finish_reason = (
            "length" if body.get("max_tokens") or body.get("max_completion_tokens") else "stop"
        )

        def usage() -> dict[str, Any]:
            return {
                "prompt_tokens": sim_request.prompt_tokens,
                "completion_tokens": sim_request.generated,
                "total_tokens": sim_request.prompt_tokens + sim_request.generated,
                "prompt_tokens_details": {"cached_tokens": sim_request.cached_tokens},
            }

        def chunk(delta: dict[str, Any], reason: str | None) -> str:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": config.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
            }
            return f"data: {json.dumps(payload)}\n\n"

        if streaming:

            async def events() -> AsyncIterator[str]:
                async for index in stream.tokens():
                    delta: dict[str, Any] = {"content": server.token_text(sim_request, index)}
                    if index == 0:
                        delta["role"] = "assistant"
                    yield chunk(delta, None)
                yield chunk({}, finish_reason)
                if include_usage:
                    payload = {
                        "id": completion_id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": config.model,
                        "choices": [],
                        "usage": usage(),
                    }
                    yield f"data: {json.dumps(payload)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(
                server.streamed(sim_request, events()), media_type="text/event-stream"
            )

        await server.until_done(request, sim_request, stream)
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": config.model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": server.text_of(sim_request, sim_request.generated),
                    },
                    "finish_reason": finish_reason,
                }
            ],
            "usage": usage(),
        }

    @app.post("/generate")
    async def generate(request: Request) -> Any:
        body = await server.body(request)
        sampling = body.get("sampling_params") or {}
        if not isinstance(sampling, Mapping):
            raise ValueError("sampling_params must be a JSON object")
        streaming = checks.flag(body, "stream")
        if "input_ids" in body:
            prompt = checks.input_ids(body["input_ids"], server.template.tokenizer.vocab_size)
        elif isinstance(body.get("text"), str):
            prompt = server.template.tokenizer.encode(body["text"])
        else:
            raise ValueError("generate needs 'input_ids' (a list of ints) or 'text' (a string)")
        max_new = server.max_tokens(
            sampling.get("max_new_tokens"),
            "sampling_params.max_new_tokens",
            zero_means_default=False,
        )
        tags, promote_group = server.tags_of(body, request.headers)
        started = time.perf_counter()
        sim_request, stream = server.start(list(prompt), max_new, tags, promote_group)

        def result() -> dict[str, Any]:
            return {
                "text": server.text_of(sim_request, sim_request.generated),
                "output_ids": [sim_request.output_token(i) for i in range(sim_request.generated)],
                "meta_info": {
                    "id": sim_request.rid,
                    "prompt_tokens": sim_request.prompt_tokens,
                    "completion_tokens": sim_request.generated,
                    "cached_tokens": sim_request.cached_tokens,
                    "finish_reason": {"type": "length", "length": sim_request.generated},
                    "e2e_latency": time.perf_counter() - started,
                },
            }

        if streaming:

            async def events() -> AsyncIterator[str]:
                async for _ in stream.tokens():
                    yield f"data: {json.dumps(result())}\n\n"
                if sim_request.generated == 0:
                    yield f"data: {json.dumps(result())}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(
                server.streamed(sim_request, events()), media_type="text/event-stream"
            )

        await server.until_done(request, sim_request, stream)
        return result()

    return app

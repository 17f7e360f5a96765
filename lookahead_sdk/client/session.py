"""One server, as every client of it in this process sees it.

A `ServerSession` holds what the tagging transports, the warmers and the slack gate of one server
must share: the count of that server's latency-critical requests (`ForegroundRegistry`, fed by
the transports, read by the gate), llama.cpp slot placement (`SlotPairs`), and the facts the
server reported. Create one per server and hand it to everything that talks to it (`Endpoint`
does). Nothing here is process-wide: two sessions, e.g. in two tests, never see each other.

    session = await ServerSession.connect("http://127.0.0.1:8089")   # probes the server

Probing learns what the server is (llama.cpp `/props`; vLLM and SGLang by their `/v1/models`
card and SGLang's `/get_server_info`; this package's simulator and router), its window and
model, and so the wire its tags travel in. Tag fields go into request bodies only for those
servers; anything else (a hosted API) gets wire "none": the `X-Program-Id` header only.
    client = session.async_http_client()       # tags requests, counts foreground ones
    gate = session.gate()                      # lets best-effort work wait for slack
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from lookahead_sdk.base.protocol import (
    BEST_EFFORT_BATCH_FIELD,
    DISCARD_SLOT_PROMPT_FIELD,
    RequestTags,
    WireFormat,
    check_wire,
)
from lookahead_sdk.base.tokens import ServerTokenCounter
from lookahead_sdk.client.llamacpp_slots import SlotPairs
from lookahead_sdk.client.slack import (
    DEFAULT_GATE_ADMISSION,
    BatchSizer,
    ForegroundRegistry,
    GateAdmission,
    SlackGate,
    origin_of,
)
from lookahead_sdk.client.timeline import RequestTimeline
from lookahead_sdk.client.transport import tagged_async_http_client, tagged_http_client

PROBE_TIMEOUT_S = 10.0

# What a probed server turned out to be. "lookahead": this package's simulator or router (they
# read the top-level tag fields); "unknown": anything else, a hosted API included.
ServerEngine = Literal["llamacpp", "vllm", "sglang", "lookahead", "unknown"]

# The wire each engine gets by default: tag fields only where the server is known to take them.
ENGINE_WIRE: dict[str, WireFormat] = {
    "llamacpp": "llamacpp",
    "vllm": "vllm",
    "sglang": "sglang",
    "lookahead": "openai",
    "unknown": "none",
}


# The llama-server routes whose request computes in a slot.
SLOT_COMPUTING_PATHS = ("/completion", "/completions", "/infill", "/v1/messages")


@dataclass(frozen=True)
class ServerFacts:
    """What a server reported about itself (None: it did not say)."""

    model: str = "default"
    window_tokens: int | None = None
    llamacpp: bool = False
    total_slots: int | None = None  # llama.cpp parallel slots
    supports_tool_calls: bool | None = None  # llama.cpp: can its chat template emit tool calls
    engine: ServerEngine = "unknown"

    def __post_init__(self) -> None:
        if self.llamacpp and self.engine == "unknown":
            object.__setattr__(self, "engine", "llamacpp")

    @classmethod
    def from_replies(
        cls,
        models: Mapping[str, Any] | None,
        props: Mapping[str, Any] | None,
        server_info: Mapping[str, Any] | None = None,
        programs: Any = None,
    ) -> ServerFacts:
        """Facts from `/v1/models`, llama.cpp `/props`, SGLang `/get_server_info` and the
        router's `GET /programs` replies (any may be missing).

        Window: llama.cpp `n_ctx`; vLLM (and recent SGLang) `max_model_len` in `/v1/models`;
        SGLang `context_length`, else `max_total_num_tokens` (its KV pool, a bound)."""
        card = _first_model(models)
        model = str(card.get("id") or "default")
        owner = str(card.get("owned_by") or "").lower()
        if isinstance(props, Mapping) and isinstance(
            (settings := props.get("default_generation_settings")), Mapping
        ):
            caps = props.get("chat_template_caps")
            tool_calls = caps.get("supports_tool_calls") if isinstance(caps, Mapping) else None
            return cls(
                model=model,
                window_tokens=_positive(settings.get("n_ctx")),
                llamacpp=isinstance(settings.get("n_ctx"), int),
                total_slots=_positive(props.get("total_slots")),
                supports_tool_calls=tool_calls if isinstance(tool_calls, bool) else None,
            )
        engine: ServerEngine = "unknown"
        window = _positive(card.get("max_model_len"))
        info = server_info if _is_sglang_info(server_info) else None
        if owner == "vllm":
            engine = "vllm"
        elif owner.startswith("lookahead") or _is_router_programs(programs):
            engine = "lookahead"
        elif owner == "sglang" or info is not None:
            engine = "sglang"
            info = info or {}
            window = (
                _positive(info.get("context_length"))
                or window
                or _positive(info.get("max_total_num_tokens"))
            )
        return cls(model=model, window_tokens=window, engine=engine)

    @property
    def wire(self) -> WireFormat:
        """How tags go into a request for this server by default."""
        return ENGINE_WIRE[self.engine]

    @property
    def needs_tool_emulation(self) -> bool:
        """A llama.cpp server whose chat template cannot emit tool calls."""
        return self.llamacpp and self.supports_tool_calls is False


class ServerSession:
    def __init__(
        self,
        base_url: str,
        *,
        wire: WireFormat | None = None,
        facts: ServerFacts | None = None,
    ) -> None:
        self.base_url = _server_root(base_url)
        self.origin = origin_of(self.base_url)
        self.facts = facts or ServerFacts()
        # Unprobed (no facts) and not told: the server is unknown, so no tag fields in bodies.
        self.wire: WireFormat = check_wire(wire if wire is not None else self.facts.wire)
        self.foreground = ForegroundRegistry()
        # Set to a RequestTimeline to record every request the session's clients send.
        self.timeline: RequestTimeline | None = None
        # Opt-in: capping best-effort batches bounds a foreground prompt's wait behind them, but
        # on a CPU it slows background prefill so much that with four agents warm-ups fell
        # behind (docs/benchmarks.md, "Best-effort batch cap"). None: the engine's batches.
        self.best_effort_batch: BatchSizer | None = None
        self.slots: SlotPairs | None = (
            SlotPairs(self.facts.total_slots)
            if self.wire == "llamacpp" and self.facts.total_slots
            else None
        )

    # -- creating -----------------------------------------------------------------------------
    @classmethod
    async def connect(
        cls, base_url: str, *, wire: WireFormat | None = None, timeout_s: float = PROBE_TIMEOUT_S
    ) -> ServerSession:
        """A session with the facts the server reports (an unreachable server: none, so wire
        "none" unless given)."""
        root = _server_root(base_url)
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            replies = {
                path: _json_or_none(await _aget(client, f"{root}{path}")) for path in _probe_paths()
            }
            for path in _follow_up_paths(replies):
                replies[path] = _json_or_none(await _aget(client, f"{root}{path}"))
        return cls(root, wire=wire, facts=_facts(replies))

    @classmethod
    def connect_blocking(
        cls, base_url: str, *, wire: WireFormat | None = None, timeout_s: float = PROBE_TIMEOUT_S
    ) -> ServerSession:
        """`connect` for synchronous code (blocks the calling thread on the probe)."""
        root = _server_root(base_url)
        with httpx.Client(timeout=timeout_s) as client:
            replies = {
                path: _json_or_none(_get(client, f"{root}{path}")) for path in _probe_paths()
            }
            for path in _follow_up_paths(replies):
                replies[path] = _json_or_none(_get(client, f"{root}{path}"))
        return cls(root, wire=wire, facts=_facts(replies))

    def token_counter(self) -> ServerTokenCounter | None:
        """The engine's own tokenizer when the server answers one of the known dialects."""
        counter = ServerTokenCounter(self.base_url, model=self.facts.model)
        if counter.probe():
            return counter
        counter.close()
        return None

    # -- what the clients share ---------------------------------------------------------------
    def placement_fields(self, tags: RequestTags, path: str) -> dict[str, Any]:
        """Body fields that place a request of `tags` to `path` on the server. llama.cpp: its
        slot, whether the context the slot holds is dead (`SlotPairs.retire`), and for
        best-effort work, when `best_effort_batch` is set, the batch size that bounds a
        foreground prompt's wait for it (the embedded engine honours the last two, stock
        llama.cpp ignores them). No fields for a request that computes in no slot (rendering,
        tokenizing, slot save and restore): it takes no slot's place."""
        if not path.rstrip("/").endswith(SLOT_COMPUTING_PATHS):
            return {}
        fields: dict[str, Any] = {}
        if self.slots is not None and (placement := self.slots.place(tags)) is not None:
            fields["id_slot"] = placement.slot
            if placement.discard_held_prompt:
                fields[DISCARD_SLOT_PROMPT_FIELD] = True
        sizer = self.best_effort_batch
        if sizer is not None and self.wire == "llamacpp" and tags.priority_class == "be":
            fields[BEST_EFFORT_BATCH_FIELD] = sizer.tokens
        return fields

    def counts(self, url: str) -> bool:
        """Whether a request to `url` goes to this server."""
        return origin_of(url) == self.origin

    def gate(self, *, admit: GateAdmission = DEFAULT_GATE_ADMISSION) -> SlackGate:
        """Best-effort work waits here for this server's slack."""
        return SlackGate(self.foreground, admit=admit)

    def http_client(self, **client_kwargs: Any) -> httpx.Client:
        return tagged_http_client(session=self, **client_kwargs)

    def async_http_client(self, **client_kwargs: Any) -> httpx.AsyncClient:
        return tagged_async_http_client(session=self, **client_kwargs)

    def __repr__(self) -> str:
        return f"ServerSession({self.base_url!r}, wire={self.wire!r}, facts={self.facts!r})"


def _server_root(base_url: object) -> str:
    """The server's root URL (no trailing /v1); ValueError for anything but an http(s) URL, before
    any probe is sent."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http(s) URL of the server, got {base_url!r}")
    return base_url.rstrip("/").removesuffix("/v1")


def _get(client: httpx.Client, url: str) -> httpx.Response | None:
    try:
        return client.get(url)
    except httpx.HTTPError:
        return None


async def _aget(client: httpx.AsyncClient, url: str) -> httpx.Response | None:
    try:
        return await client.get(url)
    except httpx.HTTPError:
        return None


def _probe_paths() -> tuple[str, ...]:
    return ("/v1/models", "/props")


def _follow_up_paths(replies: Mapping[str, Any]) -> tuple[str, ...]:
    """What to ask a server that is not llama.cpp: SGLang's server info, our router's programs."""
    if isinstance(replies.get("/props"), Mapping) or replies.get("/v1/models") is None:
        return ()  # llama.cpp; or no OpenAI-compatible server answered (hosted, unreachable)
    owner = str(_first_model(replies.get("/v1/models")).get("owned_by") or "").lower()
    if owner in ("vllm",) or owner.startswith("lookahead"):
        return ()
    return ("/get_server_info", "/programs")


def _facts(replies: Mapping[str, Any]) -> ServerFacts:
    return ServerFacts.from_replies(
        replies.get("/v1/models"),
        replies.get("/props"),
        replies.get("/get_server_info"),
        replies.get("/programs"),
    )


def _is_sglang_info(reply: Any) -> bool:
    """SGLang's `/get_server_info`: its server arguments and scheduler state."""
    return isinstance(reply, Mapping) and any(
        key in reply for key in ("model_path", "max_total_num_tokens", "tp_size")
    )


def _is_router_programs(reply: Any) -> bool:
    """The program-aware router's `GET /programs` view."""
    return isinstance(reply, Mapping) and "programs" in reply and "policy" in reply


def _first_model(models: Any) -> Mapping[str, Any]:
    data = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        return data[0]
    return {}


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _json_or_none(response: httpx.Response | None) -> Any:
    """The JSON document of a 200 reply (an object or a list), else None."""
    if response is None or response.status_code != 200:
        return None
    try:
        document = response.json()
    except ValueError:
        return None
    return document if isinstance(document, Mapping | list) else None

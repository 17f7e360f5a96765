"""The wire protocol: what a request says about its program and its urgency, in every form it
travels in. The one owner of field names, priority classes and their numeric priorities, the tags
type, and how tags are written into (and read back from) a request: the tagging transport, the
SGLang plugin, the simulator and the router all go through here.

Forms on the wire:
- top-level JSON fields of the request body (the lookahead artifact's format), e.g.
  `{"program_id": "agent-7", "priority_class": "be", "is_lookahead": true, ...}`;
- SGLang: `priority` (int) and `custom_params` (a flat dict of the same fields), the two carriers
  that survive to SGLang's scheduler; vLLM: `priority` (int);
- headers: `X-Program-Id`, and Dynamo's `x-dynamo-session-id` /
  `nvext.agent_context.trajectory_id` for the program identity.

Wire formats (what a client writes into the body for a server): "openai" (top-level fields:
our engine, simulator and router), "sglang", "vllm", "llamacpp" (top-level fields, the slot
placement added by the client session), and "none": no field in the body at all, only the
`X-Program-Id` header. "none" is for servers not known to accept the fields: hosted
OpenAI-style APIs answer 400 "Unrecognized request argument" to unknown top-level fields.

Standard library only: this module is imported inside SGLang's scheduler process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, get_args

PriorityClass = Literal["lc", "be"]  # latency-critical | best-effort
PRIORITY_CLASSES: tuple[str, ...] = get_args(PriorityClass)

# Integer priorities for engines with numeric priority scheduling, lower = more urgent: vLLM's
# convention, and SGLang's with --schedule-low-priority-values-first (which `lookahead-sdk
# sglang launch` passes; SGLang's own default is the reverse).
NUMERIC_PRIORITY: dict[str, int] = {"lc": 0, "be": 10}

# Every tag field, as named at the top level of a body and inside `custom_params`.
TAG_FIELDS: tuple[str, ...] = (
    "program_id",
    "priority_class",
    "is_lookahead",
    "lookahead_group_id",
    "commit_deadline_ms",
    "slo_ttft_ms",
    "slo_tbt_ms",
    "promote_group_id",
)
_ID_FIELDS: tuple[str, ...] = ("program_id", "lookahead_group_id", "promote_group_id")
_MS_FIELDS: tuple[str, ...] = ("commit_deadline_ms", "slo_ttft_ms", "slo_tbt_ms")
MAX_ID_LENGTH = 256

PROGRAM_HEADER = "X-Program-Id"
DYNAMO_SESSION_HEADER = "x-dynamo-session-id"
RELEASE_PATH = "/programs/release"
# The embedded engine's request field capping a best-effort prompt's batches (engine.patches).
BEST_EFFORT_BATCH_FIELD = "best_effort_batch_tokens"
# The embedded engine's request field saying the prompt its `id_slot` holds is dead (a context
# its program replaced): the engine does not save it into its RAM prompt cache (engine.patches).
DISCARD_SLOT_PROMPT_FIELD = "discard_slot_prompt"

WireFormat = Literal["openai", "sglang", "vllm", "llamacpp", "none"]
WIRE_FORMATS: tuple[str, ...] = get_args(WireFormat)


def check_id(value: object, name: str) -> str:
    """An id that fits in a header and a JSON body alike: printable ASCII, no surrounding
    whitespace, at most MAX_ID_LENGTH characters. ValueError naming the field otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    if not value or value != value.strip():
        raise ValueError(f"{name} must be non-empty without surrounding whitespace, got {value!r}")
    if len(value) > MAX_ID_LENGTH:
        raise ValueError(f"{name} must be at most {MAX_ID_LENGTH} characters, got {len(value)}")
    if not all(" " <= char <= "~" for char in value):
        raise ValueError(
            f"{name} must be printable ASCII (it travels in the {PROGRAM_HEADER} header), "
            f"got {value!r}; use e.g. letters, digits, '-', '_', ':', '/'"
        )
    return value


def check_wire(wire: object) -> WireFormat:
    if wire not in WIRE_FORMATS:
        raise ValueError(f"wire must be one of {WIRE_FORMATS}, got {wire!r}")
    return wire  # type: ignore[return-value]


@dataclass(frozen=True)
class RequestTags:
    """What one request says about itself.

    `commit_deadline_ms` is relative: milliseconds after the request reaches the server by which
    the lookahead is expected to be committed (clients and servers share no clock).
    `promote_group_id` raises every request of that lookahead group to latency-critical; a
    lookahead request sent with `priority_class="lc"` promotes its own group the same way.
    `extends_live_context` is a client-side placement hint (a lookahead request whose prompt is
    the program's live context plus a tail, e.g. a summary request): never sent.
    """

    program_id: str | None = None
    priority_class: PriorityClass = "lc"
    is_lookahead: bool = False
    lookahead_group_id: str | None = None
    commit_deadline_ms: float | None = None
    slo_ttft_ms: float | None = None
    slo_tbt_ms: float | None = None
    promote_group_id: str | None = None
    extends_live_context: bool = False

    def __post_init__(self) -> None:
        for name in _ID_FIELDS:
            value = getattr(self, name)
            if value is not None:
                check_id(value, name)
        if self.priority_class not in PRIORITY_CLASSES:
            raise ValueError(
                f"priority_class must be 'lc' (latency-critical) or 'be' (best-effort), "
                f"got {self.priority_class!r}"
            )
        for name in ("is_lookahead", "extends_live_context"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{name} must be true or false, got {type(getattr(self, name)).__name__}"
                )
        if self.is_lookahead and not self.lookahead_group_id:
            raise ValueError("lookahead_group_id is required when is_lookahead is true")
        for name in _MS_FIELDS:
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(f"{name} must be a number of milliseconds >= 0, got {value!r}")

    # -- reading ------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, fields: Mapping[str, Any], *, where: str = "body") -> RequestTags:
        """The tag fields of `fields` (other keys are ignored), validated; the ValueError names
        the field as `{where}.{field}`."""
        if not isinstance(fields, Mapping):
            raise ValueError(f"{where} must be a JSON object, got {type(fields).__name__}")
        values = {name: fields[name] for name in TAG_FIELDS if fields.get(name) is not None}
        try:
            return cls(**values)
        except ValueError as error:
            raise ValueError(f"{where}.{error}") from None
        except TypeError as error:  # e.g. an unhashable value where a scalar belongs
            raise ValueError(f"{where}: {error}") from None

    @classmethod
    def from_request(
        cls, body: Mapping[str, Any] | None, headers: Mapping[str, str] | None = None
    ) -> RequestTags | None:
        """The tags a request carries anywhere: top-level body fields, `custom_params` (which
        wins where both have a field), the program id from `X-Program-Id`, Dynamo's
        `x-dynamo-session-id` header or `nvext.agent_context.trajectory_id`. None when it
        carries none (an untagged request). ValueError names a malformed field."""
        merged = merge_tag_fields(body, _custom_params(body)) or {}
        if "program_id" not in merged:
            program_id = program_id_of(body, headers)
            if program_id is not None:
                merged["program_id"] = program_id
        if not merged:
            return None
        return cls.from_mapping(merged, where="request")

    # -- deriving -----------------------------------------------------------------------------
    def lookahead(self, group_id: str, *, commit_deadline_ms: int | None = None) -> RequestTags:
        """Tags for best-effort background work of this program."""
        return replace(
            self,
            priority_class="be",
            is_lookahead=True,
            lookahead_group_id=group_id,
            commit_deadline_ms=commit_deadline_ms,
        )

    def best_effort(self) -> RequestTags:
        """Tags for best-effort work of this program that belongs to no lookahead (a copy of
        its live context made while its tools run)."""
        return replace(self, priority_class="be")

    def extending_live_context(self) -> RequestTags:
        return replace(self, extends_live_context=True)

    def promoted(self) -> RequestTags:
        """A lookahead about to be committed: still grouped, now latency-critical."""
        return replace(self, priority_class="lc")

    @property
    def is_best_effort(self) -> bool:
        """Best-effort by class or by nature (a lookahead; sent as "lc" it is a promoted one,
        see `group_to_promote`). Untagged requests are latency-critical."""
        return self.is_lookahead or self.priority_class == "be"

    @property
    def group_to_promote(self) -> str | None:
        """The lookahead group this request raises to latency-critical, if any."""
        if self.promote_group_id is not None:
            return self.promote_group_id
        if self.is_lookahead and self.priority_class == "lc":
            return self.lookahead_group_id
        return None

    # -- writing ------------------------------------------------------------------------------
    def to_body(self) -> dict[str, Any]:
        """Top-level JSON fields (the lookahead artifact's wire format); unset fields omitted."""
        fields = asdict(self)
        del fields["extends_live_context"]
        if not self.is_lookahead:
            del fields["is_lookahead"]
        return {key: value for key, value in fields.items() if value is not None}

    def to_custom_params(self) -> dict[str, Any]:
        """The same fields, flat (JSON scalars only, as SGLang's IPC requires)."""
        return self.to_body()

    @property
    def numeric_priority(self) -> int:
        return NUMERIC_PRIORITY[self.priority_class]

    def body_fields(self, wire: WireFormat) -> dict[str, Any]:
        """The fields a request body gets for a server speaking `wire`."""
        if wire == "none":
            return {}
        if wire == "sglang":
            return {
                **self.to_body(),
                "priority": self.numeric_priority,
                "custom_params": self.to_custom_params(),
            }
        if wire == "vllm":
            return {**self.to_body(), "priority": self.numeric_priority}
        return self.to_body()

    def headers(self) -> dict[str, str]:
        return {PROGRAM_HEADER: self.program_id} if self.program_id else {}


def merge_tag_fields(
    top_level: Mapping[str, Any] | None, custom_params: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """`custom_params` completed with the tag fields found at the top level of a request body.

    What is already in `custom_params` wins over a top-level field of the same name. Returns None
    when neither carries anything (an untagged request stays untouched). ValueError if the merged
    tags are invalid."""
    if custom_params is not None and not isinstance(custom_params, Mapping):
        raise ValueError(f"custom_params must be a JSON object, got {type(custom_params).__name__}")
    merged: dict[str, Any] = dict(custom_params or {})
    if top_level is not None:
        for name in TAG_FIELDS:
            if top_level.get(name) is not None and name not in merged:
                merged[name] = top_level[name]
    if not merged:
        return None if custom_params is None else merged
    RequestTags.from_mapping(merged, where="custom_params")
    return merged


def program_id_of(
    body: Mapping[str, Any] | None, headers: Mapping[str, str] | None = None
) -> str | None:
    """The program identity of a request in any of the forms fleets use, in this order:
    `custom_params.program_id` (it wins over a top-level field, as for every tag in
    `RequestTags.from_request`), the body's `program_id`, the `X-Program-Id` header, Dynamo's
    `x-dynamo-session-id` header or `nvext.agent_context.trajectory_id`."""
    custom = _custom_params(body)
    if custom is not None and isinstance(custom.get("program_id"), str):
        return custom["program_id"]
    if body is not None and isinstance(body.get("program_id"), str):
        return body["program_id"]
    for header in (PROGRAM_HEADER, DYNAMO_SESSION_HEADER):
        value = _header(headers, header)
        if value:
            return value
    nvext = body.get("nvext") if body is not None else None
    context = nvext.get("agent_context") if isinstance(nvext, Mapping) else None
    trajectory = context.get("trajectory_id") if isinstance(context, Mapping) else None
    return trajectory if isinstance(trajectory, str) and trajectory else None


def release_body(program_id: str) -> dict[str, str]:
    """`POST {router}/programs/release` body: the program ended, free its accounting."""
    return {"program_id": check_id(program_id, "program_id")}


def _custom_params(body: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if body is None:
        return None
    custom = body.get("custom_params")
    if custom is None:
        sampling = body.get("sampling_params")
        custom = sampling.get("custom_params") if isinstance(sampling, Mapping) else None
    if custom is not None and not isinstance(custom, Mapping):
        raise ValueError(f"custom_params must be a JSON object, got {type(custom).__name__}")
    return custom


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if headers is None:
        return None
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
    return value

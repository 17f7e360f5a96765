"""The lookahead request metadata as it travels through SGLang, and its validation.

A client may send the fields at the top level of the JSON body (the lookahead artifact's wire
format) or inside `custom_params`. SGLang's request models drop unknown top-level fields, but
`sampling_params.custom_params` reaches the scheduler's `Req` unchanged, so the plugin's ingress
hook copies top-level fields into `custom_params`, and the scheduler side reads only
`custom_params`. No sglang import here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

PriorityClass = Literal["lc", "be"]
PRIORITY_CLASSES: tuple[str, ...] = ("lc", "be")

# Every key the plugin reads; all live flat in `custom_params` once a request is inside SGLang.
TAG_FIELDS: tuple[str, ...] = (
    "priority_class",
    "is_lookahead",
    "lookahead_group_id",
    "program_id",
    "commit_deadline_ms",
    "slo_ttft_ms",
    "slo_tbt_ms",
    "promote_group_id",
)
_MS_FIELDS: tuple[str, ...] = ("commit_deadline_ms", "slo_ttft_ms", "slo_tbt_ms")
_ID_FIELDS: tuple[str, ...] = ("lookahead_group_id", "program_id", "promote_group_id")


@dataclass(frozen=True, slots=True)
class LookaheadTags:
    """What one request says about itself.

    `commit_deadline_ms` is relative: milliseconds after the request reaches the server by which
    the lookahead is expected to be committed (clients and servers share no clock).
    `promote_group_id` raises every request of that lookahead group to latency-critical; a
    lookahead request sent with `priority_class="lc"` promotes its own group the same way.
    """

    priority_class: PriorityClass | None = None
    is_lookahead: bool = False
    lookahead_group_id: str | None = None
    program_id: str | None = None
    commit_deadline_ms: float | None = None
    slo_ttft_ms: float | None = None
    slo_tbt_ms: float | None = None
    promote_group_id: str | None = None

    @classmethod
    def from_mapping(
        cls, fields: Mapping[str, Any], *, where: str = "custom_params"
    ) -> LookaheadTags:
        """Validate the tag keys of `fields` (other keys are ignored); ValueError names the field."""
        if not isinstance(fields, Mapping):
            raise TypeError(f"{where} must be a JSON object, got {type(fields).__name__}")
        values = {name: fields[name] for name in TAG_FIELDS if fields.get(name) is not None}
        priority_class = values.get("priority_class")
        if priority_class is not None and priority_class not in PRIORITY_CLASSES:
            raise ValueError(
                f"{where}.priority_class must be 'lc' (latency-critical) or 'be' (best-effort), "
                f"got {priority_class!r}"
            )
        is_lookahead = values.get("is_lookahead", False)
        if not isinstance(is_lookahead, bool):
            raise ValueError(f"{where}.is_lookahead must be true or false, got {is_lookahead!r}")
        for name in _ID_FIELDS:
            value = values.get(name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{where}.{name} must be a non-empty string, got {value!r}")
        for name in _MS_FIELDS:
            value = values.get(name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"{where}.{name} must be a number of milliseconds >= 0, got {value!r}"
                )
        if is_lookahead and "lookahead_group_id" not in values:
            raise ValueError(f"{where}.lookahead_group_id is required when is_lookahead is true")
        return cls(
            priority_class=priority_class,
            is_lookahead=is_lookahead,
            lookahead_group_id=values.get("lookahead_group_id"),
            program_id=values.get("program_id"),
            commit_deadline_ms=_as_float(values.get("commit_deadline_ms")),
            slo_ttft_ms=_as_float(values.get("slo_ttft_ms")),
            slo_tbt_ms=_as_float(values.get("slo_tbt_ms")),
            promote_group_id=values.get("promote_group_id"),
        )

    @property
    def is_best_effort(self) -> bool:
        """Untagged requests are latency-critical; a lookahead is best-effort by nature."""
        return self.is_lookahead or self.priority_class == "be"

    @property
    def group_to_promote(self) -> str | None:
        """The lookahead group this request raises to LC, if any."""
        if self.promote_group_id is not None:
            return self.promote_group_id
        if self.is_lookahead and self.priority_class == "lc":
            return self.lookahead_group_id
        return None

    def to_custom_params(self) -> dict[str, Any]:
        """The tags as flat `custom_params` entries (JSON scalars only, as SGLang's IPC requires)."""
        fields = asdict(self)
        if not self.is_lookahead:
            fields.pop("is_lookahead")
        return {name: value for name, value in fields.items() if value is not None}


def merge_tag_fields(
    top_level: Mapping[str, Any] | None, custom_params: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """`custom_params` completed with the tag fields found at the top level of a request body.

    Precedence: what is already in `custom_params` wins over a top-level field of the same name.
    Returns None when neither carries anything (so an untagged request stays untouched).
    Raises ValueError if the merged tags are invalid.
    """
    merged: dict[str, Any] = dict(custom_params or {})
    for name in TAG_FIELDS:
        if top_level is not None and top_level.get(name) is not None and name not in merged:
            merged[name] = top_level[name]
    if not merged:
        return None if custom_params is None else merged
    LookaheadTags.from_mapping(merged)
    return merged


def tags_from_custom_params(custom_params: Mapping[str, Any] | None) -> LookaheadTags:
    """The tags a scheduler-side `Req` carries (`req.sampling_params.custom_params`)."""
    if not custom_params:
        return LookaheadTags()
    return LookaheadTags.from_mapping(custom_params)


def _as_float(value: float | int | None) -> float | None:
    return None if value is None else float(value)

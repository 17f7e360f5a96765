"""Argument checks of the router's own kinds (ids, the clock, token counts, capacities), on top
of `base.checks`. Each raises before anything is mutated, so a rejected call leaves the program
table exactly as it was."""

from __future__ import annotations

import math
from typing import Any

from lookahead_sdk.base.checks import require_int


def require_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def require_tokens(name: str, value: Any) -> int:
    return require_int(name, value, meaning="a token count")


def require_capacity(name: str, value: Any) -> int:
    return require_int(name, value, low=1, meaning="the backend's KV capacity in tokens")


def require_time(value: Any, last_s: float) -> float:
    """`now_s` must be finite and never go back: the caller passes one monotonic clock."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"now_s must be a finite number of seconds, got {value!r}")
    if value < last_s:
        raise ValueError(
            f"now_s went backwards ({value} < {last_s}); pass a monotonic clock "
            "(time.monotonic() or the simulator's virtual time)"
        )
    return float(value)

"""Argument checks shared by the router's public methods. Each raises before anything is mutated,
so a rejected call leaves the program table exactly as it was."""

from __future__ import annotations

import math
from typing import Any


def require_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def require_tokens(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0 (a token count), got {value!r}")
    return value


def require_capacity(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{name} must be an int > 0 (the backend's KV capacity in tokens), got {value!r}"
        )
    return value


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


def require_number(name: str, value: Any, *, low: float, low_open: bool, fix: str) -> float:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value > low if low_open else value >= low)
    )
    if not ok:
        bound = f"> {low}" if low_open else f">= {low}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}; {fix}")
    return float(value)

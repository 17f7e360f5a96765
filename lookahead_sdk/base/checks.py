"""Argument checks shared by every layer and server: each names the field, what it takes (and
what that means, and the fix where one helps) and what it got. Callers check before they change
anything, so a rejected call leaves their state as it was. A number is never a bool, NaN or
infinite; an int is never a bool."""

from __future__ import annotations

import math
from typing import Any, overload

ErrorType = type[Exception]


def _fail(
    name: str, takes: str, value: Any, *, meaning: str, optional: bool, fix: str, error: ErrorType
) -> Exception:
    described = f"{takes} ({meaning})" if meaning else takes
    if optional:
        described += " or None"
    return error(f"{name} must be {described}, got {value!r}" + (f"; {fix}" if fix else ""))


def is_int(value: Any, *, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def is_number(value: Any, *, low: float = 0.0, low_open: bool = False) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > low if low_open else value >= low)
    )


@overload
def require_int(
    name: str,
    value: Any,
    *,
    low: int = ...,
    meaning: str = ...,
    fix: str = ...,
    error: ErrorType = ...,
) -> int: ...
@overload
def require_int(
    name: str,
    value: Any,
    *,
    low: int = ...,
    optional: bool,
    meaning: str = ...,
    fix: str = ...,
    error: ErrorType = ...,
) -> int | None: ...
def require_int(
    name: str,
    value: Any,
    *,
    low: int = 0,
    optional: bool = False,
    meaning: str = "",
    fix: str = "",
    error: ErrorType = ValueError,
) -> int | None:
    """An int >= `low` (or None where `optional`)."""
    if (value is None and optional) or is_int(value, low=low):
        return value
    raise _fail(
        name, f"an int >= {low}", value, meaning=meaning, optional=optional, fix=fix, error=error
    )


@overload
def require_number(
    name: str,
    value: Any,
    *,
    low: float = ...,
    low_open: bool = ...,
    meaning: str = ...,
    fix: str = ...,
    error: ErrorType = ...,
) -> float: ...
@overload
def require_number(
    name: str,
    value: Any,
    *,
    low: float = ...,
    low_open: bool = ...,
    optional: bool,
    meaning: str = ...,
    fix: str = ...,
    error: ErrorType = ...,
) -> float | None: ...
def require_number(
    name: str,
    value: Any,
    *,
    low: float = 0.0,
    low_open: bool = False,
    optional: bool = False,
    meaning: str = "",
    fix: str = "",
    error: ErrorType = ValueError,
) -> float | None:
    """A finite number >= `low` (> `low` where `low_open`), or None where `optional`."""
    if value is None and optional:
        return None
    if is_number(value, low=low, low_open=low_open):
        return float(value)
    bound = f"> {low:g}" if low_open else f">= {low:g}"
    raise _fail(
        name,
        f"a finite number {bound}",
        value,
        meaning=meaning,
        optional=optional,
        fix=fix,
        error=error,
    )


def require_flag(name: str, value: Any, *, error: ErrorType = ValueError) -> bool:
    if isinstance(value, bool):
        return value
    raise error(f"{name} must be True or False, got {value!r}")


def require_text(name: str, value: Any, *, meaning: str = "", error: ErrorType = ValueError) -> str:
    """A string with something besides blanks in it."""
    if isinstance(value, str) and value.strip():
        return value
    raise _fail(
        name, "a non-empty string", value, meaning=meaning, optional=False, fix="", error=error
    )

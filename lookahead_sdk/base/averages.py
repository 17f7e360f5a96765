"""The exponential moving average the runtime's and the client's pace estimates share."""

from __future__ import annotations


def moving_average(previous: float | None, value: float, smoothing: float) -> float:
    """`value` for the first observation, else `previous` moved `smoothing` of the way to it."""
    return value if previous is None else previous + smoothing * (value - previous)

"""Closed-loop agent programs: each step sends the whole context, decodes a reply, runs a tool
(lognormal time) whose output is appended; contexts grow ~600 tokens a step."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    steps: tuple[int, int] = (20, 60)
    initial_tokens: tuple[int, int] = (1500, 2500)
    decode_tokens: tuple[int, int] = (50, 200)
    tool_output_tokens: tuple[int, int] = (300, 650)
    tool_median_s: float = 3.0
    tool_sigma: float = 1.0  # of the log; p99 is e^(2.33 sigma) ~ 10x the median at 1.0

    def __post_init__(self) -> None:
        for name in ("steps", "initial_tokens", "decode_tokens", "tool_output_tokens"):
            low, high = getattr(self, name)
            if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
                raise ValueError(
                    f"WorkloadConfig.{name} must be a (low, high) pair of ints with "
                    f"1 <= low <= high, got {(low, high)}"
                )
        if not (self.tool_median_s > 0 and self.tool_sigma >= 0):
            raise ValueError("WorkloadConfig.tool_median_s must be > 0 and tool_sigma >= 0")

    def mean_resident_tokens(self) -> float:
        """Time-averaged KV a running program holds (steps weighted equally): the context at
        an average step plus half a reply. With uniform step counts S, the mean over a
        program's steps of its context is c0 + g * E[S(S-1)] / (2 E[S])."""
        low, high = self.steps
        count = high - low + 1
        mean_s = (low + high) / 2
        mean_s_s1 = sum(s * (s - 1) for s in range(low, high + 1)) / count
        growth = _mean(self.decode_tokens) + _mean(self.tool_output_tokens)
        return (
            _mean(self.initial_tokens)
            + growth * mean_s_s1 / (2 * mean_s)
            + _mean(self.decode_tokens) / 2
        )


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    """One program: the prompt of its first step and, per step, reply length, tool time and
    tool output (the last step has no tool)."""

    initial_tokens: int
    decode_tokens: tuple[int, ...]
    tool_s: tuple[float, ...]
    tool_output_tokens: tuple[int, ...]

    @property
    def steps(self) -> int:
        return len(self.decode_tokens)

    def prompt_tokens(self, step: int) -> int:
        """Context sent at `step` (0-based): everything before it."""
        return (
            self.initial_tokens
            + sum(self.decode_tokens[:step])
            + sum(self.tool_output_tokens[:step])
        )


def sample_program(
    rng: random.Random,
    config: WorkloadConfig,
    *,
    length_biased: bool = False,
    initial_tokens: int | None = None,
) -> ProgramSpec:
    """`length_biased`: draw the step count with probability proportional to it (the program
    a closed-loop slot is found running at a random moment), for a stationary start."""
    low, high = config.steps
    if length_biased:
        steps = rng.choices(range(low, high + 1), weights=range(low, high + 1))[0]
    else:
        steps = rng.randint(low, high)
    mu = math.log(config.tool_median_s)
    return ProgramSpec(
        initial_tokens=(
            rng.randint(*config.initial_tokens) if initial_tokens is None else initial_tokens
        ),
        decode_tokens=tuple(rng.randint(*config.decode_tokens) for _ in range(steps)),
        tool_s=tuple(rng.lognormvariate(mu, config.tool_sigma) for _ in range(steps - 1)),
        tool_output_tokens=tuple(rng.randint(*config.tool_output_tokens) for _ in range(steps - 1)),
    )


def _mean(bounds: tuple[int, int]) -> float:
    return (bounds[0] + bounds[1]) / 2

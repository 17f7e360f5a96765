"""Seeded open-loop workloads for the in-process simulator.

`SloWorkload` (paper Fig. 14 setting): latency-critical agent turns (a cached per-program history
plus fresh tokens, then a streamed answer) arriving as a Poisson process, mixed with best-effort
lookahead warm-ups (prefill-only, a new transformed prefix of a few thousand tokens, due at a
commit deadline) arriving at a variable rate: the best-effort load.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from lookahead_sdk.sim.request import RequestTags, SimRequest


@dataclass(frozen=True, slots=True)
class SloWorkload:
    duration_s: float = 120.0
    warmup_s: float = 10.0  # requests arriving earlier are not measured
    lc_rate_per_s: float = 1.0
    lc_programs: int = 8
    lc_history_tokens: tuple[int, int] = (2000, 6000)
    lc_new_tokens: tuple[int, int] = (300, 800)
    lc_output_tokens: tuple[int, int] = (32, 96)
    be_prompt_tokens: tuple[int, int] = (3000, 6000)
    be_deadline_s: tuple[float, float] = (5.0, 15.0)
    seed: int = 0

    def describe(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def requests(self, be_rate_per_s: float) -> list[SimRequest]:
        """The LC stream is the same for every BE rate (its own random stream)."""
        if be_rate_per_s < 0:
            raise ValueError(f"be_rate_per_s must be >= 0, got {be_rate_per_s}")
        lc_rng = random.Random(self.seed)
        histories = [
            _tokens(lc_rng, lc_rng.randint(*self.lc_history_tokens))
            for _ in range(self.lc_programs)
        ]
        requests = []
        for index, arrival_s in enumerate(_poisson(lc_rng, self.lc_rate_per_s, self.duration_s)):
            program = lc_rng.randrange(self.lc_programs)
            requests.append(
                SimRequest(
                    rid=f"lc-{index}",
                    prompt=histories[program]
                    + _tokens(lc_rng, lc_rng.randint(*self.lc_new_tokens)),
                    max_new_tokens=lc_rng.randint(*self.lc_output_tokens),
                    arrival_ms=arrival_s * 1000.0,
                    tags=RequestTags(priority_class="lc", program_id=f"program-{program}"),
                )
            )
        be_rng = random.Random(self.seed + 1)
        for index, arrival_s in enumerate(_poisson(be_rng, be_rate_per_s, self.duration_s)):
            requests.append(
                SimRequest(
                    rid=f"be-{index}",
                    prompt=_tokens(be_rng, be_rng.randint(*self.be_prompt_tokens)),
                    max_new_tokens=0,
                    arrival_ms=arrival_s * 1000.0,
                    tags=RequestTags(
                        priority_class="be",
                        is_lookahead=True,
                        lookahead_group_id=f"warmup-{index}",
                        commit_deadline_ms=be_rng.uniform(*self.be_deadline_s) * 1000.0,
                    ),
                )
            )
        return sorted(requests, key=lambda r: r.arrival_ms)


def _poisson(rng: random.Random, rate_per_s: float, duration_s: float) -> list[float]:
    times: list[float] = []
    if rate_per_s <= 0:
        return times
    t = rng.expovariate(rate_per_s)
    while t < duration_s:
        times.append(t)
        t += rng.expovariate(rate_per_s)
    return times


def _tokens(rng: random.Random, count: int) -> tuple[int, ...]:
    """`count` random 16-bit token ids (fast: one draw of random bytes)."""
    return tuple(memoryview(rng.randbytes(2 * count)).cast("H"))

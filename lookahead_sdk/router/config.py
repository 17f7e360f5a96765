"""Router policy settings, validated on construction (a bad value names the field and the fix)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lookahead_sdk.base.checks import require_flag, require_number

NewProgramOrder = Literal["arrival", "smallest"]
PauseOrder = Literal["idle_longest", "smallest"]


@dataclass(frozen=True, slots=True)
class ThunderConfig:
    """Program-aware pause/restore (ThunderAgent).

    A backend whose accounted tokens exceed `pause_at` x capacity is brought down to `pause_to` x
    capacity (acting programs first, the one idle longest first: `pause_order`); a waiting
    program is restored where it fits under `restore_to` x capacity.
    `aging_s` bounds every wait: a request held that long goes first, and it may take room that
    acting programs' tokens, decayed by 2^(-acting_s / decay_half_life_s), would free (those
    programs are then paused); younger requests only take free room. 0 turns decay, and so
    this preemption, off. `swap_budget` caps preemption per backend: the tokens it re-admits
    stay under this fraction of the context tokens the backend served (the sum of its
    responses' `usage.total_tokens`), so an overload too deep for bounded waits cannot spend
    the GPU on re-prefill (0: no preemption).
    `hold_timeout_s` force-admits a held request (counted); `lease_s` releases a program whose
    client went quiet. `global_queue=False` is the ablation with per-backend queues: a program
    is only ever restored onto the backend it was first given. `new_program_order="smallest"`
    admits waiting new programs smallest first (within the aging bound) instead of in arrival
    order, and `pause_order="smallest"` pauses the smallest acting program first (the upstream
    order); both are there to measure what they cost (see `restore.py`, `pause.py`).
    """

    pause_at: float = 1.0
    pause_to: float = 0.9
    restore_to: float = 0.9
    tick_s: float = 1.0
    decay_half_life_s: float = 1.0
    aging_s: float = 40.0
    hold_timeout_s: float = 300.0
    lease_s: float = 600.0
    swap_budget: float = 0.12
    global_queue: bool = True
    new_program_order: NewProgramOrder = "arrival"
    pause_order: PauseOrder = "idle_longest"

    def __post_init__(self) -> None:
        require_number(
            "ThunderConfig.pause_at", self.pause_at, low=0.0, low_open=True,
            fix="use a fraction of capacity such as 1.0",
        )  # fmt: skip
        for name in ("pause_to", "restore_to"):
            value = require_number(
                f"ThunderConfig.{name}", getattr(self, name), low=0.0, low_open=True,
                fix="use a fraction of capacity such as 0.9",
            )  # fmt: skip
            if value > self.pause_at:
                raise ValueError(
                    f"ThunderConfig.{name} ({value}) must be <= pause_at ({self.pause_at}); "
                    f"lower {name} or raise pause_at (otherwise pausing and restoring oscillate)"
                )
        require_number(
            "ThunderConfig.tick_s", self.tick_s, low=0.0, low_open=True,
            fix="the default is 1 s",
        )  # fmt: skip
        require_number(
            "ThunderConfig.decay_half_life_s", self.decay_half_life_s, low=0.0, low_open=False,
            fix="use 0 to turn acting-token decay off",
        )  # fmt: skip
        for name in ("aging_s", "hold_timeout_s", "lease_s"):
            require_number(
                f"ThunderConfig.{name}", getattr(self, name), low=0.0, low_open=True,
                fix="pass a positive number of seconds",
            )  # fmt: skip
        require_number(
            "ThunderConfig.swap_budget", self.swap_budget, low=0.0, low_open=False,
            fix="use a fraction such as 0.1 (0 turns preemption off)",
        )  # fmt: skip
        require_flag("ThunderConfig.global_queue", self.global_queue)
        if self.new_program_order not in ("arrival", "smallest"):
            raise ValueError(
                "ThunderConfig.new_program_order must be 'arrival' or 'smallest', got "
                f"{self.new_program_order!r}"
            )
        if self.pause_order not in ("idle_longest", "smallest"):
            raise ValueError(
                "ThunderConfig.pause_order must be 'idle_longest' or 'smallest', got "
                f"{self.pause_order!r}"
            )


@dataclass(frozen=True, slots=True)
class BaselineConfig:
    """Baselines never hold or pause; they only keep the table tidy with the idle lease."""

    lease_s: float = 600.0

    def __post_init__(self) -> None:
        require_number(
            "BaselineConfig.lease_s", self.lease_s, low=0.0, low_open=True,
            fix="pass a positive number of seconds",
        )  # fmt: skip

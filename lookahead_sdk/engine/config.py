"""EngineConfig: what llama-server to run, validated up front."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from lookahead_sdk.engine.model import DEFAULT_QUANTIZATION, validate_quantization

DEFAULT_PORT = 8089
MODEL_CONTEXT = 8192  # SmolLM2-135M training context; llama-server caps slots to it
KV_PAD = 256  # llama.cpp rounds the per-slot context up to a multiple of this
FLASH_ATTN_MODES = ("off", "on", "auto")
# Off: on CPU, ggml's flash-attention kernel costs up to 2.5x more per attention unit for a short
# chunk after a long cached context (an agent's usual turn) and is no faster for long chunks; off,
# the attention cost is linear in Eq. 1's units, so the calibrated latency model fits the engine.
DEFAULT_FLASH_ATTN = "off"
# Tokens per batch (`--batch-size`). The engine is built with priority-aware batching
# (lookahead_sdk.engine.patches): the shortest waiting latency-critical prompt goes into the next
# batch first and gets its first token when that batch is done. What it can wait for is then
# the batch already running when it arrives, which this size bounds (a 128-token batch at a
# 4-8K context takes ~0.3-0.5 s on 2 cores; llama.cpp's default, 2048, would take seconds).
# Prefill throughput on CPU is the same at 128 as at 2048 (measured, docs/engine.md).
DEFAULT_BATCH_TOKENS = 128
LLAMA_CPP_BATCH_TOKENS = 2048
# The ranges EngineConfig accepts (the `engine start` flags check the same ones when parsed).
MAX_SLOTS = 256
MAX_THREADS = 1024
MAX_CACHE_RAM_MIB = 1 << 20
MIN_BATCH_TOKENS, MAX_BATCH_TOKENS = 32, 8192


ENGINE_THREADS_ENV = "LOOKAHEAD_SDK_ENGINE_THREADS"


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """Engine threads when the config names none: `$LOOKAHEAD_SDK_ENGINE_THREADS`, else every
    CPU this process may use (llama.cpp's own default). On an idle machine all of them are
    fastest, but ggml's threads spin at a barrier after every op, so on a machine that is busy
    with something else (a CI job, other engines) every op waits for the thread that lost its
    core: there, leave one CPU free (docs/engine.md, "Threads", has the measurements)."""
    value = os.environ.get(ENGINE_THREADS_ENV, "").strip()
    if not value:
        return usable_cpus()
    if not value.isdigit() or not 1 <= int(value) <= 1024:
        raise ValueError(
            f"${ENGINE_THREADS_ENV} must be a whole number of threads from 1 to 1024, got "
            f"{value!r}: set it to e.g. {max(1, usable_cpus() - 1)} or unset it (all CPUs)"
        )
    return int(value)


@dataclass(frozen=True)
class EngineConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    slots: int = 4
    ctx_per_slot: int = MODEL_CONTEXT
    threads: int | None = None  # None: default_threads()
    quantization: str = DEFAULT_QUANTIZATION
    # Host-memory prompt cache (MiB) for prompts evicted from a slot; 0 disables it.
    cache_ram_mib: int = 1024
    # Slot save/restore (`--slot-save-path`): lets a warm-up start from a copy of the live slot.
    slot_copies: bool = True
    flash_attn: str = DEFAULT_FLASH_ATTN
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ValueError("host must be a non-empty string such as '127.0.0.1'")
        _require_int_in("port", self.port, 1, 65535)
        _require_int_in("slots", self.slots, 1, MAX_SLOTS)
        _require_int_in("ctx_per_slot", self.ctx_per_slot, KV_PAD, MODEL_CONTEXT)
        if self.ctx_per_slot % KV_PAD:
            raise ValueError(
                f"ctx_per_slot must be a multiple of {KV_PAD} (llama.cpp pads it), "
                f"got {self.ctx_per_slot}"
            )
        if self.threads is not None:
            _require_int_in("threads", self.threads, 1, MAX_THREADS)
        validate_quantization(self.quantization)
        _require_int_in("cache_ram_mib", self.cache_ram_mib, -1, MAX_CACHE_RAM_MIB)
        if not isinstance(self.slot_copies, bool):
            raise TypeError(f"slot_copies must be a bool, got {type(self.slot_copies).__name__}")
        if self.flash_attn not in FLASH_ATTN_MODES:
            raise ValueError(
                f"flash_attn must be one of {', '.join(FLASH_ATTN_MODES)}, got {self.flash_attn!r}"
            )
        _require_int_in("batch_tokens", self.batch_tokens, MIN_BATCH_TOKENS, MAX_BATCH_TOKENS)
        if isinstance(self.extra_args, str) or not all(
            isinstance(arg, str) for arg in self.extra_args
        ):
            raise TypeError("extra_args must be a sequence of strings, e.g. ('--temp', '0')")
        object.__setattr__(self, "extra_args", tuple(self.extra_args))

    @property
    def total_ctx(self) -> int:
        """The ``-c`` value: llama.cpp splits it evenly over the slots (non-unified KV)."""
        return self.slots * self.ctx_per_slot

    def resolved(self) -> EngineConfig:
        """This config with defaults that depend on the machine (threads) filled in."""
        return replace(self, threads=self.threads or default_threads())

    def compatible_with(self, other: EngineConfig) -> bool:
        """Whether an engine running ``other`` can serve a request for this config."""
        return self.resolved() == other.resolved()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["extra_args"] = list(self.extra_args)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        # A state file written before the flash_attn or batch_tokens field describes an engine
        # that ran llama.cpp's own default.
        return cls(
            **{
                **data,
                "flash_attn": data.get("flash_attn", "auto"),
                "batch_tokens": data.get("batch_tokens", LLAMA_CPP_BATCH_TOKENS),
                "extra_args": tuple(data.get("extra_args", ())),
            }
        )


def _require_int_in(field: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{field} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{field} must be between {low} and {high}, got {value}")

"""A backend's KV capacity in tokens, read from what each engine reports (pure parsing; the
requests are in `discovery.py`):

- SGLang and our simulator: `GET /get_server_info` -> `max_total_num_tokens`;
- vLLM: `GET /metrics` -> `vllm:cache_config_info{block_size=..., num_gpu_blocks=...}`
  (capacity = block size x GPU blocks);
- llama.cpp: `GET /slots` (each slot's `n_ctx`) or `GET /props` (`n_ctx` per slot x
  `total_slots`). A program's context holds one slot and its lookahead branch another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from lookahead_sdk.base.checks import is_int
from lookahead_sdk.router.validation import require_capacity

BackendKind = Literal["sglang", "sim", "vllm", "llamacpp", "configured"]


@dataclass(frozen=True, slots=True)
class BackendInfo:
    url: str
    kind: BackendKind
    capacity_tokens: int
    slots: int | None = None  # llama.cpp's parallel slots

    def __post_init__(self) -> None:
        require_capacity(f"capacity of {self.url}", self.capacity_tokens)


def from_server_info(url: str, payload: Any) -> BackendInfo | None:
    if not isinstance(payload, dict):
        return None
    tokens = payload.get("max_total_num_tokens")
    states = payload.get("internal_states")
    if not is_int(tokens, low=1) and isinstance(states, list) and states:
        first = states[0]
        tokens = first.get("max_total_num_tokens") if isinstance(first, dict) else None
    if not is_int(tokens, low=1):
        return None
    kind: BackendKind = "sim" if "simulator" in payload else "sglang"
    return BackendInfo(url, kind, tokens)


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def from_vllm_metrics(url: str, text: str) -> BackendInfo | None:
    for line in text.splitlines():
        if not line.startswith("vllm:cache_config_info{"):
            continue
        labels = dict(_LABEL.findall(line[line.index("{") : line.rindex("}") + 1]))
        try:
            tokens = int(labels["block_size"]) * int(labels["num_gpu_blocks"])
        except (KeyError, ValueError):
            return None
        return BackendInfo(url, "vllm", tokens) if tokens > 0 else None
    return None


def from_llamacpp(url: str, props: Any, slots: Any) -> BackendInfo | None:
    if isinstance(slots, list) and slots and all(isinstance(s, dict) for s in slots):
        per_slot = [s.get("n_ctx") for s in slots]
        if all(is_int(n, low=1) for n in per_slot):
            return BackendInfo(url, "llamacpp", sum(per_slot), slots=len(slots))
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    total_slots = props.get("total_slots", 1)
    if is_int(n_ctx, low=1) and is_int(total_slots, low=1):
        return BackendInfo(url, "llamacpp", n_ctx * total_slots, slots=total_slots)
    return None

"""Settings of the HTTP proxy (`lookahead-sdk router serve`), validated on construction: a bad
value names the flag and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lookahead_sdk.base.checks import require_int, require_number
from lookahead_sdk.router.config import BaselineConfig, ThunderConfig
from lookahead_sdk.router.policies import POLICY_NAMES
from lookahead_sdk.sim.http_body import DEFAULT_BODY_LIMIT


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """`backends`: base URLs (`http://host:port`). `capacities`: KV tokens per backend URL where
    discovery should not be asked (or cannot answer). `thunder` carries the time constants
    (tick, decay, lease, hold timeout); the baselines use its lease and tick.
    `prepare_window`: how many programs first in the policy's restore order `/programs/{id}`
    reports as `restoring_soon` (their tool environments get prepared)."""

    backends: tuple[str, ...]
    policy: str = "thunder"
    capacities: Mapping[str, int] = field(default_factory=dict)
    thunder: ThunderConfig = field(default_factory=ThunderConfig)
    api_key: str | None = None
    retry_s: float = 1.0  # first re-probe of a down backend; doubles up to retry_max_s
    retry_max_s: float = 15.0
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 900.0
    max_body_bytes: int = DEFAULT_BODY_LIMIT
    remember_terminated: int = 10_000
    prepare_window: int = 8

    def __post_init__(self) -> None:
        backends = tuple(normalize_url(url) for url in self.backends)
        if not backends:
            raise ValueError("--backends must name at least one backend URL")
        if len(set(backends)) != len(backends):
            raise ValueError(f"--backends names a backend twice: {list(self.backends)}")
        object.__setattr__(self, "backends", backends)
        capacities = {normalize_url(url): tokens for url, tokens in self.capacities.items()}
        for url, tokens in capacities.items():
            if url not in backends:
                raise ValueError(f"--capacity names {url}, which is not in --backends")
            require_int(f"--capacity {url}=TOKENS", tokens, low=1)
        object.__setattr__(self, "capacities", capacities)
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"--policy must be one of {POLICY_NAMES}, got {self.policy!r}")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("--api-key must not be blank")
        for name in ("retry_s", "retry_max_s", "connect_timeout_s", "read_timeout_s"):
            require_number(
                name, getattr(self, name), low=0.0, low_open=True,
                fix="pass a positive number of seconds",
            )  # fmt: skip
        for name in ("max_body_bytes", "remember_terminated", "prepare_window"):
            require_int(name, getattr(self, name), low=1)

    @property
    def baseline(self) -> BaselineConfig:
        return BaselineConfig(lease_s=self.thunder.lease_s)

    @property
    def tick_s(self) -> float:
        return self.thunder.tick_s


def normalize_url(url: str) -> str:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"a backend must be an http:// or https:// URL, got {url!r}")
    url = url.strip().rstrip("/")
    return url.removesuffix("/v1")


def parse_capacity(item: str) -> tuple[str, int]:
    """One `--capacity URL=TOKENS`: the backend's normalized URL and its KV tokens (> 0)."""
    url, sep, tokens = item.strip().rpartition("=")
    if not sep or not url:
        raise ValueError(f"--capacity takes URL=TOKENS, got {item!r}")
    try:
        count = int(tokens)
    except ValueError:
        raise ValueError(f"--capacity {url}=TOKENS needs an int, got {tokens!r}") from None
    if count <= 0:
        raise ValueError(f"--capacity {url}=TOKENS needs a positive int, got {count}")
    return normalize_url(url), count

"""Plugin settings. SGLang calls a plugin's `register()` without arguments in every process it
starts, so settings travel in environment variables (set by `lookahead-sdk sglang launch`)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from lookahead_sdk.base.checks import require_flag, require_int, require_number
from lookahead_sdk.scheduling import (
    AdmissionPolicy,
    DisaggConfig,
    HybridConfig,
    HybridPolicy,
    LatencyModel,
    SlackAwarePolicy,
    VanillaConfig,
    VanillaPolicy,
    load_profile,
)

PolicyName = Literal["auto", "hybrid", "slack-aware", "vanilla", "off"]
POLICY_NAMES: tuple[str, ...] = get_args(PolicyName)

ENV_PREFIX = "LOOKAHEAD_SGLANG_"
ENV_POLICY = f"{ENV_PREFIX}POLICY"
ENV_PROFILE = f"{ENV_PREFIX}PROFILE"
ENV_TBT_MS = f"{ENV_PREFIX}TBT_MS"
ENV_TTFT_MS = f"{ENV_PREFIX}TTFT_MS"
ENV_PROMOTE_WITHIN_MS = f"{ENV_PREFIX}PROMOTE_WITHIN_MS"
ENV_MIN_LC_CHUNK = f"{ENV_PREFIX}MIN_LC_CHUNK_TOKENS"
ENV_IDLE_BE_BUDGET_MS = f"{ENV_PREFIX}IDLE_BE_BUDGET_MS"
ENV_MAX_BATCH_TOKENS = f"{ENV_PREFIX}MAX_BATCH_TOKENS"
ENV_BE_STEP_MS = f"{ENV_PREFIX}BE_STEP_MS"
ENV_BE_BESIDE_LC_PREFILL = f"{ENV_PREFIX}BE_BESIDE_LC_PREFILL"


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """`policy`: "auto" picks slack-aware on a PD-disaggregated prefill instance and hybrid
    otherwise; "vanilla" is the class-blind baseline through the same hooks; "off" only carries
    metadata and counts. `max_batch_tokens`: None takes SGLang's chunked-prefill size.
    `be_step_ms`: what best-effort chunks may add to one hybrid batch (`HybridConfig.be_step_ms`;
    None: up to the TBT bound, written 0 in the environment); `be_beside_lc_prefill`: whether
    they may share a batch with latency-critical prefill (written 1 or 0)."""

    policy: PolicyName = "auto"
    profile: str = "h100-qwen3-8b"
    tbt_bound_ms: float = 50.0
    slo_ttft_ms: float = 500.0
    promote_within_ms: float = 500.0
    min_lc_chunk_tokens: int = 256
    idle_be_budget_ms: float = 100.0
    max_batch_tokens: int | None = None
    be_step_ms: float | None = HybridConfig().be_step_ms
    be_beside_lc_prefill: bool = HybridConfig().be_beside_lc_prefill

    def __post_init__(self) -> None:
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"{ENV_POLICY} must be one of {POLICY_NAMES}, got {self.policy!r}")
        # Checked here, at registration, with the same rules as the policies' configs: a bad
        # value must not pass `register()` and then stop the scheduler at its first batch.
        for name, env_name, low_open in (
            ("tbt_bound_ms", ENV_TBT_MS, True),
            ("slo_ttft_ms", ENV_TTFT_MS, True),
            ("promote_within_ms", ENV_PROMOTE_WITHIN_MS, False),
            ("idle_be_budget_ms", ENV_IDLE_BE_BUDGET_MS, False),
            ("be_step_ms", ENV_BE_STEP_MS, True),
        ):
            require_number(
                f"{env_name} ({name})",
                getattr(self, name),
                low_open=low_open,
                optional=name == "be_step_ms",
            )
        for name, env_name in (
            ("min_lc_chunk_tokens", ENV_MIN_LC_CHUNK),
            ("max_batch_tokens", ENV_MAX_BATCH_TOKENS),
        ):
            require_int(
                f"{env_name} ({name})",
                getattr(self, name),
                low=1,
                optional=name == "max_batch_tokens",
            )
        require_flag(
            f"{ENV_BE_BESIDE_LC_PREFILL} (be_beside_lc_prefill)", self.be_beside_lc_prefill
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        env = os.environ if environ is None else environ
        defaults = cls()
        max_batch = env.get(ENV_MAX_BATCH_TOKENS)
        return cls(
            policy=env.get(ENV_POLICY, defaults.policy),  # type: ignore[arg-type]
            profile=env.get(ENV_PROFILE, defaults.profile),
            tbt_bound_ms=_env_float(env, ENV_TBT_MS, defaults.tbt_bound_ms),
            slo_ttft_ms=_env_float(env, ENV_TTFT_MS, defaults.slo_ttft_ms),
            promote_within_ms=_env_float(env, ENV_PROMOTE_WITHIN_MS, defaults.promote_within_ms),
            min_lc_chunk_tokens=_env_int(env, ENV_MIN_LC_CHUNK, defaults.min_lc_chunk_tokens),
            idle_be_budget_ms=_env_float(env, ENV_IDLE_BE_BUDGET_MS, defaults.idle_be_budget_ms),
            max_batch_tokens=None if not max_batch else _env_int(env, ENV_MAX_BATCH_TOKENS, 0),
            be_step_ms=_env_float(env, ENV_BE_STEP_MS, defaults.be_step_ms or 0.0) or None,
            be_beside_lc_prefill=_env_flag(
                env, ENV_BE_BESIDE_LC_PREFILL, defaults.be_beside_lc_prefill
            ),
        )

    def to_env(self) -> dict[str, str]:
        """The environment that makes `from_env` return these settings."""
        env = {
            ENV_POLICY: self.policy,
            ENV_PROFILE: self.profile,
            ENV_TBT_MS: repr(self.tbt_bound_ms),
            ENV_TTFT_MS: repr(self.slo_ttft_ms),
            ENV_PROMOTE_WITHIN_MS: repr(self.promote_within_ms),
            ENV_MIN_LC_CHUNK: str(self.min_lc_chunk_tokens),
            ENV_IDLE_BE_BUDGET_MS: repr(self.idle_be_budget_ms),
            ENV_BE_STEP_MS: repr(self.be_step_ms or 0.0),
            ENV_BE_BESIDE_LC_PREFILL: "1" if self.be_beside_lc_prefill else "0",
        }
        if self.max_batch_tokens is not None:
            env[ENV_MAX_BATCH_TOKENS] = str(self.max_batch_tokens)
        return env

    def build_policy(
        self, *, disaggregated_prefill: bool, engine_batch_tokens: int
    ) -> AdmissionPolicy | None:
        """The admission policy for one scheduler, or None when the policy is "off".

        `engine_batch_tokens`: the scheduler's own per-batch token budget (chunked-prefill size),
        used unless `max_batch_tokens` is set.
        """
        if self.policy == "off":
            return None
        batch_tokens = self.max_batch_tokens or engine_batch_tokens
        estimator = LatencyModel(load_profile(self.profile))
        if self.policy == "vanilla":
            return VanillaPolicy(VanillaConfig(max_batch_tokens=batch_tokens), estimator=estimator)
        if self.policy == "slack-aware" or (self.policy == "auto" and disaggregated_prefill):
            return SlackAwarePolicy(
                estimator,
                DisaggConfig(
                    slo_ttft_ms=self.slo_ttft_ms,
                    max_batch_tokens=batch_tokens,
                    idle_be_budget_ms=self.idle_be_budget_ms,
                    promote_within_ms=self.promote_within_ms,
                ),
            )
        return HybridPolicy(
            estimator,
            HybridConfig(
                tbt_bound_ms=self.tbt_bound_ms,
                max_batch_tokens=batch_tokens,
                min_lc_chunk_tokens=self.min_lc_chunk_tokens,
                promote_within_ms=self.promote_within_ms,
                be_step_ms=self.be_step_ms,
                be_beside_lc_prefill=self.be_beside_lc_prefill,
            ),
        )


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {raw!r}")
    return value


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {raw!r}")
    return value


def _env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw not in ("0", "1"):
        raise ValueError(f"{name} must be 0 or 1, got {raw!r}")
    return raw == "1"

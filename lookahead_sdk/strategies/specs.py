"""Policies as JSON-safe specs, for frameworks that persist an agent's configuration (AutoGen's
`dump_component()` / `load_component()`).

    spec = policy_spec(Offload(threshold=800) | Summarize())
    policy = policy_from_spec(spec)          # an equal pipeline

A spec names the policy's class by import path (a dataclass `ContextPolicy`: the built-in ones,
or your own) with its fields; a pipeline is the list of its stages' specs. An `OffloadStore`
field is saved as its directory.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import ContextPolicy, Pipeline
from lookahead_sdk.errors import ConfigurationError

STORE_KEY = "offload_store"


def policy_spec(policy: ContextPolicy) -> dict[str, Any]:
    if isinstance(policy, Pipeline):
        return {"pipeline": [policy_spec(stage) for stage in policy.stages]}
    if not dataclasses.is_dataclass(policy) or not isinstance(policy, ContextPolicy):
        raise ConfigurationError(
            f"{type(policy).__name__} cannot be saved as a spec: only dataclass ContextPolicy "
            "classes (Summarize, Offload, KeepRecent, yours) and pipelines of them can"
        )
    cls = type(policy)
    return {
        "provider": f"{cls.__module__}.{cls.__qualname__}",
        "config": {
            field.name: _encode(getattr(policy, field.name), f"{cls.__name__}.{field.name}")
            for field in dataclasses.fields(policy)
            if field.init
        },
    }


def policy_from_spec(spec: Any) -> ContextPolicy:
    if not isinstance(spec, dict):
        raise ConfigurationError(f"a policy spec must be a dict, got {type(spec).__name__}")
    if "pipeline" in spec:
        stages = spec["pipeline"]
        if not isinstance(stages, list) or not stages:
            raise ConfigurationError("a pipeline spec needs a non-empty list of stage specs")
        return Pipeline(*(policy_from_spec(stage) for stage in stages))
    provider, config = spec.get("provider"), spec.get("config", {})
    if not isinstance(provider, str) or "." not in provider or not isinstance(config, dict):
        raise ConfigurationError(
            f"a policy spec needs 'provider' (module.Class) and 'config' (a dict), got {spec!r}"
        )
    module, _, name = provider.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ConfigurationError(f"policy provider {provider!r} not found ({error})") from None
    if not (isinstance(cls, type) and issubclass(cls, ContextPolicy)):
        raise ConfigurationError(f"policy provider {provider!r} is not a ContextPolicy class")
    return cls(**{key: _decode(value) for key, value in config.items()})


def _encode(value: Any, where: str) -> Any:
    if isinstance(value, OffloadStore):
        return {STORE_KEY: str(value.root)}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise ConfigurationError(
        f"{where} = {type(value).__name__} cannot be saved in a policy spec (JSON values and "
        "an OffloadStore can)"
    )


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {STORE_KEY}:
        return OffloadStore(value[STORE_KEY])
    return value

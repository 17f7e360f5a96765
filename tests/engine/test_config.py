from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_sdk.engine.config import (
    ENGINE_THREADS_ENV,
    FLASH_ATTN_MODES,
    KV_PAD,
    MODEL_CONTEXT,
    EngineConfig,
    default_threads,
)
from lookahead_sdk.engine.model import QUANTIZATIONS

valid_configs = st.builds(
    EngineConfig,
    port=st.integers(1, 65535),
    slots=st.integers(1, 64),
    ctx_per_slot=st.integers(1, MODEL_CONTEXT // KV_PAD).map(lambda blocks: blocks * KV_PAD),
    threads=st.none() | st.integers(1, 64),
    quantization=st.sampled_from(QUANTIZATIONS),
    cache_ram_mib=st.integers(-1, 4096),
    flash_attn=st.sampled_from(FLASH_ATTN_MODES),
    batch_tokens=st.integers(32, 8192),
    extra_args=st.lists(st.text(min_size=1, max_size=8)).map(tuple),
)


@given(valid_configs)
def test_dict_round_trip_preserves_config(config: EngineConfig) -> None:
    assert EngineConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("field", "llama_cpp_default"), [("flash_attn", "auto"), ("batch_tokens", 2048)]
)
def test_state_written_before_a_field_means_llama_cpp_default(
    field: str, llama_cpp_default: object
) -> None:
    """An engine recorded without the field ran with llama.cpp's default: a request for our
    default config must not reuse it."""
    recorded = EngineConfig(threads=2).to_dict()
    del recorded[field]
    old = EngineConfig.from_dict(recorded)
    assert getattr(old, field) == llama_cpp_default
    assert not EngineConfig(threads=2).compatible_with(old)


@given(valid_configs)
def test_total_ctx_gives_every_slot_its_context(config: EngineConfig) -> None:
    assert config.total_ctx // config.slots == config.ctx_per_slot
    assert config.total_ctx % config.slots == 0


@given(valid_configs)
def test_compatibility_ignores_only_unset_threads(config: EngineConfig) -> None:
    resolved = config.resolved()
    assert resolved.threads is not None
    assert config.compatible_with(resolved)
    other_slots = EngineConfig.from_dict({**config.to_dict(), "slots": config.slots + 1})
    assert not config.compatible_with(other_slots)


def test_default_threads_are_every_usable_cpu_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(6)))
    monkeypatch.delenv(ENGINE_THREADS_ENV, raising=False)
    assert default_threads() == 6
    assert EngineConfig().resolved().threads == 6
    monkeypatch.setenv(ENGINE_THREADS_ENV, " 5 ")
    assert EngineConfig().resolved().threads == 5
    assert EngineConfig(threads=2).resolved().threads == 2  # a config's own value wins


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "2000"])
def test_a_bad_engine_threads_variable_names_itself_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(ENGINE_THREADS_ENV, value)
    with pytest.raises(ValueError, match=rf"\${ENGINE_THREADS_ENV} must be a whole number"):
        EngineConfig().resolved()


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("port", 0, ValueError),
        ("port", 70000, ValueError),
        ("port", "8089", TypeError),
        ("slots", 0, ValueError),
        ("slots", True, TypeError),
        ("ctx_per_slot", 100, ValueError),
        ("ctx_per_slot", 1000, ValueError),
        ("ctx_per_slot", 2 * MODEL_CONTEXT, ValueError),
        ("threads", 0, ValueError),
        ("quantization", "q5_k", ValueError),
        ("host", "", ValueError),
        ("flash_attn", "yes", ValueError),
        ("batch_tokens", 16, ValueError),
        ("batch_tokens", 256.0, TypeError),
        ("extra_args", "--temp 0", TypeError),
    ],
)
def test_bad_field_is_rejected_with_its_name(field: str, value: object, error: type) -> None:
    with pytest.raises(error, match=field):
        EngineConfig(**{field: value})


def test_extra_args_list_is_stored_as_tuple() -> None:
    config = EngineConfig(extra_args=["--temp", "0"])  # type: ignore[arg-type]
    assert config.extra_args == ("--temp", "0")

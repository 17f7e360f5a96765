"""The plugin as SGLang loads it: the `sglang.srt.plugins` entry point, `load_plugins()`, the
HookRegistry patches, the opt-in, the counters in `get_internal_state`, and the launcher."""

from __future__ import annotations

import argparse
import json
import pkgutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import sglang.srt.plugins as sglang_plugins
from sglang.srt.managers.io_struct import GetInternalStateReqOutput, msgpack_decode, msgpack_encode
from sglang.srt.plugins.hook_registry import HookRegistry

from lookahead_sdk.cli import sglang as launch_cli
from lookahead_sdk.sglang_plugin import HOOKS, PLUGIN_NAME, register
from lookahead_sdk.sglang_plugin.scheduler_hooks import STATS_KEY, after_get_internal_state


@pytest.fixture
def fresh_plugin_loader(restore_hook_targets: None) -> Iterator[None]:
    """`load_plugins()` runs once per process; let this test run it again, then put it back."""
    loaded = sglang_plugins._plugins_loaded
    sglang_plugins._plugins_loaded = False
    try:
        yield
    finally:
        sglang_plugins._plugins_loaded = loaded


def _current(target: str) -> Any:
    owner_path, attribute = target.rsplit(".", 1)
    return pkgutil.resolve_name(owner_path).__dict__[attribute]


def test_entry_point_is_declared_for_sglang() -> None:
    points = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert points[PLUGIN_NAME] == "lookahead_sdk.sglang_plugin:register"


def test_load_plugins_applies_every_hook(
    fresh_plugin_loader: None, monkeypatch: pytest.MonkeyPatch, plugin_settings: Callable[..., Any]
) -> None:
    monkeypatch.setenv("SGLANG_PLUGINS", PLUGIN_NAME)
    originals = {target: _current(target) for target, _, _ in HOOKS}

    sglang_plugins.load_plugins()

    for target, _, _ in HOOKS:
        patched = _current(target)
        assert patched is not originals[target], target
        assert patched.__wrapped__ is originals[target], target


def test_plugin_is_opt_in(fresh_plugin_loader: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOKAHEAD_SGLANG_POLICY", raising=False)
    monkeypatch.setenv("SGLANG_PLUGINS", "some_other_plugin")
    register()
    assert not any(HookRegistry._hooks.get(target) for target, _, _ in HOOKS)


def test_bad_settings_fail_at_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    from lookahead_sdk.sglang_plugin.state import reset_plugin_state

    monkeypatch.setenv("SGLANG_PLUGINS", PLUGIN_NAME)
    monkeypatch.setenv("LOOKAHEAD_SGLANG_PROFILE", "/nonexistent/profile.json")
    reset_plugin_state()
    try:
        with pytest.raises(FileNotFoundError, match="latency profile"):
            register()
    finally:
        monkeypatch.delenv("LOOKAHEAD_SGLANG_PROFILE")
        reset_plugin_state()


def test_counters_travel_in_the_internal_state_reply(plugin_settings: Callable[..., Any]) -> None:
    state = plugin_settings(policy="hybrid")
    state.stats.deferred["be:over_bound"] += 2
    state.promote("g")
    reply = GetInternalStateReqOutput(internal_state={"max_total_num_tokens": 1})

    received = msgpack_decode(msgpack_encode(after_get_internal_state(reply, object(), None)))

    stats = received.internal_state[STATS_KEY]
    assert stats["policy"] == "hybrid"
    assert stats["deferred"] == {"be:over_bound": 2}
    assert stats["promoted_groups"] == 1
    assert received.internal_state["max_total_num_tokens"] == 1


def _launch_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    launch_cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["sglang", "launch", *argv])


def test_launch_plan_enables_the_plugin_and_keeps_user_flags(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLANG_PLUGINS", "vendor_plugin")
    args = _launch_args(
        "--dry-run", "--policy", "hybrid", "--tbt-bound-ms", "40", "--",
        "--model-path", "Qwen/Qwen3-8B", "--default-priority-value=5",
    )  # fmt: skip
    assert launch_cli.run_launch(args) == 0
    plan = json.loads(capsys.readouterr().out)
    command = plan["command"]
    assert command[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert command.count("--enable-priority-scheduling") == 1
    assert "--default-priority-value=5" in command and "--default-priority-value" not in command
    assert "--enable-mixed-chunk" in command
    assert plan["env"]["SGLANG_PLUGINS"] == "vendor_plugin,lookahead"
    assert plan["env"]["LOOKAHEAD_SGLANG_TBT_MS"] == "40.0"


def test_launch_plan_for_a_disaggregated_prefill_instance() -> None:
    from lookahead_sdk.sglang_plugin.settings import PluginSettings

    plan = launch_cli.plan_launch(
        "python", PluginSettings(), ["--disaggregation-mode", "prefill"], environ={}
    )
    assert "--enable-mixed-chunk" not in plan.command


def test_launch_checks_pass_for_this_environment() -> None:
    launch_cli.check_environment(sys.executable)  # sglang 0.5.23 and the entry point are here


def test_launch_without_sglang_says_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = tmp_path / "no-sglang"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    args = _launch_args("--python", str(venv / "bin" / "python"), "--", "--model-path", "m")

    assert launch_cli.run_launch(args) == 2
    message = capsys.readouterr().err
    assert "sglang is not installed" in message and "pip install 'sglang==0.5.23'" in message

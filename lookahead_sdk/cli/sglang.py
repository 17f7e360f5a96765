"""`lookahead-sdk sglang launch [options] -- [sglang args]`: start SGLang with the plugin enabled.

Runs `PYTHON -m sglang.launch_server ARGS` with SGLANG_PLUGINS listing the plugin and the
LOOKAHEAD_SGLANG_* settings in the environment. PYTHON (default: this interpreter) must have
sglang==0.5.23 and lookahead-sdk installed; both are checked before anything starts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lookahead_sdk.base.args import (
    add_be_batching,
    add_renamed,
    be_batching,
    non_negative_float,
    positive_float,
    positive_int,
)
from lookahead_sdk.scheduling import BUILTIN_PROFILES, HybridConfig, load_profile
from lookahead_sdk.scheduling.profiles import latency_profile
from lookahead_sdk.sglang_plugin.plugin import PLUGIN_NAME
from lookahead_sdk.sglang_plugin.settings import POLICY_NAMES, PluginSettings

SGLANG_VERSION = "0.5.23"

# Added unless the sglang arguments already set them. The SDK sends numeric priorities where a
# lower value is more urgent (lc=0, be=10) and leaves untagged requests at 0 (latency-critical).
PRIORITY_FLAGS: tuple[tuple[str, ...], ...] = (
    ("--enable-priority-scheduling",),
    ("--schedule-low-priority-values-first",),
    ("--default-priority-value", "0"),
)
# Co-located hybrid batches (decode + prefill chunks in one forward pass) are SGLang's mixed chunks.
MIXED_CHUNK_FLAG = ("--enable-mixed-chunk",)

_PROBE = """
import importlib.util, json
from importlib.metadata import entry_points, version
found = importlib.util.find_spec("sglang") is not None
print(json.dumps({
    "sglang": version("sglang") if found else None,
    "plugins": sorted(ep.name for ep in entry_points(group="sglang.srt.plugins")),
}))
"""


class LaunchError(RuntimeError):
    """The environment cannot run SGLang with the plugin; the message says how to fix it."""


@dataclass(frozen=True)
class LaunchPlan:
    command: tuple[str, ...]
    env_updates: dict[str, str]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sglang", help="run SGLang with the bundled lookahead plugin")
    actions = parser.add_subparsers(dest="sglang_command", metavar="ACTION", required=True)
    launch = actions.add_parser(
        "launch",
        help="start python -m sglang.launch_server with the plugin enabled",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    launch.add_argument(
        "--python", default=sys.executable, help="interpreter with sglang installed"
    )
    launch.add_argument("--policy", choices=POLICY_NAMES, default="auto", help="admission policy")
    launch.add_argument(
        "--profile",
        type=latency_profile,
        default="h100-qwen3-8b",
        help=f"latency profile JSON or built-in name {sorted(BUILTIN_PROFILES)}",
    )
    add_renamed(
        launch,
        "--tbt-bound-ms",
        "--tbt-ms",
        type=positive_float,
        default=50.0,
        help="TBT bound of hybrid batches",
    )
    add_renamed(
        launch,
        "--slo-ttft-ms",
        "--ttft-ms",
        type=positive_float,
        default=500.0,
        help="LC TTFT SLO (PD prefill)",
    )
    launch.add_argument(
        "--promote-within-ms",
        type=non_negative_float,
        default=500.0,
        help="schedule a lookahead as LC once its commit deadline is this close",
    )
    add_be_batching(launch, HybridConfig())
    launch.add_argument(
        "--max-batch-tokens", type=positive_int, help="default: SGLang's chunked prefill size"
    )
    launch.add_argument(
        "--no-default-flags",
        action="store_true",
        help="pass the sglang arguments unchanged (no priority-scheduling / mixed-chunk defaults)",
    )
    launch.add_argument("--dry-run", action="store_true", help="print the command, start nothing")
    launch.add_argument("sglang_args", nargs=argparse.REMAINDER, help="-- then sglang arguments")
    launch.set_defaults(func=run_launch)


def run_launch(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        plan = plan_launch(
            args.python, settings, _strip_separator(args.sglang_args), args.no_default_flags
        )
        if not args.dry_run:
            check_environment(args.python)
    except (LaunchError, ValueError, FileNotFoundError) as error:
        print(f"lookahead-sdk sglang launch: {error}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(json.dumps({"command": list(plan.command), "env": plan.env_updates}, indent=2))
        return 0
    return subprocess.call(list(plan.command), env={**os.environ, **plan.env_updates})


def settings_from_args(args: argparse.Namespace) -> PluginSettings:
    profile = args.profile
    if profile not in BUILTIN_PROFILES:
        profile = str(Path(profile).resolve())  # the server may run from another directory
    settings = PluginSettings(
        policy=args.policy,
        profile=profile,
        tbt_bound_ms=args.tbt_bound_ms,
        slo_ttft_ms=args.slo_ttft_ms,
        promote_within_ms=args.promote_within_ms,
        max_batch_tokens=args.max_batch_tokens,
        **be_batching(args),
    )
    PluginSettings.from_env(settings.to_env())  # the same validation the server will apply
    load_profile(settings.profile)
    return settings


def plan_launch(
    python: str,
    settings: PluginSettings,
    sglang_args: Sequence[str],
    no_default_flags: bool = False,
    environ: Mapping[str, str] | None = None,
) -> LaunchPlan:
    args = list(sglang_args)
    if not no_default_flags:
        defaults = list(PRIORITY_FLAGS)
        if not _has_flag(args, "--disaggregation-mode"):
            defaults.append(MIXED_CHUNK_FLAG)
        for flag in defaults:
            if not _has_flag(args, flag[0]):
                args.extend(flag)
    env = os.environ if environ is None else environ
    listed = [name.strip() for name in env.get("SGLANG_PLUGINS", "").split(",") if name.strip()]
    if PLUGIN_NAME not in listed:
        listed.append(PLUGIN_NAME)
    return LaunchPlan(
        command=(python, "-m", "sglang.launch_server", *args),
        env_updates={"SGLANG_PLUGINS": ",".join(listed), **settings.to_env()},
    )


def check_environment(python: str) -> None:
    """Fail with instructions unless `python` has sglang and sees the plugin's entry point."""
    try:
        probe = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as error:
        raise LaunchError(f"cannot run {python!r}: {error}") from error
    if probe.returncode != 0:
        raise LaunchError(f"{python} failed to start: {probe.stderr.strip()[-500:]}")
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    if found["sglang"] is None:
        raise LaunchError(
            f"sglang is not installed for {python}. On a GPU machine: "
            f"pip install 'sglang=={SGLANG_VERSION}' and pip install --no-deps lookahead-sdk "
            "(sglang pins openai 2.8.0, so keep it in its own environment), then pass that "
            "environment's python with --python."
        )
    if found["sglang"] != SGLANG_VERSION:
        print(
            f"warning: the plugin targets sglang=={SGLANG_VERSION}, {python} has "
            f"{found['sglang']}; its hook points may differ",
            file=sys.stderr,
        )
    if PLUGIN_NAME not in found["plugins"]:
        raise LaunchError(
            f"lookahead-sdk is not installed for {python} (no '{PLUGIN_NAME}' entry point in "
            "group sglang.srt.plugins): pip install --no-deps lookahead-sdk there."
        )


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(f"{flag}=") for arg in args)


def _strip_separator(args: Sequence[str]) -> list[str]:
    return list(args[1:]) if args and args[0] == "--" else list(args)

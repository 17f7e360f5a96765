"""`register()`: SGLang's `sglang.srt.plugins` entry point. It declares every hook with SGLang's
`HookRegistry`; `load_plugins()` applies them right after, in each SGLang process."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Literal

from lookahead_sdk.scheduling import load_profile
from lookahead_sdk.sglang_plugin import ingress, scheduler_hooks
from lookahead_sdk.sglang_plugin.settings import ENV_POLICY
from lookahead_sdk.sglang_plugin.state import plugin_state

log = logging.getLogger(__name__)

PLUGIN_NAME = "lookahead"  # the entry point's name: what SGLANG_PLUGINS must list

HookKind = Literal["BEFORE", "AFTER", "AROUND"]

# (dotted target in sglang 0.5.23, HookType name, hook)
HOOKS: tuple[tuple[str, HookKind, Callable[..., Any]], ...] = (
    (
        "sglang.srt.managers.tokenizer_manager.TokenizerManager.generate_request",
        "AROUND",
        ingress.tagged_generate_request,
    ),
    (
        "sglang.srt.managers.scheduler.Scheduler._add_request_to_queue",
        "BEFORE",
        scheduler_hooks.before_add_request_to_queue,
    ),
    (
        "sglang.srt.managers.scheduler.Scheduler._get_new_batch_prefill_raw",
        "AROUND",
        scheduler_hooks.around_get_new_batch_prefill_raw,
    ),
    (
        "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority",
        "AFTER",
        scheduler_hooks.after_calc_priority,
    ),
    (
        "sglang.srt.managers.scheduler.Scheduler.get_prefill_adder_class",
        "AROUND",
        scheduler_hooks.around_get_prefill_adder_class,
    ),
    (
        "sglang.srt.managers.scheduler_components.internal_state."
        "SchedulerInternalStateController.get_internal_state",
        "AFTER",
        scheduler_hooks.after_get_internal_state,
    ),
)


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Opt-in: SGLang runs every installed plugin when SGLANG_PLUGINS is unset, and installing
    the SDK next to SGLang must not change how that server schedules."""
    env = os.environ if environ is None else environ
    listed = {name.strip() for name in env.get("SGLANG_PLUGINS", "").split(",")}
    return PLUGIN_NAME in listed or bool(env.get(ENV_POLICY))


def register() -> None:
    """Declare the hooks (when enabled). Settings come from LOOKAHEAD_SGLANG_* variables; a bad
    setting or profile fails here, at server start, not on the first request."""
    if not enabled():
        log.info("lookahead plugin installed but not enabled (set SGLANG_PLUGINS=%s)", PLUGIN_NAME)
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    settings = plugin_state().settings
    load_profile(settings.profile)
    for target, kind, hook in HOOKS:
        HookRegistry.register(target, hook, HookType[kind])
    log.info(
        "lookahead plugin registered (policy=%s, profile=%s)", settings.policy, settings.profile
    )

"""The bundled SGLang plugin (sglang==0.5.23): lookahead request tags carried to the scheduler,
lookahead-aware prefill admission, group promotion and counters. See docs/sglang.md.

Importable without sglang: sglang modules are imported only inside the hooks, which run in an
SGLang process. Enabled by the `sglang.srt.plugins` entry point `lookahead`
(`SGLANG_PLUGINS=lookahead`), which `lookahead-sdk sglang launch` sets.
"""

from lookahead_sdk.sglang_plugin.plugin import HOOKS, PLUGIN_NAME, register

__all__ = ["HOOKS", "PLUGIN_NAME", "register"]

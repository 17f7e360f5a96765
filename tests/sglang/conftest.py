"""CPU bootstrap for tests against the real sglang==0.5.23 classes (run them in the environment
built by scripts/setup_sglang_env.sh: `.venv-sglang/bin/python -m pytest tests/sglang`).

Stubbed, as SGLang's own CPU tests do, only what needs a GPU build: `torchvision` (its PyPI wheel
is a CUDA build) becomes a catch-all module made with the wheel's own `_MockModule`; triton is the
real `triton==3.6.0` package (imported at top level by SGLang, never run here).
"""

from __future__ import annotations

import importlib.util
import pkgutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    collect_ignore_glob = ["test_*.py"]  # the main environment: these need .venv-sglang


def _install_torchvision_stub() -> None:
    # transformers decides once (lru_cache) whether torchvision exists; ask before the stub is
    # in place so transformers never tries to use it.
    import transformers.utils.import_utils as transformers_imports

    transformers_imports.is_torchvision_available()
    transformers_imports.is_torchvision_v2_available()
    from sglang._platform_stubs import _MockModule

    class TorchvisionStubFinder:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
            if fullname != "torchvision" and not fullname.startswith("torchvision."):
                return None
            module = _MockModule(fullname)
            sys.modules[fullname] = module
            parent, _, child = fullname.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], child, module)
            return module.__spec__

    sys.meta_path.insert(0, TorchvisionStubFinder())


if importlib.util.find_spec("sglang") is not None and "torchvision" not in sys.modules:
    _install_torchvision_stub()


@pytest.fixture(autouse=True)
def scheduler_config() -> None:
    """SGLang reads its published config namespace when a `Req` or `PrefillAdder` is built."""
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", pp_max_micro_batch_size=64))


def _snapshot(targets: list[str]) -> list[tuple[type, str, Any]]:
    saved = []
    for target in targets:
        owner_path, attribute = target.rsplit(".", 1)
        owner = pkgutil.resolve_name(owner_path)
        saved.append((owner, attribute, owner.__dict__[attribute]))
    return saved


def _restore(saved: list[tuple[type, str, Any]]) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry

    for owner, attribute, original in saved:
        setattr(owner, attribute, original)
    HookRegistry.reset()


@pytest.fixture
def restore_hook_targets() -> Iterator[None]:
    """Patches made by HookRegistry are process-global and `reset()` does not undo them: put the
    original functions back after the test."""
    from lookahead_sdk.sglang_plugin import HOOKS

    saved = _snapshot([target for target, _, _ in HOOKS])
    try:
        yield
    finally:
        _restore(saved)


@pytest.fixture
def plugin_hooks(restore_hook_targets: None) -> Iterator[None]:
    """The plugin's hooks declared through `register()` and applied by SGLang's HookRegistry."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    from lookahead_sdk.sglang_plugin import register

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGLANG_PLUGINS", "lookahead")
        register()
    HookRegistry.apply_hooks()
    yield


@pytest.fixture
def plugin_settings() -> Iterator[Callable[..., Any]]:
    """`configure(**fields)`: fresh plugin state with these PluginSettings."""
    from lookahead_sdk.sglang_plugin.settings import PluginSettings
    from lookahead_sdk.sglang_plugin.state import reset_plugin_state

    def configure(**fields: Any) -> Any:
        return reset_plugin_state(PluginSettings(**fields))

    yield configure
    reset_plugin_state(PluginSettings())

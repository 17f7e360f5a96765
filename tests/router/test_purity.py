"""The policy core is pure: importing it pulls in no web framework, HTTP client, event loop or
threads (the HTTP proxy and the simulator drive the same objects)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import lookahead_sdk
from tests.test_layers import is_policy

PACKAGE = Path(lookahead_sdk.__file__).parent
FORBIDDEN = ("fastapi", "starlette", "httpx", "asyncio", "threading", "uvicorn")
CORE_MODULES = (
    "lookahead_sdk.router",
    "lookahead_sdk.router.thunder",
    "lookahead_sdk.router.baselines",
    "lookahead_sdk.router.fleet_sim",
)


def test_importing_the_core_loads_no_io_or_concurrency_module() -> None:
    # The parent package is stubbed so that only the router's own imports count.
    script = f"""
import json, sys, types
parent = types.ModuleType("lookahead_sdk")
parent.__path__ = [{str(PACKAGE)!r}]
sys.modules["lookahead_sdk"] = parent
for name in {list(CORE_MODULES)!r}:
    __import__(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {list(FORBIDDEN)!r})))
"""
    output = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(output) == []


def test_no_router_source_file_imports_a_forbidden_module() -> None:
    """The HTTP side beside the core (files named as in `tests/test_layers.py`: proxy, http_app,
    discovery...) may use the network; every other router file may not."""
    offenders = []
    for path in sorted((PACKAGE / "router").rglob("*.py")):
        if not is_policy(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []

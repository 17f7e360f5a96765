"""The layout's rules, checked on the source: imports run only down the layers, nothing imports
in a cycle, and engine-independent policy code imports no engine, web framework or asyncio.

Layers (docs/architecture.md): base <- core <- strategies <- client <- adapters / agent <- bench
<- cli; `errors` is below everything. The servers beside them (engine, scheduling,
sglang_plugin, sim, router) use only the pieces listed in SERVER_USES.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lookahead_sdk"

LAYER = {
    "_version": 0,
    "errors": 0,
    "base": 1,
    "core": 2,
    "strategies": 3,
    "client": 4,
    "adapters": 5,
    "agent": 5,
    "bench": 6,
    "cli": 7,
}
SERVERS = {"engine", "scheduling", "sglang_plugin", "sim", "router"}
# What each server may import from the rest of the package (besides itself and errors).
SERVER_USES = {
    "engine": set(),
    "scheduling": {"base"},
    "sglang_plugin": {"base", "scheduling"},
    "sim": {"base", "scheduling"},
    "router": {"base", "scheduling", "sim"},
}
# Layered code that may use a server: the client starts the embedded engine; benches and the
# command line drive every server.
LAYER_USES_SERVERS = {
    "client": {"engine"},
    "agent": {"engine"},
    "bench": SERVERS,
    "cli": SERVERS,
}
# Policy code that runs inside SGLang, the simulator, the router and unit tests alike.
PURE_POLICY = ("scheduling/admission.py", "scheduling/deadlines.py", "scheduling/requests.py")
PURE_POLICY_DIRS = ("router",)
# The router's proxy and HTTP side live beside its policy core: those files may use the network.
ROUTER_IO_FILES = {"proxy", "server", "app", "http", "discovery", "cli", "tools", "environments"}
IMPURE = {
    "asyncio",
    "fastapi",
    "starlette",
    "httpx",
    "aiohttp",
    "uvicorn",
    "sglang",
    "torch",
    "threading",
}


def is_policy(path: Path) -> bool:
    return not any(word in path.stem for word in ROUTER_IO_FILES)


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(path: Path, *, top_level_only: bool) -> set[str]:
    """Modules `path` imports (absolute names), all of them or only those at module level."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in _runtime_nodes(tree.body, descend=not top_level_only):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _runtime_nodes(body: list[ast.stmt], *, descend: bool) -> list[ast.AST]:
    """Statements that run: `if TYPE_CHECKING:` blocks import nothing at run time."""
    nodes: list[ast.AST] = []
    for statement in body:
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
            continue
        nodes.append(statement)
        if descend:
            for child in ast.iter_child_nodes(statement):
                if isinstance(child, ast.stmt):
                    nodes.extend(_runtime_nodes([child], descend=True))
                else:
                    nodes.extend(ast.walk(child))
    return nodes


def area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imports_run_only_down_the_layers() -> None:
    wrong = []
    known = modules()
    for module, path in known.items():
        mine = area(module)
        for target in imports_of(path, top_level_only=False):
            if not target.startswith("lookahead_sdk") or target not in known:
                continue
            theirs = area(target)
            if mine in ("", "__main__") or theirs in (mine, "errors", "_version"):
                continue  # the package root re-exports everything; errors are below all
            if theirs in ("", "__main__"):
                wrong.append(f"{module} imports the package root: import the defining module")
            elif mine in SERVERS:
                if theirs not in SERVER_USES[mine]:
                    wrong.append(f"server {module} imports {target}")
            elif theirs in SERVERS:
                if theirs not in LAYER_USES_SERVERS.get(mine, set()):
                    wrong.append(f"{module} ({mine}) imports server code {target}")
            elif LAYER[theirs] > LAYER[mine]:
                wrong.append(f"{module} ({mine}) imports upward: {target} ({theirs})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles() -> None:
    """Deferred imports too: a cycle hidden in a function is still a cycle of the design."""
    known = modules()
    graph = {
        module: {
            target
            for target in imports_of(path, top_level_only=False)
            if target in known and target != module and not module.startswith(target + ".")
        }
        for module, path in known.items()
    }
    cycles = []
    state: dict[str, int] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in graph[module]:
            if state.get(target) == 1:
                cycles.append(" -> ".join([*trail[trail.index(target) :], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])
    # A package's __init__ importing its own submodules is not a cycle of the design.
    cycles = [
        c for c in cycles if not all(p.startswith(c.split(" -> ")[0]) for p in c.split(" -> "))
    ]
    assert not cycles, "\n".join(cycles)


@pytest.mark.parametrize(
    "path",
    [
        *(PACKAGE / p for p in PURE_POLICY),
        *(p for d in PURE_POLICY_DIRS for p in sorted((PACKAGE / d).glob("*.py")) if is_policy(p)),
    ],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_policy_code_imports_no_engine_web_framework_or_asyncio(path: Path) -> None:
    impure = {t for t in imports_of(path, top_level_only=False) if t.split(".")[0] in IMPURE}
    assert not impure, f"{path.name} imports {sorted(impure)}"

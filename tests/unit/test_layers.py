"""The package's layers import downwards only, with no circles, and one module talks HTTP.

The layers, lowest first, are those of docs/architecture.md. A module may import its own
package and any lower layer; the operator (`controller`) and the `client` are side by
side and do not import each other; the CLI alone may import the operator (lazily).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "agentworkers"

RANK = {
    "virtualagent": 0,
    "api": 1,
    "errors": 2,
    "core": 3,
    "kube": 4,
    "otel": 4,  # the OpenTelemetry SDK's set-up, for the operator and the runtime alike
    "controller": 5,
    "client": 5,
    "runtime": 6,
    "cli": 7,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path, *, top_level_only: bool) -> Iterator[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_each_module_imports_only_its_own_layer_and_lower() -> None:
    upward = []
    for name, path in MODULES.items():
        mine = layer(name)
        for target in imports(path, top_level_only=False):
            theirs = layer(target) if target.startswith("agentworkers.") else ""
            if theirs and theirs not in RANK:
                # A name from the root package (`from agentworkers import __version__`).
                assert f"agentworkers.{theirs}" not in MODULES, f"{theirs} has no layer"
                continue
            if not mine or not theirs or theirs == mine:
                continue
            if RANK[theirs] > RANK[mine] or (RANK[theirs] == RANK[mine] and mine != "cli"):
                upward.append(f"{name} imports {target}")
    assert not upward, "\n".join(upward)


def test_no_import_circles() -> None:
    graph = {
        name: {t for t in imports(path, top_level_only=False) if t in MODULES and t != name}
        for name, path in MODULES.items()
    }
    # Importing a module runs its packages' __init__ too.
    for name, targets in graph.items():
        for target in list(targets):
            parts = target.split(".")
            for i in range(2, len(parts)):
                package = ".".join(parts[:i])
                if package in MODULES and not name.startswith(package):
                    targets.add(package)
    circles = []
    for start in graph:
        seen: set[str] = set()
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join([*trail, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert not circles, "\n".join(sorted(set(circles))[:10])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_kube_talks_to_the_api_server(name: str) -> None:
    """The kubernetes client (and urllib3 under it) is kube.api's; kube.connection builds
    the configured client it uses."""
    if name in ("agentworkers.kube.api", "agentworkers.kube.connection"):
        return
    found = [
        t
        for t in imports(MODULES[name], top_level_only=False)
        if t.split(".")[0] in ("kubernetes", "urllib3")
    ]
    assert not found, f"{name} imports {found}"

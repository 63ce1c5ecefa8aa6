"""The layout the one store promises: no import cycles between agentflow's modules, a
runtime that imports no backend, and a durable model that does no I/O.

Read from the source with :mod:`ast`: a module's imports at import time (its top
level, outside ``if TYPE_CHECKING:``); an import inside a function runs later and
cannot make a cycle at import time, so it is not counted.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
BACKENDS = ("sqlite", "postgres", "redis", "mongodb", "file", "memory")


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from node.orelse
        elif isinstance(node, ast.If | ast.Try):
            for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                yield from block
            for handler in getattr(node, "handlers", []):
                yield from handler.body
        else:
            yield node


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The agentflow modules ``path`` imports when it is imported."""
    name = _module(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _top_level(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {target for target in targets if target in modules}
    return found - {name}


def _graph() -> dict[str, set[str]]:
    paths = {_module(path): path for path in (SRC / "agentflow").rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, modules) for name, path in paths.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in graph.items() for b in targets}


def test_no_module_of_agentflow_imports_itself_back() -> None:
    graph = _graph()
    # a package's __init__ importing its own submodules (re-exports) is not a cycle of
    # the code: leave those edges out, keep every other
    code = {
        name: {t for t in targets if not t.startswith(f"{name}.")}
        for name, targets in graph.items()
    }
    assert _cycles(code) == []


def test_the_cycle_finder_finds_what_it_looks_for() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert "agentflow.runtime.engine" in _graph()["agentflow.runtime"]  # imports are read


def test_the_runtime_imports_no_backend() -> None:
    backends = tuple(f"agentflow.checkpoint.{b}" for b in BACKENDS)
    wrong = sorted(
        (a, b)
        for a, b in _package_edges(_graph())
        if a.startswith("agentflow.runtime") and b.startswith(backends)
    )
    assert wrong == []


def test_the_durable_model_imports_no_store_and_no_driver() -> None:
    drivers = ("asyncpg", "redis", "pymongo", "sqlite3", "aiosqlite")
    wrong = []
    for path in (SRC / "agentflow" / "durable").rglob("*.py"):
        for node in _top_level(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = (
                    [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                for name in names:
                    if name.split(".")[0] in drivers or name.startswith("agentflow.checkpoint"):
                        wrong.append((_module(path), name))
    assert wrong == []

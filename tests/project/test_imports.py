"""The product's modules import each other without a cycle (imports inside functions included)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.mcp import REPO

PACKAGES = ("agent", "mcp_server")


def product_modules() -> dict[str, Path]:
    """Every module of the product by dotted name (a package by its own name)."""
    modules = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The product modules that `name` imports anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parents, *([node.module] if node.module else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}"
                elif base in modules:
                    yield base


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_product_has_no_import_cycle() -> None:
    """No module imports, even inside a function, a module that imports it back (directly or not)."""
    modules = product_modules()
    graph = {name: set(imported(name, path, modules)) - {name} for name, path in modules.items()}
    assert len(graph) > 50  # the walk found the product
    assert cycles(graph) == []


def test_a_cycle_is_found() -> None:
    """The check itself sees a cycle of three."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]

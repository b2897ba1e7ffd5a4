"""The agent's public surface: the names `agent` exports, where each lives, and who may use what.

`agent/__init__.py` says where each public name lives twice: in `_PUBLIC`, which its `__getattr__`
reads when a name is first asked for, and in imports under TYPE_CHECKING, which type checkers and
the static import graph read. These tests hold the two lists equal, every name to the object its
module holds, the package free of imports, and the server to the surface.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import agent
from tests.project.test_imports import imported, product_modules
from tests.project.test_startup import imported as imported_modules
from tests.support.mcp import REPO

# The modules of the agent that other packages may import: the surface, and two modules each
# public for one reader (agent/__init__.py says which and why).
PUBLIC_MODULES = frozenset({"agent", "agent.telemetry.names", "agent.commands.cli"})


def surface_imports() -> dict[str, set[str]]:
    """The names agent/__init__.py imports under TYPE_CHECKING, by module (relative, `.errors`)."""
    tree = ast.parse((REPO / "agent" / "__init__.py").read_text(encoding="utf-8"))
    block = next(
        node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    found: dict[str, set[str]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        assert all(alias.asname is None for alias in node.names), ast.unparse(node)  # one name per thing
        found.setdefault(f".{node.module}", set()).update(alias.name for alias in node.names)
    return found


def test_the_surface_lists_each_name_once_and_its_imports_agree() -> None:
    """`_PUBLIC` and the TYPE_CHECKING imports name the same names of the same modules, each name once."""
    listed = {module: names.split() for module, names in agent._PUBLIC.items()}
    every = [name for names in listed.values() for name in names]
    assert sorted(every) == sorted(set(every))
    assert {module: set(names) for module, names in listed.items()} == surface_imports()


def test_each_public_name_is_the_object_its_module_holds() -> None:
    """`from agent import X` gives the very object of X's module (imported on first use)."""
    wrong = [
        name
        for name, module in agent._HOMES.items()
        if getattr(agent, name) is not getattr(importlib.import_module(module, "agent"), name)
    ]
    assert wrong == []
    with pytest.raises(AttributeError, match="no attribute 'run_episodes'"):
        agent.run_episodes  # noqa: B018 - the attribute access is the test


def test_no_public_name_is_a_module_of_the_package() -> None:
    """No public name is also a module or package right below `agent`: importing that module would
    set the package's attribute of the same name to it, and `from agent import X` would give either."""
    modules = {info.name for info in pkgutil.iter_modules(agent.__path__)}
    assert len(modules) > 20  # the walk sees the package
    assert modules & set(agent._HOMES) == set()


def test_importing_the_package_imports_nothing_else() -> None:
    """`import agent` loads no other module, ours or the standard library's: every process of the
    product imports it (the SQLite workers and `--version` too)."""
    script = (
        "import sys; before = set(sys.modules); import agent; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["agent"]


def test_a_names_module_is_imported_as_an_import_statement_imports_it() -> None:
    """The first use of a name imports its module through the import statement's machinery, which
    `python -X importtime` reports (importlib.import_module would hide it from the start-up tests)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from agent import SqaleError"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert imported_modules(done.stderr)[-2:] == ["agent", "agent.errors"]


def _agent_imports(paths: list[Path]) -> list[tuple[str, str, str]]:
    """(file, module, name) for every import of the agent in `paths`, inside functions too."""
    found = []
    for path in paths:
        where = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [(where, alias.name, "") for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                found += [(where, node.module or "", alias.name) for alias in node.names]
    modules = product_modules()  # `from agent.telemetry import names` imports a module
    found = [
        (where, f"{module}.{name}", "") if f"{module}.{name}" in modules else (where, module, name)
        for where, module, name in found
    ]
    return [use for use in found if use[1].split(".")[0] == "agent"]


def test_the_server_uses_the_agent_through_its_public_surface() -> None:
    """mcp_server imports from the agent only the surface's names (`from agent import X`) and the two
    other public modules, and the surface holds no name the server does not use."""
    server = sorted((REPO / "mcp_server").rglob("*.py"))
    uses = _agent_imports(server)
    assert len(uses) > 50  # the walk sees the server's imports
    outside = [
        use
        for use in uses
        if use[1] not in PUBLIC_MODULES or (use[1] == "agent" and use[2] not in agent._HOMES)
    ]
    assert outside == []
    used = {name for _, module, name in uses if module == "agent"}
    assert sorted(set(agent._HOMES) - used) == []


def test_no_module_imports_another_packages_private_module() -> None:
    """A module named `_x.py` is its package's own: nothing outside the package imports it (the
    settings read a backend's facts from `_replicas` before its HTTP client is imported, as
    docs/contributing.md says)."""
    allowed = {("agent.agent_settings", "agent.backends._replicas")}
    modules = product_modules()
    inside, outside = set(), set()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in imported(name, path, modules):
            private = next((i for i, part in enumerate(target.split(".")) if part.startswith("_")), None)
            owner = ".".join(target.split(".")[:private])
            if private is not None:
                own = package == owner or package.startswith(f"{owner}.")
                (inside if own else outside).add((name, target))
    assert len(inside) > 20  # the walk sees the packages' own private modules
    assert sorted(outside - allowed) == []

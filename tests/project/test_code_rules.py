"""House rules the code keeps, checked on its source: loggers named by module, the SDK's public API only."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("agent/**/*.py"), *ROOT.glob("mcp_server/**/*.py")])


def test_loggers_are_named_by_their_module() -> None:
    """No logger is named by a string literal: `getLogger(__name__)`, so levels and JSON logs follow modules."""
    literal = re.compile(r"getLogger\(\s*[\"']")
    assert [str(p.relative_to(ROOT)) for p in SOURCES if literal.search(p.read_text(encoding="utf-8"))] == []


def test_the_mcp_sdk_is_used_through_its_public_api() -> None:
    """No private attribute of the MCP SDK's server (`_tool_manager`, `_lowlevel_server`...) is touched,
    but for the low-level server in its shim (mcp_server/serving/stdio_shim.py, tested by
    tests/server/serving/test_stdio_shim.py)."""
    private = re.compile(r"\._(tool_manager|resource_manager|prompt_manager|lowlevel_server|subscriptions)\b")
    shim = re.compile(r"\._(tool_manager|resource_manager|prompt_manager|subscriptions)\b")
    found = [
        name
        for p in SOURCES
        if (shim if (name := str(p.relative_to(ROOT))) == STDIO_SHIM else private).search(
            p.read_text(encoding="utf-8")
        )
    ]
    assert found == []


STDIO_SHIM = "mcp_server/serving/stdio_shim.py"


# What may be used only inside one shim module each, with its test (tests/*/test_*_shim.py):
# the private attributes of argparse and uvicorn's internals.
SHIMS = {
    "agent/commands/argparse_shim.py": re.compile(
        r"\b(argparse\._[A-Za-z]\w*|\._actions\b|\._action_groups\b|"
        r"\._group_actions\b)"
    ),
    "mcp_server/serving/uvicorn_shim.py": re.compile(
        r"from uvicorn\.|import uvicorn\.|\(uvicorn\.\w+\)|"
        r"H11Protocol|\bhandle_exit\b|\bshould_exit\b"
    ),
}


def test_private_apis_are_used_only_in_their_shim() -> None:
    """No module but its shim reads argparse's privates or subclasses uvicorn's classes."""
    found = [
        f"{p.relative_to(ROOT)}: {m.group()}"
        for shim, pattern in SHIMS.items()
        for p in SOURCES
        if str(p.relative_to(ROOT)) != shim
        for m in pattern.finditer(p.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_sdk_is_used_through_its_public_modules() -> None:
    """No import of a private module of the MCP SDK (`mcp.server._x`, `mcp_types._x`), and no
    private attribute of an SDK object (`server._lowlevel_server`, `ctx._request`) but the stdio
    shim's one (its test names what changed when the SDK does)."""
    private_module = re.compile(r"^\s*(from|import)\s+(mcp|mcp_types)(\.\w+)*\._", re.MULTILINE)
    private_attribute = re.compile(r"\b(?!self\b|cls\b)[a-z]\w*\._(?!_|exit\b)[a-z]\w*")
    sdk_users = [
        p
        for p in SOURCES
        if re.search(r"^\s*(from|import)\s+(mcp|mcp_types)\b", p.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert len(sdk_users) >= 5  # the scan sees the modules that use the SDK
    found = [
        f"{p.relative_to(ROOT)}: {m.group()}"
        for p in sdk_users
        for pattern in (private_module, private_attribute)
        for m in pattern.finditer(p.read_text(encoding="utf-8"))
    ]
    assert found == [f"{STDIO_SHIM}: server._lowlevel_server"]


def test_json_lines_go_through_the_one_codec() -> None:
    """No module but agent/jsonl.py writes a JSON line by hand (`json.dumps(...) + "\\n"`) or splits a
    file's text with `splitlines()` after json: a line ends at "\\n" only, and one codec says so."""
    # (a pretty-printed JSON file, `indent=`, is one document, not JSON Lines)
    by_hand = re.compile(r"json\.dumps\((?![^\n]*indent=)[^\n]*\)\s*\+\s*[\"']\\n[\"']")
    split = re.compile(r"splitlines\(\)[^\n]*\n(?:[^\n]*\n){0,6}?[^\n]*(json\.loads|model_validate_json)")
    found = [
        str(p.relative_to(ROOT))
        for p in SOURCES
        if p.name != "jsonl.py"
        and (by_hand.search(text := p.read_text(encoding="utf-8")) or split.search(text))
    ]
    assert found == []


def _imported_distributions() -> dict[str, set[str]]:
    """Distribution -> how the product imports it: "module" (at import time) or "deferred"
    (inside a function or `if TYPE_CHECKING:`, so an extra may provide it)."""
    owners = importlib.metadata.packages_distributions()
    found: dict[str, set[str]] = {}

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = (
                deferred
                or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            )
            names = (
                [a.name for a in child.names]
                if isinstance(child, ast.Import)
                else [child.module]
                if isinstance(child, ast.ImportFrom) and child.level == 0 and child.module
                else []
            )
            if isinstance(child, ast.ImportFrom) and names and len(owners.get(names[0].split(".")[0], ())) > 1:
                names = [f"{child.module}.{a.name}" for a in child.names]  # `from namespace import module`
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("agent", "mcp_server"):
                    continue
                assert top in owners, f"{top} is imported but no installed distribution provides it"
                for distribution in _providers(name, owners[top]):
                    found.setdefault(canonicalize_name(distribution), set()).add(
                        "deferred" if inner else "module"
                    )
            visit(child, inner)

    for path in SOURCES:
        visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def _providers(module: str, candidates: list[str]) -> list[str]:
    """The distributions that provide `module`: of a namespace package shared by several
    (`opentelemetry`: the API, the SDK, exporters...), only those holding the module's own files."""
    parts = module.split(".")
    while len(candidates) > 1 and len(parts) > 1:  # `a.b.Name`: the files of `a/b`, else of `a`
        path = "/".join(parts)
        holding = [
            d for d in candidates if any(f == f"{path}.py" or f.startswith(f"{path}/") for f in _files(d))
        ]
        if holding:
            return holding
        parts.pop()
    return candidates


@functools.cache
def _files(distribution: str) -> tuple[str, ...]:
    return tuple(str(f) for f in importlib.metadata.files(distribution) or ())


def test_every_imported_distribution_is_declared_with_bounds() -> None:
    """What agent/ and mcp_server/ import is a dependency in pyproject.toml with a lower and an upper
    bound; a distribution imported only where it is used (a function, type checking) may be an extra's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    required = {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}
    extras = {
        canonicalize_name(r.name): r
        for name, listed in project["optional-dependencies"].items()
        if name != "dev"
        for r in map(Requirement, listed)
    }
    imported = _imported_distributions()
    assert {"mcp", "pydantic", "httpx", "uvicorn", "starlette"} <= set(imported)  # the walk sees imports
    undeclared = sorted(
        d for d, how in imported.items() if d not in required and ("module" in how or d not in extras)
    )
    assert undeclared == [], "imported but not declared in [project] dependencies"
    unbounded = sorted(
        str(r)
        for r in {**extras, **required}.values()
        if not (
            {s.operator for s in r.specifier} & {">=", "==", "~="}
            and {s.operator for s in r.specifier} & {"<", "==", "~="}
        )
    )
    assert unbounded == [], "a dependency needs a lower and an upper bound"


# Where product code may make a Database with no hide rules (`Database.unruled`), and why: the
# operator's own tools on files the configuration gives no rules for. Nowhere else.
OPERATOR_MODULES = {
    "agent/commands/golden.py": "golden add checks the operator's own SQL on their own file",
    "agent/evaluation/runner.py": "eval serves a benchmark's files, which have no hide rules",
}
# What would run SQL past a Database's rules: the worker's requests, SQLite itself, the private
# modules of agent/sqlite.
_BYPASSES = {"sqlite3", "QueryRequest", "SchemaRequest", "WorkerPool.run"}


def _unruled_sites(path: Path) -> list[str]:
    """Each place in `path` that makes a Database without rules, or could run SQL past them."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call):
            func = node.func
            name = getattr(func, "id", getattr(func, "attr", ""))
            if isinstance(func, ast.Attribute) and func.attr == "unruled":
                found.append(f"{where} Database.unruled")
            elif name == "Database":
                hide = next((k.value for k in node.keywords if k.arg == "hide"), None)
                literal = (
                    hide is None
                    or (isinstance(hide, ast.Constant) and hide.value is None)
                    or (
                        isinstance(hide, ast.Call)
                        and not hide.args
                        and not hide.keywords
                        and getattr(hide.func, "id", getattr(hide.func, "attr", "")) == "HideRules"
                    )
                )
                if literal:
                    found.append(f"{where} Database without the configuration's rules")
        elif isinstance(node, ast.ClassDef) and any(
            getattr(b, "id", getattr(b, "attr", "")) == "Database" for b in node.bases
        ):
            found.append(f"{where} a subclass of Database")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr in ("hide", "_hide") for t in targets):
                found.append(f"{where} rules replaced after the Database was made")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            names = {a.name for a in node.names} | {module}
            if (
                names & _BYPASSES
                or module.startswith("agent.sqlite._")
                or (isinstance(node, ast.ImportFrom) and node.level and module.startswith("sqlite._"))
            ):
                found.append(f"{where} imports {sorted(names & _BYPASSES) or module}")
    return found


def test_client_and_model_sql_runs_only_under_the_databases_rules() -> None:
    """Outside agent/sqlite, product code makes every Database with the rules its configuration gives
    (`hide=`, never a literal None or empty set); a handle without rules is `Database.unruled`, made
    only in the operator modules listed above; nothing subclasses Database, replaces its rules,
    imports sqlite3 or agent/sqlite's private modules, or builds the worker's requests itself."""
    outside = [p for p in SOURCES if not p.relative_to(ROOT).as_posix().startswith("agent/sqlite/")]
    sites = [site for p in outside for site in _unruled_sites(p)]
    allowed = [s for s in sites if s.split(":")[0] in OPERATOR_MODULES and s.endswith("Database.unruled")]
    assert sorted({s.split(":")[0] for s in allowed}) == sorted(OPERATOR_MODULES)  # the rule sees them
    assert [s for s in sites if s not in allowed] == []
    ruled = [p for p in outside if "Database(" in p.read_text(encoding="utf-8")]
    assert len(ruled) >= 6  # the server's databases, libraries and catalog, ask, tool, doctor

"""House rules the code keeps, checked on its source: loggers named by module, the SDK's public API only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("agent/**/*.py"), *ROOT.glob("mcp_server/**/*.py")])


def test_loggers_are_named_by_their_module() -> None:
    """No logger is named by a string literal: `getLogger(__name__)`, so levels and JSON logs follow modules."""
    literal = re.compile(r"getLogger\(\s*[\"']")
    assert [str(p.relative_to(ROOT)) for p in SOURCES if literal.search(p.read_text(encoding="utf-8"))] == []


def test_the_mcp_sdk_is_used_through_its_public_api() -> None:
    """No private attribute of the MCP SDK's server (`_tool_manager`, `_lowlevel_server`...) is touched."""
    private = re.compile(r"\._(tool_manager|resource_manager|prompt_manager|lowlevel_server|subscriptions)\b")
    assert [str(p.relative_to(ROOT)) for p in SOURCES if private.search(p.read_text(encoding="utf-8"))] == []


def test_json_lines_go_through_the_one_codec() -> None:
    """No module but agent/jsonl.py writes a JSON line by hand (`json.dumps(...) + "\\n"`) or splits a
    file's text with `splitlines()` after json: a line ends at "\\n" only, and one codec says so."""
    # (a pretty-printed JSON file, `indent=`, is one document, not JSON Lines)
    by_hand = re.compile(r"json\.dumps\((?![^\n]*indent=)[^\n]*\)\s*\+\s*[\"']\\n[\"']")
    split = re.compile(r"splitlines\(\)[^\n]*\n(?:[^\n]*\n){0,6}?[^\n]*(json\.loads|model_validate_json)")
    found = [str(p.relative_to(ROOT)) for p in SOURCES if p.name != "jsonl.py"
             and (by_hand.search(text := p.read_text(encoding="utf-8")) or split.search(text))]
    assert found == []


# Where product code may make a Database with no hide rules (`Database.unruled`), and why: the
# operator's own tools on files the configuration gives no rules for. Nowhere else.
OPERATOR_MODULES = {
    "agent/commands/golden.py": "golden add checks the operator's own SQL on their own file",
    "agent/evaluation/runner.py": "eval serves a benchmark's files, which have no hide rules",
}
# What would run SQL past a Database's rules: the worker's requests, SQLite itself, the private
# modules of agent/sqlite.
_BYPASSES = {"sqlite3", "QueryRequest", "SchemaRequest", "QueryEngine.run"}


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
                literal = hide is None or (isinstance(hide, ast.Constant) and hide.value is None) or (
                    isinstance(hide, ast.Call) and not hide.args and not hide.keywords
                    and getattr(hide.func, "id", getattr(hide.func, "attr", "")) == "HideRules")
                if literal:
                    found.append(f"{where} Database without the configuration's rules")
        elif isinstance(node, ast.ClassDef) and any(getattr(b, "id", getattr(b, "attr", "")) == "Database"
                                                     for b in node.bases):
            found.append(f"{where} a subclass of Database")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr in ("hide", "_hide") for t in targets):
                found.append(f"{where} rules replaced after the Database was made")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            names = {a.name for a in node.names} | {module}
            if names & _BYPASSES or module.startswith("agent.sqlite._") or (
                    isinstance(node, ast.ImportFrom) and node.level and module.startswith("sqlite._")):
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

"""House rules the code keeps, checked on its source: loggers named by module, the SDK's public API only."""

from __future__ import annotations

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

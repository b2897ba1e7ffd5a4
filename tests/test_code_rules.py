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

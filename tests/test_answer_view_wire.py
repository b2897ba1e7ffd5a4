"""Clients without MCP Apps see today's answer byte for byte (recorded on main before the view)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_server.answer.view import VIEW_URI
from tests.support.mcp import BOOK_GOLD
from tests.support.policies import OraclePolicy
from tests.support.wire import wire_responses

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# Recorded with tests/support/wire.py on main at cb10585, before the answer view existed.
RECORDED = Path(__file__).resolve().parent / "wire" / "no_apps_client.json"
QUESTION = "What is the total quantity ordered per customer city?"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_client_without_apps_gets_the_recorded_bytes(tmp_path: Path, fake_ollama: Any,
                                                             mode: str) -> None:
    """tools/list and tools/call answer a client that did not negotiate Apps exactly as before the view."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    got = await wire_responses(tmp_path, ["--demo", "--ollama-host", fake.url], {"question": QUESTION},
                               mode=mode)
    assert got == json.loads(RECORDED.read_text(encoding="utf-8"))[mode]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_apps_client_gets_the_same_answer_and_the_view_on_the_tool(tmp_path: Path, fake_ollama: Any,
                                                                            mode: str) -> None:
    """With MCP Apps: the tools/call bytes as recorded; tools/list differs only by the tool's _meta.ui."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    got = await wire_responses(tmp_path, ["--demo", "--ollama-host", fake.url], {"question": QUESTION},
                               mode=mode, apps=True)
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))[mode]
    assert got["tools/call"] == recorded["tools/call"]
    listed, before = json.loads(got["tools/list"]), json.loads(recorded["tools/list"])
    [tool] = listed["result"]["tools"]
    assert tool.pop("_meta") == {"ui": {"resourceUri": VIEW_URI}}
    assert listed == before

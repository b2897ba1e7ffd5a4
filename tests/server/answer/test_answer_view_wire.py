"""Clients without MCP Apps see the server byte for byte as without the view; Apps clients the same answer.

Each server runs over stdio behind `tee` (tests/support/wire.py), so the compared responses
are the exact lines it wrote, timings zeroed. `--no-answer-view` is the server as it was before
the view (no extension, no middleware): until the view landed, these responses were also
compared with a recording made on main (cb10585), and were equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp.server.apps import EXTENSION_ID

from mcp_server.answer.door import CHOOSE_TOOL_NAME
from mcp_server.answer.view import VIEW_URI
from tests.support.mcp import BOOK_GOLD
from tests.support.policies import OraclePolicy
from tests.support.wire import wire_responses

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(300)]

QUESTION = "What is the total quantity ordered per customer city?"
MODES = ["legacy", "2026-07-28"]  # the 2025-11-25 handshake era, and the 2026-07-28 era


async def responses(tmp_path: Path, fake: Any, mode: str, *flags: str, apps: bool) -> dict[str, str]:
    return await wire_responses(
        tmp_path, ["--demo", "--ollama-host", fake.url, *flags], {"question": QUESTION}, mode=mode, apps=apps
    )


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_apps_gets_the_bytes_of_a_server_without_the_view(
    tmp_path: Path, fake_ollama: Any, mode: str
) -> None:
    """tools/list and tools/call answer a client that did not negotiate Apps exactly as with the view off."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    before = await responses(tmp_path / "off", fake, mode, "--no-answer-view", apps=False)
    assert await responses(tmp_path / "on", fake, mode, apps=False) == before


@pytest.mark.parametrize("mode", MODES)
async def test_an_apps_client_gets_the_same_answer_and_the_view_on_the_tool(
    tmp_path: Path, fake_ollama: Any, mode: str
) -> None:
    """With MCP Apps: the same tools/call bytes; tools/list differs only by the tool's _meta.ui."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    before = await responses(tmp_path / "off", fake, mode, "--no-answer-view", apps=False)
    got = await responses(tmp_path / "on", fake, mode, apps=True)
    assert got["tools/call"] == before["tools/call"]
    listed = json.loads(got["tools/list"])
    [tool, choose] = listed["result"]["tools"]
    assert tool.pop("_meta") == {"ui": {"resourceUri": VIEW_URI}}
    assert (choose["name"], choose["_meta"]) == (
        CHOOSE_TOOL_NAME,
        {"ui": {"resourceUri": VIEW_URI, "visibility": ["app"]}},
    )
    listed["result"]["tools"] = [tool]  # the view's app-only "Use this answer" aside
    assert listed == json.loads(before["tools/list"])


@pytest.mark.parametrize("apps", [True, False], ids=["apps", "no-apps"])
@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])  # auto: discover first
async def test_what_each_era_announces(tmp_path: Path, fake_ollama: Any, mode: str, apps: bool) -> None:
    """2025-11-25: `initialize` announces no extension, even to an Apps client (the SDK's
    2025-11-25 wire model of ServerCapabilities has no `extensions`), yet an Apps client, whose
    declaration the server reads, gets the view on the tool. 2026-07-28: `server/discover`
    announces the extension to every client; the view still goes only to Apps clients."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    handshake = "initialize" if mode == "legacy" else "server/discover"
    got = await wire_responses(
        tmp_path,
        ["--demo", "--ollama-host", fake.url],
        {"question": QUESTION},
        mode=mode,
        apps=apps,
        methods=(handshake, "tools/list"),
    )
    capabilities = json.loads(got[handshake])["result"]["capabilities"]
    announced = capabilities.get("extensions")
    assert announced == (None if mode == "legacy" else {EXTENSION_ID: {}}), capabilities
    tool, *app_only = json.loads(got["tools/list"])["result"]["tools"]
    assert tool.get("_meta", {}).get("ui") == ({"resourceUri": VIEW_URI} if apps else None)
    assert [t["name"] for t in app_only] == ([CHOOSE_TOOL_NAME] if apps else [])

"""`save_verified_answer`, the answer view's "Save as verified": an app-only tool with --verified-writable."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from agent.errors import ConfigError
from mcp_server.answer.output import AnswerOutput
from mcp_server.answer.saving import SAVE_TOOL_NAME
from mcp_server.answer.view import RESULT_META_KEY
from mcp_server.config.command_line import parse_settings
from tests.support.mcp import TOOL
from tests.support.mcp_in_process import build
from tests.support.policies import OraclePolicy
from tests.support.wire import apps_extension

pytestmark = pytest.mark.anyio

GENRES_Q, GENRES_SQL = "Which genres does the shop sell?", "SELECT DISTINCT genre FROM books ORDER BY genre"


async def test_an_apps_client_saves_a_checked_entry_that_answers_the_next_question(
        tmp_path: Path, fake_ollama: Any) -> None:
    """Listed and named to an Apps client; the save is checked, recorded with who and when, and the
    next same question is verified at once; hidden SQL and other databases are refused."""
    fake = fake_ollama(OraclePolicy({GENRES_Q: GENRES_SQL}))
    path = tmp_path / "lib.jsonl"
    server = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--verified", f"bookshop={path}",
                              "--verified-writable", "--hide", "bookshop=customers.city"])
    async with Client(server, extensions=[apps_extension()]) as client:
        with anyio.fail_after(60):
            tools = [t.name for t in (await client.list_tools()).tools]
            first = await client.call_tool(TOOL, {"question": GENRES_Q})
            saved = await client.call_tool(SAVE_TOOL_NAME, {"database": "bookshop", "question": GENRES_Q,
                                                            "sql": GENRES_SQL})
            hidden = await client.call_tool(SAVE_TOOL_NAME, {"database": "bookshop", "question": "Cities?",
                                                             "sql": "SELECT city FROM customers"})
            unknown = await client.call_tool(SAVE_TOOL_NAME, {"database": "sales", "question": "x",
                                                              "sql": "SELECT 1"})
            asked = await client.call_tool(TOOL, {"question": GENRES_Q.lower()})
    assert tools == [TOOL, SAVE_TOOL_NAME]
    assert (first.meta or {}).get(RESULT_META_KEY) == {"appTools": [SAVE_TOOL_NAME]}
    assert (saved.is_error, saved.content[0].text) == (False, (
        f"Saved as verified in lib.jsonl line 1: \"{GENRES_Q}\" on 'bookshop' is now answered at once "
        "with this SQL."))
    assert (hidden.is_error, hidden.content[0].text) == (
        True, "Not saved: its SQL fails: no such column: city.")
    assert unknown.is_error and "Unknown database 'sales'" in unknown.content[0].text
    line = json.loads(path.read_text(encoding="utf-8"))
    assert (line["question"], line["sql"], line["database"], line["added_by"]) == (
        GENRES_Q, GENRES_SQL, "bookshop", getpass.getuser())
    answer = AnswerOutput.model_validate(asked.structured_content)
    assert (answer.status, answer.verified and answer.verified.line) == ("verified", 1)
    assert len(fake.bodies("/api/generate")) == 3  # the first answer's episode only


async def test_no_save_tool_without_writable_library_or_for_clients_without_apps(
        tmp_path: Path, fake_ollama: Any) -> None:
    """Without --verified-writable no client lists it; with it, a client without Apps neither lists
    nor may call it (answered as an unknown tool)."""
    fake = fake_ollama(OraclePolicy({}))
    path = tmp_path / "lib.jsonl"
    read_only = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--verified", f"bookshop={path}"])
    async with Client(read_only, extensions=[apps_extension()]) as client:
        assert [t.name for t in (await client.list_tools()).tools] == [TOOL]
    writable = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--verified", f"bookshop={path}",
                                "--verified-writable"])
    async with Client(writable) as client:
        assert [t.name for t in (await client.list_tools()).tools] == [TOOL]
        refused = await client.call_tool(SAVE_TOOL_NAME, {"database": "bookshop", "question": "q",
                                                          "sql": "SELECT 1"})
    assert (refused.is_error, refused.content[0].text) == (True, f"Unknown tool: {SAVE_TOOL_NAME}")
    assert not path.exists()


def test_writable_without_a_library_is_refused_at_start(tmp_path: Path) -> None:
    """--verified-writable alone stops the server with what to add."""
    with pytest.raises(ConfigError, match=r"--verified-writable needs a library to write to: add "
                                          r"--verified ALIAS=FILE"):
        parse_settings(["--demo", "--verified-writable"], {"XDG_CACHE_HOME": str(tmp_path)})

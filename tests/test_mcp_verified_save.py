"""`save_verified_answer` (the answer view's "Save as verified"), registered as the view will register it."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server.answer.output import AnswerOutput
from mcp_server.answer.saving import SAVE_TOOL_NAME, app_only_tools
from mcp_server.app import SqaleServer
from tests.support.mcp import TOOL
from tests.support.mcp_in_process import build
from tests.support.policies import OraclePolicy

pytestmark = pytest.mark.anyio

GENRES_Q, GENRES_SQL = "Which genres does the shop sell?", "SELECT DISTINCT genre FROM books ORDER BY genre"


def with_app_tools(server: SqaleServer) -> SqaleServer:
    """The server with its app-only tools added as plain tools (the answer view's hook, without the view)."""
    for tool in server.app_only_tools:
        server.add_tool(tool.fn, name=tool.name, title=tool.title, description=tool.description)
    return server


async def test_saving_appends_a_checked_entry_that_answers_the_next_question(
        tmp_path: Path, fake_ollama: Any) -> None:
    """Save, then ask: verified at once; who and when are recorded; hidden or failing SQL is refused."""
    fake = fake_ollama(OraclePolicy({GENRES_Q: GENRES_SQL}))
    path = tmp_path / "lib.jsonl"
    server = with_app_tools(build(tmp_path, ["--demo", "--ollama-host", fake.url, "--verified",
                                             f"bookshop={path}", "--verified-writable", "--hide",
                                             "bookshop=customers.city"]))
    async with Client(server) as client:
        with anyio.fail_after(60):
            saved = await client.call_tool(SAVE_TOOL_NAME, {"database": "bookshop", "question": GENRES_Q,
                                                            "sql": GENRES_SQL})
            hidden = await client.call_tool(SAVE_TOOL_NAME, {"database": "bookshop", "question": "Cities?",
                                                             "sql": "SELECT city FROM customers"})
            unknown = await client.call_tool(SAVE_TOOL_NAME, {"database": "sales", "question": "x",
                                                              "sql": "SELECT 1"})
            asked = await client.call_tool(TOOL, {"question": GENRES_Q.lower()})
    assert (saved.is_error, saved.content[0].text) == (False, (
        f"Saved as verified in lib.jsonl line 1: \"{GENRES_Q}\" on 'bookshop' is now answered at once "
        "with this SQL."))
    assert (hidden.is_error, hidden.content[0].text) == (
        True, "Not saved: its SQL reads column customers.city, which the hide rules hide.")
    assert unknown.is_error and "Unknown database 'sales'" in unknown.content[0].text
    line = json.loads(path.read_text(encoding="utf-8"))
    assert (line["question"], line["sql"], line["database"], line["added_by"]) == (
        GENRES_Q, GENRES_SQL, "bookshop", getpass.getuser())
    answer = AnswerOutput.model_validate(asked.structured_content)
    assert (answer.status, answer.verified and answer.verified.line) == ("verified", 1)
    assert fake.bodies("/api/generate") == []


def test_no_app_only_tool_without_a_writable_library(tmp_path: Path, fake_ollama: Any) -> None:
    """Without --verified-writable (or without a library) there is nothing to register."""
    fake = fake_ollama(OraclePolicy({}))
    path = tmp_path / "lib.jsonl"
    read_only = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--verified", f"bookshop={path}"])
    writable = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--verified", f"bookshop={path}",
                                "--verified-writable"])
    assert (read_only.app_only_tools, [t.name for t in writable.app_only_tools]) == ((), [SAVE_TOOL_NAME])
    assert app_only_tools(writable.sqale_settings)[0].fn.__name__ == "save_verified_answer"


def test_writable_without_a_library_is_refused_at_start(tmp_path: Path) -> None:
    """--verified-writable alone stops the server with what to add."""
    from agent.errors import ConfigError
    from mcp_server.config.command_line import parse_settings

    with pytest.raises(ConfigError, match=r"--verified-writable needs a library to write to: add "
                                          r"--verified ALIAS=FILE"):
        parse_settings(["--demo", "--verified-writable"], {"XDG_CACHE_HOME": str(tmp_path)})

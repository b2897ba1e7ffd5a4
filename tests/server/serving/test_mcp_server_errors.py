"""answer_sql_question in-process: bad arguments, unreachable runtimes, missing models, swapped
files: each is an actionable tool error."""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.support.mcp import BOOK_GOLD, TOOL
from tests.support.mcp_in_process import ask, build, error_text
from tests.support.policies import OraclePolicy, PolicyBackend, ScriptPolicy, assistant_reply, tool_call

pytestmark = pytest.mark.anyio


async def test_argument_errors_are_tool_errors(tmp_path: Path) -> None:
    """Unknown alias lists the aliases; no alias with several; empty or over-long text."""
    one, two = (tmp_path / "one.db", tmp_path / "two.db")
    for path in (one, two):
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE t (x)")
        conn.close()
    server = build(
        tmp_path, ["--db", f"one={one}", "--db", f"Two={two}"], PolicyBackend(ScriptPolicy(["unused"]))
    )
    async with Client(server) as client:
        texts = [
            error_text(await client.call_tool(TOOL, args))
            for args in (
                {"question": "q?", "database": "three"},
                {"question": "q?"},
                {"question": "  \n "},
                {"question": "x" * 2001, "database": "one"},
                {"question": "q?", "database": "one", "evidence": "e" * 4001},
            )
        ]
    assert texts == [
        "Unknown database 'three'; pass one of the configured aliases as `database`: one, Two.",
        "Several databases are configured; pass one as `database`: one, Two.",
        "The question is empty; ask a question about the data in plain language, e.g. 'Which 5 "
        "customers spent the most?'.",
        "The question is 2,001 characters long; the limit is 2,000. Shorten it to one precise "
        "question; put background hints in `evidence`.",
        "The evidence is 4,001 characters long; the limit is 4,000. Keep only the hints the question needs.",
    ]


async def test_unreachable_ollama_is_an_actionable_tool_error(tmp_path: Path, dead_url: str) -> None:
    """With nothing listening, the call fails saying where Ollama was looked for and how to fix it."""
    host = dead_url.removeprefix("http://")
    text = error_text(
        await ask(
            build(tmp_path, ["--demo", "--ollama-host", dead_url]), {"question": "How many books are there?"}
        )
    )
    assert text == (
        f"The model runtime is unreachable: Could not reach Ollama at http://{host} (connection "
        "refused or host unknown). Start it with `ollama serve`, or give its address with "
        "--ollama-host or the OLLAMA_HOST environment variable."
    )


async def test_a_dead_runtime_is_one_warning_in_the_servers_log(
    tmp_path: Path, dead_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that is down: one warning at start-up, then one per failed call, nothing twice."""
    server = build(tmp_path, ["--demo", "--backend", "openai", "--base-url", f"{dead_url}/v1"])
    with caplog.at_level(logging.DEBUG):
        await ask(server, {"question": "How many books are there?"})
    reached = (
        f"Could not reach the model server at {dead_url}/v1 (ConnectError: All connection attempts "
        "failed). Start it or fix --base-url."
    )
    warnings = [
        (r.name, re.sub(r"[\d.]+ s: ", "T s: ", r.getMessage()))
        for r in caplog.records
        if r.levelno >= logging.WARNING
    ]
    assert warnings == [
        (
            "mcp_server.state",
            f"{reached} (the server keeps running; every question will fail until this is fixed)",
        ),
        (
            "mcp_server.answer.audit",
            "not answered on 'bookshop' for token 'local' (error, BackendUnreachable) "
            "after 0 rounds, 0 tool calls, T s: The model runtime is unreachable: "
            f"{reached}",
        ),
    ]


async def test_missing_model_names_the_ollama_create_command(tmp_path: Path, fake_ollama: Any) -> None:
    """A runtime without the model: the error gives the `ollama create` command."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD), models=("other-model",))
    text = error_text(
        await ask(
            build(tmp_path, ["--demo", "--ollama-host", fake.url]), {"question": "How many books are there?"}
        )
    )
    assert text.startswith("The model is not installed: Ollama at ")
    assert "`ollama create qwen3.5-2b-grpo-synsql -f Modelfile`" in text


async def test_a_file_swapped_for_a_symlink_is_an_error_naming_the_alias(tmp_path: Path) -> None:
    """After the served file is replaced by a symlink to another database, the call fails with
    the alias and the reason, and no row of the other database is returned."""
    served = tmp_path / "served.sqlite"
    sqlite3.connect(served).execute("CREATE TABLE t (x)").connection.close()
    secret = tmp_path / "elsewhere" / "secret.sqlite"
    secret.parent.mkdir()
    con = sqlite3.connect(secret)
    con.execute("CREATE TABLE t (x)")
    con.execute("INSERT INTO t VALUES ('secret')")
    con.commit()
    con.close()
    policy = ScriptPolicy([assistant_reply("go", tool_call("submit_sql", sql="SELECT x FROM t"))])
    server = build(tmp_path, ["--db", f"shop={served}"], PolicyBackend(policy))
    async with Client(server) as client:
        first = await client.call_tool(TOOL, {"question": "What is in t?"})
        assert first.structured_content["rows"] == []
        served.unlink()
        served.symlink_to(secret)
        swapped = await client.call_tool(TOOL, {"question": "What is in t?"})
    assert swapped.is_error
    assert error_text(swapped).startswith(
        f"The database cannot be read ('shop'): {served} now resolves to {secret}"
    )
    content = swapped.structured_content
    assert (content["rows"], content["stop_reason"]) == ([], "database_unreadable")

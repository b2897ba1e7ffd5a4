"""A database another program is writing when the server starts, or when a question comes: the server
starts and serves the others, says the busy one is busy (description, log, answers), and reads it once
the writer is done. Before, `sqale-mcp --db shop=locked.sqlite` exited 2 calling the file damaged."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from agent.errors import DatabaseBusyError
from agent.sqlite import create_database
from mcp_server.answer.tool_errors import tool_error_for
from mcp_server.config.catalog import CatalogEntry
from mcp_server.config.description import summarize
from tests.support.mcp import TOOL, running_http_server
from tests.support.mcp_in_process import build, error_text, valid_answer
from tests.support.policies import OraclePolicy, PolicyBackend

pytestmark = pytest.mark.anyio

SHOP = "CREATE TABLE orders (id INTEGER PRIMARY KEY, amount REAL); INSERT INTO orders (amount) VALUES (1), (2);"
GOLD = {
    "How many orders are there?": "SELECT count(*) FROM orders",
    "How many rows does u have?": "SELECT count(*) FROM u",
}


# The writer is another process, as it is for a user: POSIX drops every lock a process holds on a
# file when the process closes any descriptor of it, and the server opens each file to check it.
_WRITER = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0); "
    "c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); sys.stdin.read(); c.execute('COMMIT')"
)


@contextmanager
def held(path: Path) -> Iterator[None]:
    """`BEGIN EXCLUSIVE` on a rollback-journal file, held by another process until the block ends."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "held\n"
        yield
    finally:
        writer.communicate("", timeout=30)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """shop.sqlite (to be held) and free.sqlite, in one folder."""
    folder = tmp_path / "dbs"
    return (
        create_database(folder / "shop.sqlite", SHOP),
        create_database(folder / "free.sqlite", "CREATE TABLE u (x); INSERT INTO u VALUES (1);"),
    )


@pytest.mark.parametrize("given", ["flags", "folder"])
async def test_a_busy_database_at_start_is_served_and_read_once_free(
    tmp_path: Path, files: tuple[Path, Path], given: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Named by --db or found by --db-dir: the server builds, warns once, describes the file as busy
    beside the other one, answers on the other, refuses a question on it as busy (try again, nothing
    about a damaged file), and answers it once the writer is done."""
    shop, free = files
    argv = (
        ["--db", f"shop={shop}", "--db", f"free={free}"] if given == "flags" else ["--db-dir", str(shop.parent)]
    )
    caplog.set_level(logging.INFO)
    with ExitStack() as writer:
        writer.enter_context(held(shop))
        server = build(tmp_path, [*argv, "--query-timeout", "1"], PolicyBackend(OraclePolicy(GOLD)))
        async with Client(server) as client:
            (tool,) = (await client.list_tools()).tools
            other = await client.call_tool(TOOL, {"question": "How many rows does u have?", "database": "free"})
            busy = await client.call_tool(TOOL, {"question": "How many orders are there?", "database": "shop"})
            writer.close()  # the writer commits
            answered = await client.call_tool(
                TOOL, {"question": "How many orders are there?", "database": "shop"}
            )
    assert (
        "- shop: busy when the server started (another program was writing to it); ask anyway: its tables "
        "are read at its first question"
    ) in (tool.description or "")
    assert "- free: 1 table (u)" in (tool.description or "")
    warned = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "shop" in r.getMessage()
    ]
    assert len(warned) == 1 and "busy: another program is writing to it" in warned[0], warned
    assert valid_answer(other)["rows"] == [[1]]
    said = error_text(busy)
    assert said.startswith("The database is busy ('shop'): ") and said.endswith("; try again once it is done.")
    assert "damaged" not in said and "rephras" not in said
    assert valid_answer(busy)["stop_reason"] == "database_busy"
    assert (answered.is_error, valid_answer(answered)["rows"]) == (False, [[2]])


def test_a_remote_client_is_told_to_retry_without_the_path() -> None:
    """Over HTTP the busy error names the alias, never the file, and says a retry will do."""
    error = tool_error_for(
        DatabaseBusyError("/srv/data/shop.sqlite: busy: ..."), database="shop", remote=True, question_id="q1"
    )
    assert (str(error), error.kind) == (
        "The database 'shop' is busy: another program is writing to it, and it stayed locked while the "
        "server waited. Retry in a moment; if it keeps failing, ask the server's operator: its log has the "
        "details under question id q1.",
        "database_busy",
    )


def test_the_description_line_of_a_busy_database() -> None:
    """A busy database has no table names to show: it says why, and that a question reads them."""
    entry = CatalogEntry(alias="shop", path=Path("/x"), tables=(), views=(), busy=True, verified=Path("/v"))
    assert summarize(entry) == (
        "shop: busy when the server started (another program was writing to it); ask "
        "anyway: its tables are read at its first question; has verified answers"
    )


@pytest.mark.slow
def test_the_http_server_starts_with_a_busy_database(
    tmp_path: Path, files: tuple[Path, Path], fake_ollama: Any
) -> None:
    """`sqale-mcp --transport streamable-http` with a held file listens (it exited 2 before) and logs
    the file as busy, not damaged."""
    shop, free = files
    runtime = fake_ollama(OraclePolicy(GOLD))
    with (
        held(shop),
        running_http_server(
            tmp_path, "--db", f"shop={shop}", "--db", f"free={free}", "--ollama-host", runtime.url
        ),
    ):
        pass
    log = (tmp_path / "stderr.txt").read_text()
    assert "database 'shop': " in log and "busy: another program is writing to it" in log
    assert "damaged" not in log

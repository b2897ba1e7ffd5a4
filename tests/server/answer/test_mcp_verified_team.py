"""Verified libraries on a team server over real HTTP: a token never sees another database's library,
and saves only with the permission its table grants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agent.verified.proposals import proposals_path, read_proposals
from mcp_server.answer.door import CHOOSE_TOOL_NAME, SAVE_TOOL_NAME
from mcp_server.answer.output import AnswerOutput
from tests.support.mcp import TOOL
from tests.support.team import ALL, BOOK_QUESTION, BOOKS, ask, list_tool
from tests.support.wire import apps_extension

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


def library(path: Path, database: str, *pairs: tuple[str, str]) -> Path:
    path.write_text(
        "".join(json.dumps({"question": q, "sql": sql, "database": database}) + "\n" for q, sql in pairs),
        encoding="utf-8",
    )
    return path


async def answer(url: str, token: str, arguments: dict[str, Any]) -> AnswerOutput:
    result = await ask(url, token, arguments)
    assert not result.is_error, result.content
    return AnswerOutput.model_validate(result.structured_content)


async def test_each_token_is_answered_from_its_own_databases_library_only(
    team_server: Any, tmp_path: Path
) -> None:
    """Both libraries hold the same question with other SQL: each database answers with its own;
    the bookshop token never gets, nor sees listed, an entry of the sales library."""
    books = library(tmp_path / "books.jsonl", "bookshop", (BOOK_QUESTION, "SELECT count(*) AS n FROM books"))
    sales = library(
        tmp_path / "sales.jsonl",
        "sales",
        (BOOK_QUESTION, "SELECT count(*) AS n FROM sales"),
        ("How many books were sold in total?", "SELECT sum(amount) FROM sales"),
    )
    server = team_server("--verified", f"bookshop={books}", "--verified", f"sales={sales}")
    mine = await answer(server.url, BOOKS, {"question": BOOK_QUESTION})
    assert (mine.status, mine.database, mine.rows, mine.verified and mine.verified.library) == (
        "verified",
        "bookshop",
        [[16]],
        "books.jsonl",
    )
    theirs = await answer(server.url, ALL, {"question": BOOK_QUESTION, "database": "sales"})
    assert (theirs.status, theirs.rows, theirs.verified and theirs.verified.library) == (
        "verified",
        [[2]],
        "sales.jsonl",
    )
    similar = await answer(server.url, BOOKS, {"question": "List the titles of books published before 1960."})
    assert similar.status != "verified"
    assert [(s.question, s.sql) for s in similar.similar_verified] == [
        (BOOK_QUESTION, "SELECT count(*) AS n FROM books")
    ]


async def test_a_token_whose_databases_have_no_library_is_offered_no_verified_argument(
    team_server: Any, tmp_path: Path
) -> None:
    """Only sales has a library: the bookshop token's tool has no `verified` and no library line."""
    sales = library(tmp_path / "sales.jsonl", "sales", (BOOK_QUESTION, "SELECT count(*) FROM sales"))
    server = team_server("--verified", f"sales={sales}")
    scoped, full = await list_tool(server.url, BOOKS), await list_tool(server.url, ALL)
    assert ("verified" in scoped.input_schema["properties"], "verified answers" in scoped.description) == (
        False,
        False,
    )
    assert ("verified" in full.input_schema["properties"], "has verified answers" in full.description) == (
        True,
        True,
    )
    plain = await answer(server.url, BOOKS, {"question": BOOK_QUESTION})
    assert (plain.status, plain.similar_verified) == ("submitted", [])


async def as_apps_host(url: str, token: str, arguments: dict[str, Any] | None = None) -> tuple[list[str], Any]:
    """tools/list as `token` from a client declaring MCP Apps, then (with `arguments`) one save call."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), extensions=[apps_extension()]) as client,
    ):
        names = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool(SAVE_TOOL_NAME, arguments) if arguments is not None else None
    return names, result


async def test_declaring_mcp_apps_is_no_permission_to_save_and_a_granted_save_is_only_a_proposal(
    team_server: Any, tmp_path: Path
) -> None:
    """Over HTTP only [tokens.books] has save-verified: [tokens.all], declaring the extension like any
    host, is not shown the tool (the view's choice tool is everyone's) and is refused when it calls
    it anyway (logged, counted); the books token's save is a proposal, and the other token asking
    that question gets the model's answer; a database failing under a save is said without a server
    path."""
    books = tmp_path / "books.jsonl"
    server = team_server(
        "--verified", f"bookshop={books}", "--verified-writable", books_quota="save-verified = true\n"
    )
    save = {"database": "bookshop", "question": BOOK_QUESTION, "sql": "SELECT 0 AS n"}
    listed, refused = await as_apps_host(server.url, ALL, save)
    assert (listed, refused.is_error, refused.content[0].text) == (
        [TOOL, CHOOSE_TOOL_NAME],
        True,
        (
            "Not saved: token 'all' may not propose verified answers. The server's operator grants it with "
            "save-verified = true in its [tokens.NAME] table."
        ),
    )
    listed, proposed = await as_apps_host(server.url, BOOKS, save)
    assert (listed, proposed.is_error) == ([TOOL, SAVE_TOOL_NAME, CHOOSE_TOOL_NAME], False)
    assert proposed.content[0].text.startswith(f"Proposed, awaiting review: \"{BOOK_QUESTION}\" on 'bookshop'")
    (waiting,) = read_proposals(proposals_path(books)).pending()
    assert (waiting.proposal.proposed_by, waiting.proposal.sql, books.exists()) == (
        "books",
        "SELECT 0 AS n",
        False,
    )
    theirs = await answer(server.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop"})
    assert (theirs.status, theirs.rows, theirs.verified) == ("submitted", [[16]], None)
    metrics = server.metrics()
    assert [
        metrics.get(f"sqale_verified_saves_total{{database={d},outcome={o},token={t}}}")
        for d, o, t in (("", "not_permitted", "all"), ("bookshop", "proposed", "books"))
    ] == [1.0, 1.0]
    (demo,) = (tmp_path / "cache").rglob("bookshop*.sqlite")
    demo.rename(tmp_path / "moved.sqlite")  # the database fails under the save: no path reaches the client
    _, failed = await as_apps_host(server.url, BOOKS, {**save, "question": "How many authors are there?"})
    assert failed.is_error and failed.content[0].text.startswith(
        "Not saved: The database 'bookshop' cannot be read: its file is missing, unreadable or not an SQLite "
        "database. Ask the server's operator: its log has the details under question id "
    )
    log = server.stderr.read_text()
    assert str(tmp_path) not in failed.content[0].text and str(demo) in log
    assert "save on '-' for token 'all': not_permitted" in log
    assert "save on 'bookshop' for token 'books': proposed" in log
    assert "save on 'bookshop' for token 'books': error" in log


async def test_a_token_reads_values_for_a_template_of_its_own_database_only(
    team_server: Any, tmp_path: Path
) -> None:
    """Over HTTP with scoped tokens: the bookshop token's question fits the bookshop template (values bound,
    verified.params); a question on sales, which has no library, is the model's, the template not listed."""
    books = tmp_path / "books.jsonl"
    books.write_text(
        json.dumps(
            {
                "question": "How many {genre} books are there?",
                "database": "bookshop",
                "sql": "SELECT count(*) AS n FROM books WHERE genre = :genre",
                "params": {"genre": {"type": "value", "column": "books.genre"}},
            }
        )
        + "\n",
        encoding="utf-8",
    )
    server = team_server("--verified", f"bookshop={books}")
    mine = await answer(server.url, BOOKS, {"question": "How many fantasy books are there?"})
    assert (mine.status, mine.rows, mine.verified and mine.verified.model_dump()["params"]) == (
        "verified",
        [[1]],
        {"genre": {"type": "value", "value": "fantasy", "text": "fantasy"}},
    )
    elsewhere = await answer(server.url, ALL, {"question": "How many sales are there?", "database": "sales"})
    assert (elsewhere.status, elsewhere.verified, elsewhere.similar_verified) == ("submitted", None, [])

"""Verified libraries on a team server over real HTTP: a token never sees another database's library."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_server.answer.output import AnswerOutput
from tests.support.team import ALL, BOOK_QUESTION, BOOKS, ask, list_tool

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


def library(path: Path, database: str, *pairs: tuple[str, str]) -> Path:
    path.write_text("".join(json.dumps({"question": q, "sql": sql, "database": database}) + "\n"
                            for q, sql in pairs), encoding="utf-8")
    return path


async def answer(url: str, token: str, arguments: dict[str, Any]) -> AnswerOutput:
    result = await ask(url, token, arguments)
    assert not result.is_error, result.content
    return AnswerOutput.model_validate(result.structured_content)


async def test_each_token_is_answered_from_its_own_databases_library_only(
        team_server: Any, tmp_path: Path) -> None:
    """Both libraries hold the same question with other SQL: each database answers with its own;
    the bookshop token never gets, nor sees listed, an entry of the sales library."""
    books = library(tmp_path / "books.jsonl", "bookshop", (BOOK_QUESTION, "SELECT count(*) AS n FROM books"))
    sales = library(tmp_path / "sales.jsonl", "sales", (BOOK_QUESTION, "SELECT count(*) AS n FROM sales"),
                    ("How many books were sold in total?", "SELECT sum(amount) FROM sales"))
    server = team_server("--verified", f"bookshop={books}", "--verified", f"sales={sales}")
    mine = await answer(server.url, BOOKS, {"question": BOOK_QUESTION})
    assert (mine.status, mine.database, mine.rows, mine.verified and mine.verified.library) == (
        "verified", "bookshop", [[16]], "books.jsonl")
    theirs = await answer(server.url, ALL, {"question": BOOK_QUESTION, "database": "sales"})
    assert (theirs.status, theirs.rows, theirs.verified and theirs.verified.library) == (
        "verified", [[2]], "sales.jsonl")
    similar = await answer(server.url, BOOKS, {"question": "List the titles of books published before 1960."})
    assert similar.status != "verified"
    assert [(s.question, s.sql) for s in similar.similar_verified] == [
        (BOOK_QUESTION, "SELECT count(*) AS n FROM books")]


async def test_a_token_whose_databases_have_no_library_is_offered_no_verified_argument(
        team_server: Any, tmp_path: Path) -> None:
    """Only sales has a library: the bookshop token's tool has no `verified` and no library line."""
    sales = library(tmp_path / "sales.jsonl", "sales", (BOOK_QUESTION, "SELECT count(*) FROM sales"))
    server = team_server("--verified", f"sales={sales}")
    scoped, full = await list_tool(server.url, BOOKS), await list_tool(server.url, ALL)
    assert ("verified" in scoped.input_schema["properties"], "verified answers" in scoped.description) == (
        False, False)
    assert ("verified" in full.input_schema["properties"], "has verified answers" in full.description) == (
        True, True)
    plain = await answer(server.url, BOOKS, {"question": BOOK_QUESTION})
    assert (plain.status, plain.similar_verified) == ("submitted", [])

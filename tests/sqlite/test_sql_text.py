"""agent.sqlite.sql_text: skipping comments and whitespace, the first keyword of a statement, its tokens."""

from __future__ import annotations

import pytest

from agent.sqlite.sql_text import (
    TokenKind,
    first_keyword,
    parameter_names,
    skip_blanks,
    skip_comment,
    sql_tokens,
)


@pytest.mark.parametrize(
    ("sql", "start", "end"),
    [
        ("-- note\nSELECT", 0, 8),
        ("/* a */SELECT", 0, 7),
        ("x -- to the end", 2, 15),
        ("/* never closed", 0, 15),
        ("SELECT 1", 0, 0),
        ("a - b / c", 2, 2),
    ],
)
def test_skip_comment(sql: str, start: int, end: int) -> None:
    """A `--` comment ends after its newline, a `/* */` one after `*/`, an unclosed one at the end."""
    assert skip_comment(sql, start) == end


def test_skip_blanks_runs_over_whitespace_comments_and_extra_characters() -> None:
    """Whitespace and comments in any order are skipped; `also` adds characters such as '('."""
    sql = " \n-- a\n /* b */ (( SELECT"
    assert (skip_blanks(sql), skip_blanks(sql, also="(")) == (sql.index("("), sql.index("S"))


@pytest.mark.parametrize(
    ("sql", "keyword"),
    [
        ("  SELECT 1", "select"),
        ("-- why\n/* how */ (WITH x AS (SELECT 1) SELECT * FROM x)", "with"),
        ("\u00a0pragma_list", "pragma_list"),
        ("/* only a comment", ""),
        ("", ""),
        ("DELETE FROM t", "delete"),
    ],
)
def test_first_keyword(sql: str, keyword: str) -> None:
    """The first word after whitespace, comments and opening parentheses, lower-cased."""
    assert first_keyword(sql) == keyword


def test_sql_tokens_follow_sqlites_tokenizer() -> None:
    """Strings, blobs, numbers, quoted names and every parameter form; comments are skipped."""
    sql = (
        "SELECT a FROM t WHERE s LIKE :month || '%' AND b = 'it''s :x' -- :no\n"
        " AND c = \"x\" AND d >= 1.5e3 AND e = ?2 AND f = $a::b(c) AND g = x'ab' AND h = .5 AND [i] = @z"
        " AND T1.x = 0x1F AND y <> ? /* :no */"
    )
    kinds = [(t.kind, sql[t.start : t.end]) for t in sql_tokens(sql) if t.kind is not TokenKind.WORD]
    assert kinds == [
        (TokenKind.PARAMETER, ":month"),
        (TokenKind.SYMBOL, "||"),
        (TokenKind.STRING, "'%'"),
        (TokenKind.SYMBOL, "="),
        (TokenKind.STRING, "'it''s :x'"),
        (TokenKind.SYMBOL, "="),
        (TokenKind.QUOTED_NAME, '"x"'),
        (TokenKind.SYMBOL, ">="),
        (TokenKind.NUMBER, "1.5e3"),
        (TokenKind.SYMBOL, "="),
        (TokenKind.PARAMETER, "?2"),
        (TokenKind.SYMBOL, "="),
        (TokenKind.PARAMETER, "$a::b(c)"),
        (TokenKind.SYMBOL, "="),
        (TokenKind.BLOB, "x'ab'"),
        (TokenKind.SYMBOL, "="),
        (TokenKind.NUMBER, ".5"),
        (TokenKind.QUOTED_NAME, "[i]"),
        (TokenKind.SYMBOL, "="),
        (TokenKind.PARAMETER, "@z"),
        (TokenKind.SYMBOL, "."),
        (TokenKind.SYMBOL, "="),
        (TokenKind.NUMBER, "0x1F"),
        (TokenKind.SYMBOL, "<>"),
        (TokenKind.PARAMETER, "?"),
    ]
    assert parameter_names(sql + " AND z = :month") == (":month", "?2", "$a::b(c)", "@z", "?")

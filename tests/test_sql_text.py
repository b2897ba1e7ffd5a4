"""agent.sqlite.sql_text: skipping comments and whitespace, and the first keyword of a statement."""

from __future__ import annotations

import pytest

from agent.sqlite.sql_text import first_keyword, skip_blanks, skip_comment


@pytest.mark.parametrize(("sql", "start", "end"), [
    ("-- note\nSELECT", 0, 8),
    ("/* a */SELECT", 0, 7),
    ("x -- to the end", 2, 15),
    ("/* never closed", 0, 15),
    ("SELECT 1", 0, 0),
    ("a - b / c", 2, 2),
])
def test_skip_comment(sql: str, start: int, end: int) -> None:
    """A `--` comment ends after its newline, a `/* */` one after `*/`, an unclosed one at the end."""
    assert skip_comment(sql, start) == end


def test_skip_blanks_runs_over_whitespace_comments_and_extra_characters() -> None:
    """Whitespace and comments in any order are skipped; `also` adds characters such as '('."""
    sql = " \n-- a\n /* b */ (( SELECT"
    assert (skip_blanks(sql), skip_blanks(sql, also="(")) == (sql.index("("), sql.index("S"))


@pytest.mark.parametrize(("sql", "keyword"), [
    ("  SELECT 1", "select"),
    ("-- why\n/* how */ (WITH x AS (SELECT 1) SELECT * FROM x)", "with"),
    ("\u00a0pragma_list", "pragma_list"),
    ("/* only a comment", ""),
    ("", ""),
    ("DELETE FROM t", "delete"),
])
def test_first_keyword(sql: str, keyword: str) -> None:
    """The first word after whitespace, comments and opening parentheses, lower-cased."""
    assert first_keyword(sql) == keyword

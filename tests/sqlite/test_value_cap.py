"""Every value past the length cap is an error: printf() and format() too, which SQLite itself
answers with NULL and status OK (issue 31, §5); under the cap they answer exactly as SQLite's."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from agent.sqlite import Database, QueryStatus, WorkerPool, create_database

CAP = 16 * 1024 * 1024  # GuardSettings.min_value_length: the cap of a small file
SCHEMA = """
CREATE TABLE t (id INTEGER PRIMARY KEY, word TEXT, shown TEXT AS (printf('<%s>', word)));
INSERT INTO t (id, word) VALUES (1, 'a''b'), (2, NULL), (3, 'c"d');
CREATE VIEW padded AS SELECT id, format('%05d', id) AS code FROM t;
"""
BIG = f"printf('%.*c', {CAP // 2 + 1}, 'x')"  # half the cap and one byte: two of them pass it
PAST_THE_CAP = {
    "precision (the issue's)": f"SELECT length(printf('%.*c', {CAP + 1}, 'x'))",
    "as a condition (the issue's)": f"SELECT count(*) FROM t WHERE printf('%.*c', {CAP + 1}, 'x') IS NULL",
    "width": f"SELECT printf('%{CAP + 1}d', 7)",
    "format() of two halves": f"SELECT format('%s%s', {BIG}, {BIG}) IS NULL",
    "%Q doubling quotes": f"SELECT length(printf('%Q', replace({BIG}, 'x', '''')))",
    "in ORDER BY": f"SELECT id FROM t ORDER BY printf('%.*c', {CAP} + id, 'x')",
    "in a CTE": f"WITH w(v) AS (SELECT printf('%s%s', {BIG}, {BIG})) SELECT coalesce(v, 'none') FROM w",
}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory, engine: WorkerPool) -> Database:
    return Database.unruled(create_database(tmp_path_factory.mktemp("cap") / "cap.db", SCHEMA), engine)


@pytest.mark.parametrize("sql", PAST_THE_CAP.values(), ids=PAST_THE_CAP.keys())
def test_a_format_past_the_cap_is_an_error(db: Database, sql: str) -> None:
    """printf/format past the cap fail as || does ("string or blob too big"), never NULL and OK."""
    result = db.query(sql, max_rows=5)
    assert (result.status, result.error, result.rows) == (QueryStatus.SQL_ERROR, "string or blob too big", ())
    concatenated = db.query(f"SELECT length({BIG} || {BIG})", max_rows=1)
    assert (concatenated.status, concatenated.error) == (QueryStatus.SQL_ERROR, "string or blob too big")


FORMATS = [
    "printf('%d|%5.2f|%x|%o|%e', 42, 3.14159, 255, 8, 12345.678)",
    "printf('%q|%Q|%w|%Q', 'it''s', 'x', 'a\"b', NULL)",
    "printf('%-6s|%6s|%.2s|%c|%%', 'ab', 'cd', 'efgh', 'zy')",
    "printf('%,d|%!.3g|%+d|% d|%#x', 1234567, 0.1, 5, 5, 255)",
    "printf('%s', x'414243')",
    "printf('%s|%d', NULL, NULL)",
    "printf(NULL)",
    "printf()",
    "printf('plain')",
    "format('%s and %s', 1, 2.5)",
    "printf('%.*c', 10, '-')",
    "printf('%d', 9223372036854775807)",
    "typeof(printf('%d', 1))",
    f"length(printf('%.*c', {CAP - 1}, 'x'))",  # its longest
]


def test_under_the_cap_a_format_answers_as_sqlite_s_own(db: Database, tmp_path: Path) -> None:
    """Every conversion, NULLs and the cap itself give SQLite's own results."""
    sql = f"SELECT {', '.join(FORMATS)}"
    with contextlib.closing(sqlite3.connect(":memory:")) as bare:  # closed: 3.13 fails an open one
        bare.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, CAP)
        expected = bare.execute(sql).fetchall()
    result = db.query(sql, max_rows=1, cell_limit=None)
    assert (result.status, list(result.rows)) == (QueryStatus.OK, expected), result.error


def test_the_schema_s_own_formats_still_work(db: Database) -> None:
    """A generated column and a view that call printf/format read as before, also in a statement
    that calls printf itself (SQLite's own printf runs there)."""
    queries = {
        "SELECT shown FROM t ORDER BY id": [("<a'b>",), ("<>",), ('<c"d>',)],
        "SELECT code FROM padded ORDER BY id": [("00001",), ("00002",), ("00003",)],
        "SELECT printf('%s=%s', p.code, t.shown) FROM padded p JOIN t USING (id) ORDER BY id": [
            ("00001=<a'b>",),
            ("00002=<>",),
            ('00003=<c"d>',),
        ],
        "SELECT printf('%d!', count(*)) FROM t": [("3!",)],
    }
    for sql, rows in queries.items():
        result = db.query(sql, max_rows=5)
        assert (result.status, list(result.rows)) == (QueryStatus.OK, rows), (sql, result.error)

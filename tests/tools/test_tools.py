"""The eight tools on a database of awkward names: whole texts, queries, schema changes, async."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.sqlite import Database, QueryStatus, WorkerPool
from agent.tools import ToolSettings
from tests.support.weird_database import arun_tool, build, outcome, run_tool, without_query

# --- schema tools -----------------------------------------------------------------------------


def test_list_tables_shows_sql_ready_names(weird: Database) -> None:
    """Tables then views, with names that need quotes quoted; no row counts."""
    assert run_tool(weird, "list_tables", {}) == outcome(
        '7 tables:\ncolours\nlonely\n"order"\n"Order Details"\nshipments\nSTRASSE\n"Straße"\n'
        '1 view:\n"big orders"'
    )


@pytest.mark.parametrize(
    "given",
    [
        "Order Details",
        '"Order Details"',
        "order details",
        "[Order Details]",
        "`Order Details`",
        'main."Order Details"',
        " Order Details ",
    ],
)
def test_describe_table_accepts_the_forms_a_model_copies(weird: Database, given: str) -> None:
    """Any case, quoted, bracketed or main.-qualified names find the same table."""
    assert run_tool(weird, "describe_table", {"table_name": given}) == outcome(
        'table "Order Details": 3 rows, 3 columns\n'
        '"Order ID"        INTEGER  NOT NULL -> "order".id\n'
        '"Product ID"      INTEGER  NOT NULL\n'
        '"Unit ""Price"""  REAL\n'
        'primary key ("Order ID", "Product ID")',
        ("Order Details",),
    )


def test_describe_table_keyword_names_and_defaults(weird: Database) -> None:
    """A table named like a keyword, with keyword and bracket column names and a default."""
    assert run_tool(weird, "describe_table", {"table_name": "ORDER"}) == outcome(
        'table "order": 3 rows, 5 columns\n'
        "id             INTEGER  PK\n"
        "\"select\"       TEXT     NOT NULL DEFAULT 'x'\n"
        '"bracket col"  TEXT\n'
        "note           TEXT\n"
        "picture        BLOB",
        ("order",),
    )


def test_names_differing_only_in_case(weird: Database) -> None:
    """Exact names pick their table; a spelling matching both asks for the exact name."""
    assert run_tool(weird, "describe_table", {"table_name": "STRASSE"}) == outcome(
        'table STRASSE: 0 rows, 2 columns\nid           INTEGER  PK\n"straße_id"  INTEGER  -> "Straße".id',
        ("STRASSE",),
    )
    assert run_tool(weird, "describe_table", {"table_name": "Straße"}).tables == {"Straße"}
    assert run_tool(weird, "describe_table", {"table_name": "strasse"}) == outcome(
        "no table 'strasse'; several tables differ from it only in case: STRASSE or \"Straße\"; "
        "write the exact name",
        ok=False,
    )


def test_describe_view(weird: Database) -> None:
    """Views are described like tables, without a row count."""
    assert run_tool(weird, "describe_table", {"table_name": "big orders"}) == outcome(
        'view "big orders": 2 columns\nid        INTEGER\n"select"  TEXT', ("big orders",)
    )


def test_unknown_table_suggests_nearest(weird: Database) -> None:
    """A misspelt table gets the nearest real names."""
    assert run_tool(weird, "foreign_keys", {"table_name": "shipment"}) == outcome(
        "no table 'shipment'; did you mean shipments?", ok=False
    )


def test_foreign_keys_composite(weird: Database) -> None:
    """Outgoing and incoming links, composite keys as T(a, b)."""
    assert run_tool(weird, "foreign_keys", {"table_name": "Order Details"}) == outcome(
        'outgoing ("Order Details" -> other tables):\n"Order Details"."Order ID" -> "order".id\n'
        'incoming (other tables -> "Order Details"):\n'
        'shipments(order_id, product_id) -> "Order Details"("Order ID", "Product ID")',
        ("Order Details",),
    )


def test_join_path_composite_key(weird: Database) -> None:
    """The chain of joins is ready to paste, composite keys joined with AND."""
    assert run_tool(weird, "join_path", {"table_a": "shipments", "table_b": "order"}) == outcome(
        'FROM "shipments"\n'
        'JOIN "Order Details" ON "shipments"."order_id" = "Order Details"."Order ID" AND '
        '"shipments"."product_id" = "Order Details"."Product ID"\n'
        'JOIN "order" ON "Order Details"."Order ID" = "order"."id"',
        ("shipments", "Order Details", "order"),
    )


def test_join_path_same_table_and_none(weird: Database) -> None:
    """The same table twice needs no join; unlinked tables get each side's neighbours."""
    assert run_tool(weird, "join_path", {"table_a": "lonely", "table_b": "LONELY"}) == outcome(
        "table_a and table_b are both lonely; no join is needed", ("lonely",)
    )
    assert run_tool(weird, "join_path", {"table_a": "lonely", "table_b": "order"}) == outcome(
        'no chain of foreign keys links lonely and "order"\nlonely is linked to: no other table\n'
        '"order" is linked to: "Order Details"\nif two columns hold the same values, join on them directly',
        ("lonely", "order"),
        ok=False,
    )


# --- rows and values --------------------------------------------------------------------------


def test_sample_rows_renders_every_kind_of_cell(weird: Database) -> None:
    """Blobs by size, NULL, empty text, escaped newlines, pipes kept; all rows when few."""
    assert run_tool(weird, "sample_rows", {"table_name": "order"}) == outcome(
        'all 3 rows of "order":\n'
        "id | select | bracket col | note         | picture\n"
        "---+--------+-------------+--------------+---------------\n"
        "1  | it's   | a|b         | line1\\nline2 | <blob 4 bytes>\n"
        "2  | x      | NULL        | ''           | NULL\n"
        "3  | x      | y           | NULL         | NULL",
        ("order",),
    )


def test_sample_rows_clips_huge_text(weird: Database) -> None:
    """A 345-character cell shows its first cell_chars characters and how many are hidden."""
    assert run_tool(weird, "sample_rows", {"table_name": "lonely"}, ToolSettings(cell_chars=10)) == outcome(
        "the only row of lonely:\nx\n-----------------------\nzzzzzzzzzz…[+335 chars]", ("lonely",)
    )


@pytest.mark.parametrize(
    ("limit", "shown", "note"),
    [
        (None, 10, None),
        ("3", 3, None),
        (2.0, 2, None),
        (" 4 ", 4, None),
        (10**9, 20, "[limit 1,000,000,000 is above the maximum 20; showing up to 20]"),
        (-5, 1, "[limit -5 is below 1; showing up to 1]"),
        (0, 1, "[limit 0 is below 1; showing up to 1]"),
    ],
)
def test_sample_rows_limit_forms_and_clamping(
    weird: Database, limit: Any, shown: int, note: str | None
) -> None:
    """Limits as numbers or numeric strings are accepted; out-of-range ones are clamped with a note."""
    result = run_tool(weird, "sample_rows", {"table_name": "colours", "limit": limit})
    lines = result.text.splitlines()
    assert lines[0] == (f"first {shown} row{'s' if shown > 1 else ''} of colours (30 in total):")
    assert len(lines) == 3 + shown + (note is not None)
    assert (lines[-1] if note else None) == note
    assert result.ok


def test_distinct_values_most_frequent_first(weird: Database) -> None:
    """Counts descending then value; text shown as SQL literals; the total counts every value."""
    assert run_tool(
        weird, "distinct_values", {"table_name": "colours", "column_name": "NAME", "limit": 3}
    ) == outcome(
        "colours.name has 7 distinct values; the 3 most frequent:\n"
        "value | count\n------+------\n'c1'  | 5\n'c2'  | 5\n'c0'  | 4",
        ("colours",),
    )
    assert run_tool(weird, "distinct_values", {"table_name": "order", "column_name": "select"}) == outcome(
        '"order"."select" has 2 distinct values:\nvalue   | count\n--------+------\n\'x\'     | 2\n'
        "'it''s' | 1",
        ("order",),
    )


def test_distinct_values_unknown_column(weird: Database) -> None:
    """A misspelt column gets the nearest columns of that table."""
    assert run_tool(weird, "distinct_values", {"table_name": "order", "column_name": "notes"}) == outcome(
        "no column 'notes' in \"order\"; did you mean note?", ("order",), ok=False
    )


# --- queries ----------------------------------------------------------------------------------


def test_run_query_result_and_raw_query(weird: Database) -> None:
    """run_query prints the grid and row count and returns the raw QueryResult."""
    result = run_tool(weird, "run_query", {"sql": 'SELECT "Unit ""Price""" FROM "Order Details"'})
    assert without_query(result) == outcome(
        'Unit "Price"\n------------\n2.5\n3.0\n1e+20\n[3 rows]', ("Order Details",)
    )
    assert result.query is not None
    assert (result.query.status, result.query.rows) == (QueryStatus.OK, ((2.5,), (3.0,), (1e20,)))


def test_run_query_cut_at_row_cap(weird: Database) -> None:
    """Past query_rows the footer says how many rows exist and how to see others."""
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1234) SELECT i FROM n"
    result = run_tool(weird, "run_query", {"sql": sql}, ToolSettings(query_rows=3))
    assert without_query(result) == outcome(
        "i\n-\n1\n2\n3\n[showing 3 of 1,234 rows; add WHERE/LIMIT or aggregate to see others]"
    )


def test_run_query_result_size_cap(weird: Database) -> None:
    """The size cap cuts whole rows and stays within result_chars."""
    sql = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) "
        "SELECT i, printf('%.60c', 'w') AS w FROM n"
    )
    result = run_tool(weird, "run_query", {"sql": sql}, ToolSettings(result_chars=600))
    assert len(result.text) <= 600
    assert result.text.splitlines()[-1] == (
        "[showing 5 of 200 rows; add WHERE/LIMIT or aggregate to see others]"
    )


@pytest.mark.parametrize(
    ("sql", "text"),
    [
        ("SELECT * FROM ordr", 'SQL error: no such table: ordr\nhint: did you mean "order"?'),
        ('SELECT nte FROM "order"', 'SQL error: no such column: nte\nhint: did you mean "order".note?'),
        (
            "SELECT * FROM Order Details",
            'SQL error: near "Order": syntax error\nhint: names with spaces, symbols or SQL keywords need '
            'double quotes, e.g. "order" or "Order Details"',
        ),
        ("DELETE FROM lonely", "not allowed: DELETE; only reading statements (SELECT / WITH) are allowed"),
        (
            "PRAGMA user_version = 3",
            "not allowed: PRAGMA user_version is not allowed (read-only pragmas only)\n"
            "hint: only reading queries run here: one SELECT (or WITH ... SELECT) statement",
        ),
        (
            "SELECT 1; SELECT 2",
            "SQL error: only one statement per call is allowed\n"
            "hint: send a single SELECT statement without a second statement after ';'",
        ),
    ],
)
def test_run_query_errors_with_hints(weird: Database, sql: str, text: str) -> None:
    """SQLite's message comes back with a hint; the outcome is not ok and carries the raw result."""
    result = run_tool(weird, "run_query", {"sql": sql})
    assert (result.text, result.ok, result.tables) == (text, False, frozenset())
    assert result.query is not None and not result.query.ok


def test_submit_sql_runs_like_run_query(weird: Database) -> None:
    """submit_sql returns exactly what run_query would."""
    submitted = run_tool(weird, "submit_sql", {"sql": "SELECT count(*) AS n FROM colours"})
    ran = run_tool(weird, "run_query", {"sql": "SELECT count(*) AS n FROM colours"})
    assert without_query(submitted) == without_query(ran) == outcome("n\n--\n30\n[1 row]", ("colours",))
    assert run_tool(weird, "submit_sql", {"query": "SELECT 2 AS n"}).text == "n\n-\n2\n[1 row]"


# --- schema changes, many tables, async -------------------------------------------------------


def test_schema_refresh_after_the_file_changes(tmp_path: Path, engine: WorkerPool) -> None:
    """A table added by another writer shows up in the next call."""
    path = build(tmp_path / "grow.sqlite", "CREATE TABLE alpha (x);")
    with Database.unruled(path, engine) as db:
        assert run_tool(db, "list_tables", {}).text == "1 table:\nalpha"
        writer = sqlite3.connect(path)  # another writer, in place (not a new file)
        writer.executescript("CREATE TABLE beta (y INTEGER NOT NULL); INSERT INTO beta VALUES (7);")
        writer.close()
        assert run_tool(db, "list_tables", {}).text == "2 tables:\nalpha\nbeta"
        assert run_tool(db, "describe_table", {"table_name": "beta"}).text == (
            "table beta: 1 row, 1 column\ny  INTEGER  NOT NULL"
        )


def test_thousand_tables_stay_compact(tmp_path: Path, engine: WorkerPool) -> None:
    """list_tables on 1,000 tables fits result_chars and says how to filter; pattern finds one."""
    sql = "".join(f"CREATE TABLE t{i:04d} (id INTEGER PRIMARY KEY);" for i in range(1000))
    with Database.unruled(build(tmp_path / "wide.sqlite", sql), engine) as db:
        text = run_tool(db, "list_tables", {}).text
        assert len(text) <= ToolSettings().result_chars
        assert text.splitlines()[0] == "1,000 tables:"
        assert text.splitlines()[-1] == (
            "[showing 631 of 1,000 names; call list_tables with "
            '{"pattern": "word"} to list only the names containing a word]'
        )
        assert run_tool(db, "list_tables", {"pattern": "T0999"}) == outcome(
            "1 table whose names contain 'T0999':\nt0999"
        )


@pytest.mark.anyio
async def test_arun_tool_matches_run_tool(weird: Database) -> None:
    """The async driver gives the same outcomes as the sync one."""
    calls = [
        ("list_tables", {}),
        ("describe_table", {"table_name": "order"}),
        ("join_path", {"table_a": "shipments", "table_b": "order"}),
        ("sample_rows", {"table_name": "colours", "limit": 2}),
        ("distinct_values", {"table_name": "colours", "column_name": "name"}),
        ("run_query", {"sql": "SELECT * FROM ordr"}),
        ("nope", {}),
    ]
    for name, args in calls:
        assert without_query(await arun_tool(weird, name, args)) == without_query(run_tool(weird, name, args))


@pytest.mark.anyio
async def test_cancelling_arun_tool_interrupts_the_query(weird: Database) -> None:
    """Cancelling the caller stops a runaway query well before its deadline; the engine still works."""
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    start = time.monotonic()
    with anyio.move_on_after(0.2) as scope:
        await arun_tool(weird, "run_query", {"sql": slow})
    assert scope.cancelled_caught
    assert time.monotonic() - start < 3
    assert (await arun_tool(weird, "run_query", {"sql": "SELECT 1 AS one"})).text == "one\n---\n1\n[1 row]"

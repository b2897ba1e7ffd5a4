"""Golden strings of the pure renderers: identifiers, cells, grids, fitting, query texts."""

from __future__ import annotations

from agent.sqlite.sql_text import quote_name
from agent.sqlite.types import BlobRef, ClippedText, QueryResult, QueryStatus
from agent.tools.result_text import (
    FittedTable,
    escape_text,
    fit_table,
    format_cell,
    format_literal,
    format_total,
    join_names,
    render_distinct,
    render_grid,
    render_query_failure,
    render_query_result,
    render_sample,
    rows_footer,
    show_column,
    show_columns,
    show_ident,
)


def ok(
    columns: tuple[str, ...], rows: list[tuple], total: int | None = None, lower_bound: bool = False
) -> QueryResult:
    return QueryResult(QueryStatus.OK, columns, tuple(rows), len(rows) if total is None else total, lower_bound)


def test_quote_name_doubles_embedded_quotes() -> None:
    """quote_name (the tools' queries) always double-quotes and doubles embedded double quotes."""
    assert [quote_name(n) for n in ("Track", 'Unit "Price"', "a b", "")] == [
        '"Track"',
        '"Unit ""Price"""',
        '"a b"',
        '""',
    ]


def test_show_ident_quotes_only_when_needed() -> None:
    """Plain names stay bare; spaces, quotes, brackets, unicode and keywords get quoted."""
    names = [
        "Track",
        "_x1",
        "Order Details",
        'say "hi"',
        "[x]",
        "Straße",
        "order",
        "SELECT",
        "Key",
        "1abc",
        "name",
    ]
    assert [show_ident(n) for n in names] == [
        "Track",
        "_x1",
        '"Order Details"',
        '"say ""hi"""',
        '"[x]"',
        '"Straße"',
        '"order"',
        '"SELECT"',
        '"Key"',
        '"1abc"',
        "name",
    ]


def test_show_column_and_composite_columns() -> None:
    """One column prints as T.c, a composite key as T(a, b), each part quoted when needed."""
    assert show_column("Order Details", "OrderID") == '"Order Details".OrderID'
    assert show_columns("Track", ("AlbumId",)) == "Track.AlbumId"
    assert show_columns("t", ("a", "b c")) == 't(a, "b c")'


def test_format_cell_kinds() -> None:
    """NULL, blobs, floats, ints, empty text, escaped newlines and clipped text render as pinned."""
    cells = [
        None,
        BlobRef(12),
        b"\x00\x01",
        0.5,
        2.0,
        1e20,
        -3.0,
        42,
        "",
        "a\nb\tc\r\x01",
        "x" * 12,
        ClippedText("abcdef", 450),
    ]
    assert [format_cell(v, 10) for v in cells] == [
        "NULL",
        "<blob 12 bytes>",
        "<blob 2 bytes>",
        "0.5",
        "2.0",
        "1e+20",
        "-3.0",
        "42",
        "''",
        "a\\nb\\tc\\r\\x01",
        "xxxxxxxxxx…[+2 chars]",
        "abcdef…[+444 chars]",
    ]


def test_format_literal_quotes_text() -> None:
    """Distinct values print as SQL literals: quotes doubled, numbers and NULL bare, long text clipped."""
    values = ["it's", 3, None, 1.5, "y" * 6, ClippedText("ab'c", 2000)]
    assert [format_literal(v, 4) for v in values] == [
        "'it''s'",
        "3",
        "NULL",
        "1.5",
        "'yyyy'…[+2 chars]",
        "'ab''c'…[+1,996 chars]",
    ]


def test_escape_text_keeps_backslashes() -> None:
    """Only control characters are escaped; a backslash stays as written."""
    assert escape_text("C:\\dir\nnext\x7f") == "C:\\dir\\nnext\\x7f"


def test_render_grid_aligns_and_strips_trailing_spaces() -> None:
    """Columns are padded to their widest cell; lines carry no trailing spaces."""
    text = render_grid(["id", "name"], [["1", "AC/DC"], ["10", ""], ["100", "x"]])
    assert text == "id  | name\n----+------\n1   | AC/DC\n10  |\n100 | x"


def test_fit_table_cuts_whole_rows() -> None:
    """Rows are cut from the end so the grid fits; the count says how many remain."""
    rows = [[str(i), "v" * 10] for i in range(10)]
    fitted = fit_table(["n", "value"], rows, 80)
    assert fitted == FittedTable(
        "n | value\n--+-----------\n0 | vvvvvvvvvv\n1 | vvvvvvvvvv\n2 | vvvvvvvvvv", 3, 2
    )


def test_fit_table_cuts_columns_when_one_row_is_too_wide() -> None:
    """A row wider than the budget loses trailing columns; one column and one row always stay."""
    fitted = fit_table(["a", "b", "c"], [["x" * 20, "y" * 20, "z" * 20]], 50)
    assert fitted == FittedTable("a\n" + "-" * 20 + "\n" + "x" * 20, 1, 1)
    assert fit_table(["a"], [["x" * 30]], 5).rows_shown == 1


def test_rows_footer_wording() -> None:
    """Complete results state the count; cut ones say what was shown of how many and what to do."""
    assert [
        rows_footer(1, 1, True),
        rows_footer(0, 0, True),
        rows_footer(50, 1234, True),
        rows_footer(50, 100_000, False),
    ] == [
        "[1 row]",
        "[0 rows]",
        "[showing 50 of 1,234 rows; add WHERE/LIMIT or aggregate to see others]",
        "[showing 50 of at least 100,000 rows; add WHERE/LIMIT or aggregate to see others]",
    ]


def test_format_total_and_join_names() -> None:
    """Totals get separators and `at least`; name lists read naturally."""
    assert format_total(3503, True) == "3,503"
    assert format_total(100_000, False) == "at least 100,000"
    assert [join_names([]), join_names(["a"]), join_names(["a", "b"]), join_names(["a", "b", "c"], "and")] == [
        "",
        "a",
        "a or b",
        "a, b and c",
    ]


def test_render_query_result_complete() -> None:
    """A small result is a grid plus its row count."""
    result = ok(("ArtistId", "Name"), [(1, "AC/DC"), (2, None)])
    assert render_query_result(result, 100, 4000) == (
        "ArtistId | Name\n---------+------\n1        | AC/DC\n2        | NULL\n[2 rows]"
    )


def test_render_query_result_truncated_by_row_cap() -> None:
    """More rows than returned: the footer says how many exist and how to see others."""
    result = ok(("n",), [(i,) for i in range(3)], total=1234)
    assert render_query_result(result, 100, 4000) == (
        "n\n-\n0\n1\n2\n[showing 3 of 1,234 rows; add WHERE/LIMIT or aggregate to see others]"
    )


def test_render_query_result_cut_by_size() -> None:
    """The size cap cuts whole rows and the footer counts what is shown."""
    result = ok(("text",), [("w" * 50,) for _ in range(10)])
    text = render_query_result(result, 100, 400)
    assert text == (
        "text\n"
        + "-" * 50
        + "\n"
        + "\n".join(["w" * 50] * 3)
        + "\n[showing 3 of 10 rows; add WHERE/LIMIT or aggregate to see others]"
    )


def test_render_query_result_cut_columns() -> None:
    """A row too wide for the cap loses trailing columns, with a note naming the cut."""
    result = ok(tuple(f"c{i}" for i in range(5)), [tuple("v" * 90 for _ in range(5))])
    text = render_query_result(result, 100, 800)
    assert text == (
        "c0".ljust(90)
        + " | c1\n"
        + "-" * 90
        + "-+-"
        + "-" * 90
        + "\n"
        + "v" * 90
        + " | "
        + "v" * 90
        + "\n[1 row]\n"
        + "[showing 2 of 5 columns; select only the columns you need]"
    )


def test_render_query_result_without_columns() -> None:
    """A statement with no result columns says so instead of printing an empty grid."""
    assert render_query_result(ok((), []), 100, 4000) == ("[the statement ran and returned no result columns]")


def test_render_sample_heads() -> None:
    """sample_rows heads: first N of total, all N, the only row, no rows, unknown total."""
    two = ok(("a",), [(1,), (2,)])
    assert render_sample("Track", two, (3503, True), 100, 4000) == (
        "first 2 rows of Track (3,503 in total):\na\n-\n1\n2"
    )
    assert render_sample("Order Details", two, (2, True), 100, 4000).splitlines()[0] == (
        'all 2 rows of "Order Details":'
    )
    assert render_sample("t", ok(("a",), [(1,)]), (1, True), 100, 4000).splitlines()[0] == (
        "the only row of t:"
    )
    assert render_sample("t", two, (100_000, False), 100, 4000).splitlines()[0] == (
        "first 2 rows of t (at least 100,000 in total):"
    )
    assert render_sample("t", two, None, 100, 4000).splitlines()[0] == "first 2 rows of t:"
    assert render_sample("t", ok(("a", "b"), []), (0, True), 100, 4000) == (
        "t has no rows; its columns:\na | b\n--+--"
    )


def test_render_distinct_values() -> None:
    """Distinct values: total first, values as literals with counts, most frequent first."""
    result = ok(("c", "count(*)"), [(None, 977), ("Steve Harris", 80)], total=854)
    assert render_distinct("Track", "Composer", result, 100, 4000) == (
        "Track.Composer has 854 distinct values; the 2 most frequent:\n"
        "value          | count\n---------------+------\nNULL           | 977\n"
        "'Steve Harris' | 80"
    )
    single = ok(("c", "count(*)"), [(7, 3)])
    assert render_distinct("t", "select", single, 100, 4000) == (
        't."select" has 1 distinct value:\nvalue | count\n------+------\n7     | 3'
    )
    assert render_distinct("t", "c", ok(("c", "n"), []), 100, 4000) == (
        "t.c has no values: the table has no rows"
    )


def test_render_query_failure_per_status() -> None:
    """Each failure kind says what happened and what to do next."""
    error = QueryResult(QueryStatus.SQL_ERROR, error="no such table: Trak")
    assert render_query_failure(error, "did you mean Track?", 5.0) == (
        "SQL error: no such table: Trak\nhint: did you mean Track?"
    )
    assert render_query_failure(error, None, 5.0) == "SQL error: no such table: Trak"
    denied = QueryResult(
        QueryStatus.DENIED, error="not allowed: only reading statements (SELECT / WITH) are allowed"
    )
    assert render_query_failure(denied, None, 5.0) == (
        "not allowed: only reading statements (SELECT / WITH) are allowed"
    )
    pragma = QueryResult(QueryStatus.DENIED, error="not allowed: PRAGMA x is not allowed")
    assert render_query_failure(pragma, None, 5.0) == (
        "not allowed: PRAGMA x is not allowed\n"
        "hint: only reading queries run here: one SELECT (or WITH ... SELECT) statement"
    )
    timeout = QueryResult(QueryStatus.TIMEOUT, error="interrupted")
    assert render_query_failure(timeout, None, 2.5) == (
        "timeout: the query ran longer than 2.5 s and was stopped\n"
        "hint: add LIMIT, filter with WHERE, aggregate, or check that every JOIN has an ON condition"
    )
    killed = QueryResult(QueryStatus.KILLED, error="stopped: the query ran past its 5 s limit")
    assert render_query_failure(killed, None, 5.0).splitlines() == [
        "stopped: the query ran past its 5 s limit",
        "hint: add LIMIT, filter with WHERE, aggregate, or check that every JOIN has an ON condition",
    ]
    cancelled = QueryResult(QueryStatus.CANCELLED, error="cancelled")
    assert render_query_failure(cancelled, None, 5.0) == ("cancelled: the query was stopped before it finished")

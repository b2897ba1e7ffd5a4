"""Pure text rendering for tool results: identifiers, cells, aligned tables, row footers.

Everything here is deterministic and free of I/O so the exact strings the model sees
can be pinned by golden tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..sqlite.types import BlobRef, ClippedText, QueryResult, QueryStatus
from ..text import echo_value, escape_unsafe, format_count, plural, quoted_name

# SQLite's keywords (https://sqlite.org/lang_keywords.html). A name equal to one of
# them is shown double-quoted, so the model copies a form that always parses.
_KEYWORDS_TEXT = """
ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE BEGIN
BETWEEN BY CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT CREATE CROSS
CURRENT CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT DEFERRABLE DEFERRED
DELETE DESC DETACH DISTINCT DO DROP EACH ELSE END ESCAPE EXCEPT EXCLUDE EXCLUSIVE EXISTS
EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM FULL GENERATED GLOB GROUP GROUPS HAVING
IF IGNORE IMMEDIATE IN INDEX INDEXED INITIALLY INNER INSERT INSTEAD INTERSECT INTO IS ISNULL
JOIN KEY LAST LEFT LIKE LIMIT MATCH MATERIALIZED NATURAL NO NOT NOTHING NOTNULL NULL NULLS OF
OFFSET ON OR ORDER OTHERS OUTER OVER PARTITION PLAN PRAGMA PRECEDING PRIMARY QUERY RAISE RANGE
RECURSIVE REFERENCES REGEXP REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING RIGHT ROLLBACK
ROW ROWS SAVEPOINT SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION TRIGGER UNBOUNDED
UNION UNIQUE UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE WINDOW WITH WITHOUT
"""
SQLITE_KEYWORDS = frozenset(_KEYWORDS_TEXT.split())

_BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ERROR_CHARS = 300  # SQLite's messages quote the model's SQL: show this much of one
HINT_CHARS = 600


def show_ident(name: str) -> str:
    """The name bare when SQL accepts it bare, else double-quoted (escaped, cut when very long)."""
    if _BARE_NAME.fullmatch(name) and name.upper() not in SQLITE_KEYWORDS:
        return name if len(name) <= 120 else quoted_name(name)
    return quoted_name(name)


def show_column(table: str, column: str) -> str:
    """`Table.Column` with each part quoted only when needed."""
    return f"{show_ident(table)}.{show_ident(column)}"


def show_columns(table: str, columns: Sequence[str]) -> str:
    """`T.a` for one column, `T(a, b)` for a composite key."""
    if len(columns) == 1:
        return show_column(table, columns[0])
    return f"{show_ident(table)}({', '.join(show_ident(c) for c in columns)})"


def format_total(count: int, exact: bool) -> str:
    """A row total, `at least N` when counting stopped early."""
    return format_count(count) if exact else f"at least {format_count(count)}"


def escape_text(text: str) -> str:
    """Control, bidi and zero-width characters written as escapes so one row stays on one line."""
    return escape_unsafe(text)


def _clip(text: str, total_length: int, cell_chars: int) -> str:
    shown = text[:cell_chars]
    hidden = total_length - len(shown)
    suffix = f"…[+{format_count(hidden)} chars]" if hidden > 0 else ""
    return escape_text(shown) + suffix


def format_float(value: float) -> str:
    """A REAL with 15 significant digits (as the sqlite3 shell), always marked as real."""
    text = format(value, ".15g")
    if text.lstrip("-").isdigit():
        text += ".0"
    return text


def format_cell(value: Any, cell_chars: int) -> str:
    """One result cell as display text: NULL, clipped text, `<blob N bytes>`."""
    if value is None:
        return "NULL"
    if isinstance(value, BlobRef):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return str(BlobRef(len(value)))
    if isinstance(value, ClippedText):
        return _clip(value.prefix, value.length, cell_chars)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return _clip(value, len(value), cell_chars) if value else "''"
    return escape_text(str(value))


def format_literal(value: Any, cell_chars: int) -> str:
    """One value as an SQL literal (text in single quotes) so the model can copy it."""
    if isinstance(value, str):
        value = ClippedText(value, len(value))
    if isinstance(value, ClippedText):
        shown = value.prefix[:cell_chars]
        hidden = value.length - len(shown)
        suffix = f"…[+{format_count(hidden)} chars]" if hidden > 0 else ""
        return "'" + escape_text(shown.replace("'", "''")) + "'" + suffix
    return format_cell(value, cell_chars)


def render_grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An aligned text table: header, a dashed rule, one line per row."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


@dataclass(frozen=True)
class FittedTable:
    """A grid cut to a size: its text and how many rows and leading columns it shows."""

    text: str
    rows_shown: int
    columns_shown: int


def _largest_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """The largest n in [lo, hi] with fits(n), given fits is monotone and lo is accepted."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def fit_table(header: Sequence[str], rows: Sequence[Sequence[str]], max_chars: int) -> FittedTable:
    """The grid with whole trailing rows (then trailing columns) cut to stay within max_chars.

    At least one column and, if there are rows, one row are always kept.
    """
    first = rows[:1]
    columns = _largest_fitting(
        1, len(header), lambda n: len(render_grid(header[:n], [r[:n] for r in first])) <= max_chars
    )
    cut_header = header[:columns]
    body = [r[:columns] for r in rows]
    count = _largest_fitting(
        min(1, len(body)), len(body), lambda n: len(render_grid(cut_header, body[:n])) <= max_chars
    )
    return FittedTable(render_grid(cut_header, body[:count]), count, columns)


def columns_note(fitted: FittedTable, total_columns: int) -> str | None:
    """The note for columns cut by fit_table, or None."""
    if fitted.columns_shown == total_columns:
        return None
    return f"[showing {fitted.columns_shown} of {total_columns} columns; select only the columns you need]"


def rows_footer(shown: int, total: int, exact: bool) -> str:
    """The footer of a query result: the row count, or what was cut and how to see the rest."""
    if exact and shown == total:
        return f"[{plural(total, 'row')}]"
    return (
        f"[showing {format_count(shown)} of {format_total(total, exact)} rows; "
        "add WHERE/LIMIT or aggregate to see others]"
    )


def join_names(names: Sequence[str], last: str = "or") -> str:
    """`a`, `a or b`, `a, b or c`."""
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} {last} {names[-1]}"


# --- whole texts of the query-backed tools -------------------------------------------------

_FOOTER_ROOM = 160  # characters kept free for footers and notes when fitting a grid


def _grid_parts(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    cell_chars: int,
    max_chars: int,
    literal_first: bool = False,
    columns_cut: int = 0,
) -> tuple[FittedTable, str | None]:
    header = [format_cell(c, cell_chars) for c in columns]
    cells = [
        [
            format_literal(v, cell_chars) if literal_first and i == 0 else format_cell(v, cell_chars)
            for i, v in enumerate(row)
        ]
        for row in rows
    ]
    fitted = fit_table(header, cells, max(1, max_chars - _FOOTER_ROOM))
    # columns_cut: trailing columns the worker already left out to fit its byte budget
    return fitted, columns_note(fitted, len(columns) + columns_cut)


def render_query_result(result: QueryResult, cell_chars: int, max_chars: int) -> str:
    """A successful statement's rows as a grid with a footer saying how many rows exist."""
    if not result.columns:
        return "[the statement ran and returned no result columns]"
    fitted, cut_columns = _grid_parts(
        result.columns, result.rows, cell_chars, max_chars, columns_cut=result.columns_cut
    )
    lines = [fitted.text, rows_footer(fitted.rows_shown, result.total_rows, not result.total_is_lower_bound)]
    return "\n".join(lines + ([cut_columns] if cut_columns else []))


def render_sample(
    table: str, result: QueryResult, total: tuple[int, bool] | None, cell_chars: int, max_chars: int
) -> str:
    """The first rows of a table, headed by how many rows it has; `total` is (count, exact)."""
    name = show_ident(table)
    fitted, cut_columns = _grid_parts(
        result.columns, result.rows, cell_chars, max_chars, columns_cut=result.columns_cut
    )
    if not result.rows:
        head = f"{name} has no rows; its columns:"
    elif total is not None and total[1] and total[0] == len(result.rows) == 1:
        head = f"the only row of {name}:"
    elif total is not None and total[1] and total[0] == len(result.rows):
        head = f"all {format_count(len(result.rows))} rows of {name}:"
    elif total is not None:
        head = f"first {plural(len(result.rows), 'row')} of {name} ({format_total(*total)} in total):"
    else:
        head = f"first {plural(len(result.rows), 'row')} of {name}:"
    lines = [head, fitted.text]
    if fitted.rows_shown < len(result.rows):
        lines.append(
            f"[showing {fitted.rows_shown} of {len(result.rows)} sampled rows; the rest "
            "did not fit, select fewer columns with run_query]"
        )
    return "\n".join(lines + ([cut_columns] if cut_columns else []))


def render_distinct(table: str, column: str, result: QueryResult, cell_chars: int, max_chars: int) -> str:
    """The most frequent values of a column (text as SQL literals) and how many distinct exist."""
    subject = show_column(table, column)
    if not result.rows:
        return f"{subject} has no values: the table has no rows"
    exact = not result.total_is_lower_bound
    noun = "value" if exact and result.total_rows == 1 else "values"
    head = f"{subject} has {format_total(result.total_rows, exact)} distinct {noun}"
    if result.truncated:
        head += f"; the {format_count(len(result.rows))} most frequent:"
    else:
        head += ":"
    fitted, _ = _grid_parts(("value", "count"), result.rows, cell_chars, max_chars, literal_first=True)
    lines = [head, fitted.text]
    if fitted.rows_shown < len(result.rows):
        lines.append(f"[showing {fitted.rows_shown} of {len(result.rows)}; the rest did not fit]")
    return "\n".join(lines)


_SLOW_QUERY_HINT = "add LIMIT, filter with WHERE, aggregate, or check that every JOIN has an ON condition"


def render_query_failure(result: QueryResult, hint: str | None, query_timeout: float) -> str:
    """Why a statement did not run, in SQLite's words, plus what to do next."""
    error = echo_value(result.error or "", ERROR_CHARS)
    if result.status is QueryStatus.SQL_ERROR:
        text = f"SQL error: {error}"
    elif result.status in (QueryStatus.HIDDEN, QueryStatus.BUSY):
        text = error  # says what is hidden and what to write instead; that a writer holds the file
    elif result.status is QueryStatus.DENIED:
        text = error
        if "SELECT" not in text:  # e.g. a denied PRAGMA or function: say what is allowed
            hint = hint or "only reading queries run here: one SELECT (or WITH ... SELECT) statement"
    elif result.status is QueryStatus.TIMEOUT:
        text = f"timeout: the query ran longer than {query_timeout:g} s and was stopped"
        hint = hint or _SLOW_QUERY_HINT
    elif result.status is QueryStatus.KILLED:
        text = error
        hint = hint or _SLOW_QUERY_HINT
    else:
        text = "cancelled: the query was stopped before it finished"
    return text if hint is None else f"{text}\nhint: {echo_value(hint, HINT_CHARS)}"

"""Tool texts of the trained environment: pipe-joined rows, one-line CREATE statements.

The formats the authors' environment shows in their published episodes
(../shared/docs/agent-protocol.md): a header and rows with cells joined by ` | `, no
padding, NULL as `None`, floats in Python's repr, at most 5 rows and then
`... (showing first 5 rows; more rows exist)`; describe_table as the table's CREATE
statement on one line. For the tools the authors show no output of (foreign_keys,
distinct_values, errors) the texts stay in the same plain style. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..sqlite.sql_text import skip_quoted
from ..sqlite.types import BlobRef, ClippedText, ForeignKey, QueryResult, QueryStatus, Schema, Table
from ..text import NAME_CHARS, echo_value, format_count, plural
from .environment import fill_in_order
from .result_text import (
    ERROR_CHARS,
    HINT_CHARS,
    escape_text,
    render_query_failure,
    show_ident,
)

QUERY_ROWS = 5  # run_query shows at most this many rows, as the trained environment did
MORE_ROWS = "... (showing first {shown} rows; more rows exist)"
ERROR_LINE = "Error: {error}"
CUT_LINE = "... (line cut at {limit} characters; select fewer columns)"
_NEWLINES = re.compile(r"\r\n|\r|\n")


def one_line(text: str) -> str:
    """Text on one line: line breaks become spaces, other control characters escapes."""
    return escape_text(_NEWLINES.sub(" ", text))


def _clipped(text: str, length: int, cell_chars: int) -> str:
    shown = text[:cell_chars]
    hidden = length - len(shown)
    return one_line(shown) + (f"…[+{format_count(hidden)} chars]" if hidden > 0 else "")


def pipe_cell(value: Any, cell_chars: int) -> str:
    """One cell as Python prints it (`None`, `12.037037037037036`), long text clipped."""
    if value is None:
        return "None"
    if isinstance(value, BlobRef):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return str(BlobRef(len(value)))
    if isinstance(value, ClippedText):
        return _clipped(value.prefix, value.length, cell_chars)
    if isinstance(value, str):
        return _clipped(value, len(value), cell_chars)
    if isinstance(value, float):
        return repr(value)
    return one_line(str(value))


def _fit(lines: list[str], max_chars: int) -> tuple[list[str], bool]:
    """Whole lines within max_chars (the first always, cut if it alone is too long)."""
    kept: list[str] = []
    size = 0
    cut = False
    for line in lines:
        if len(line) > max_chars:
            line, cut = line[:max_chars] + "…", True
        size += len(line) + 1
        if kept and size > max_chars:
            break
        kept.append(line)
    return kept, cut


def pipe_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    more: bool,
    cell_chars: int,
    max_chars: int,
    more_line: str = MORE_ROWS,
) -> str:
    """Header and rows joined by ` | `; `more_line` (with {shown}) when rows were left out."""
    lines = [" | ".join(pipe_cell(c, cell_chars) for c in columns)]
    lines += [" | ".join(pipe_cell(v, cell_chars) for v in row) for row in rows]
    kept, cut = _fit(lines, max_chars)
    shown = len(kept) - 1
    if more or shown < len(rows):
        kept.append(fill_in_order(more_line, format_count(shown)))
    if cut:
        kept.append(CUT_LINE.format(limit=format_count(max_chars)))
    return "\n".join(kept)


def render_rows(result: QueryResult, cell_chars: int, max_chars: int, more_line: str | None = None) -> str:
    """A run_query result: at most QUERY_ROWS rows, then the environment's own line (or the
    authors' `more_line`) if more exist."""
    if not result.columns:
        return "the statement ran and returned no result columns"
    rows = result.rows[:QUERY_ROWS]
    more = result.truncated or len(result.rows) > len(rows)
    return pipe_table(
        result.columns,
        rows,
        more=more,
        cell_chars=cell_chars,
        max_chars=max_chars,
        more_line=more_line or MORE_ROWS,
    )


def render_sample_rows(result: QueryResult, cell_chars: int, max_chars: int) -> str:
    """sample_rows: the same pipe format, every row asked for, no heading and no footer."""
    return pipe_table(result.columns, result.rows, more=False, cell_chars=cell_chars, max_chars=max_chars)


def render_values(column: str, result: QueryResult, cell_chars: int, max_chars: int) -> str:
    """distinct_values: `column | count` rows, most frequent first, and how many values exist."""
    exact = not result.total_is_lower_bound
    total = format_count(result.total_rows) if exact else f"at least {format_count(result.total_rows)}"
    more_line = f"... (showing first {{shown}} of {total} values)"
    return pipe_table(
        (column, "count"),
        result.rows,
        more=result.truncated,
        cell_chars=cell_chars,
        max_chars=max_chars,
        more_line=more_line,
    )


def render_failure(
    result: QueryResult, hint: str | None, query_timeout: float, error_line: str | None = None
) -> str:
    """Why a statement did not run: `Error: <SQLite's message>` (or the authors' `error_line`), and a
    hint line when one helps (a busy database: SQLite's `database is locked`, then that a writer
    holds it and to run it again)."""
    if result.status in (QueryStatus.SQL_ERROR, QueryStatus.BUSY):
        text = fill_in_order(error_line or ERROR_LINE, echo_value(result.error or "", ERROR_CHARS))
        return text if hint is None else f"{text}\nhint: {echo_value(hint, HINT_CHARS)}"
    return render_query_failure(result, hint, query_timeout)


# --- describe_table: the CREATE statement on one line ----------------------------------------

_QUOTES = {"'": "'", '"': '"', "`": "`", "[": "]"}


def _quoted_token(token: str) -> str:
    """A quoted name or literal, escaped; a very long one cut after its closing quote."""
    if len(token) <= NAME_CHARS + 2:
        return escape_text(token)
    return f"{escape_text(token[: NAME_CHARS + 1])}{token[-1]}…[+{len(token) - NAME_CHARS - 2:,} chars]"


def _comment_end(sql: str, start: int) -> tuple[int, str]:
    """Index past the comment at `start` and its text (for `/* text */` on one line)."""
    if sql.startswith("--", start):
        end = sql.find("\n", start)
        end = len(sql) if end == -1 else end
        return end, sql[start + 2 : end].strip()
    end = sql.find("*/", start + 2)
    end = len(sql) if end == -1 else end + 2
    return end, sql[start + 2 : end - 2].strip()


def normalise_statement(sql: str) -> str:
    """A CREATE statement on one line: whitespace collapsed, `(col` not `( col`, quotes untouched.

    Quoted names and literals keep their spaces (control characters escaped); `-- comments`
    become `/* comments */` so that the one line still reads as the same SQL.
    """
    out: list[str] = []
    space = False
    i = 0
    while i < len(sql):
        ch = sql[i]
        if ch.isspace():
            space, i = True, i + 1
            continue
        if ch in _QUOTES:
            end = skip_quoted(sql, i, _QUOTES[ch])
            token = _quoted_token(sql[i:end])
        elif sql.startswith(("--", "/*"), i):
            end, comment = _comment_end(sql, i)
            token = f"/* {one_line(comment)} */" if comment else ""
            if not token:
                space, i = True, end
                continue
        else:
            end, token = i + 1, escape_text(ch)
        if space and out and out[-1] != "(" and token != ")":
            out.append(" ")
        out.append(token)
        space, i = False, end
    return "".join(out)


def synthesised_statement(table: Table) -> str:
    """`CREATE TABLE t (col TYPE NOT NULL, ...)` built from the columns SQLite reports."""
    pk = [c for c in table.columns if c.primary_key]
    parts = []
    for column in table.columns:
        words = [show_ident(column.name)]
        words += [echo_value(column.type)] if column.type else []
        words += ["NOT NULL"] if column.not_null else []
        words += ["PRIMARY KEY"] if column.primary_key and len(pk) == 1 else []
        words += [f"DEFAULT {echo_value(column.default)}"] if column.default is not None else []
        parts.append(" ".join(words))
    if len(pk) > 1:
        ordered = sorted(pk, key=lambda c: c.primary_key)
        parts.append(f"PRIMARY KEY ({', '.join(show_ident(c.name) for c in ordered)})")
    parts += [_key_clause(fk) for fk in table.foreign_keys]
    kind = "VIEW" if table.kind == "view" else "TABLE"
    return f"CREATE {kind} {show_ident(table.name)} ({', '.join(parts)})"


def _key_clause(fk: ForeignKey) -> str:
    cols = ", ".join(show_ident(c) for c in fk.columns)
    refs = ", ".join(show_ident(c) for c in fk.ref_columns)
    return f"FOREIGN KEY ({cols}) REFERENCES {show_ident(fk.ref_table)}({refs})"


def render_statement(table: Table, stored: Any, max_chars: int) -> str:
    """describe_table: the stored CREATE statement normalised (or one built from the columns).

    A view's statement may not name its columns (`SELECT *`), so they follow on a second line.
    """
    if isinstance(stored, ClippedText):
        text, hidden = normalise_statement(stored.prefix), stored.length - len(stored.prefix)
    elif isinstance(stored, str) and stored.strip():
        text, hidden = normalise_statement(stored), 0
    else:
        text, hidden = synthesised_statement(table), 0
    if len(text) > max_chars or hidden > 0:
        literal = (
            "'" + escape_text(table.name.replace("'", "''")) + "'"
            if len(table.name) <= NAME_CHARS
            else "'<the table name>'"
        )
        text = (
            text[:max_chars] + "…\n" + '... (statement cut; run_query "SELECT name, type FROM '
            f'pragma_table_info({literal})" lists every column)'
        )
    if table.kind == "view":
        text += "\ncolumns: " + ", ".join(show_ident(c.name) for c in table.columns)
    return text


# --- list_tables and foreign_keys --------------------------------------------------------------


def render_names(schema: Schema, pattern: str | None, max_names: int, max_chars: int) -> str:
    """Every table and view name on one line, comma-separated, then how many there are.

    Past max_names (or max_chars) the list is cut and says how to narrow it with a pattern.
    """
    tables = [t for t in schema.tables if pattern is None or pattern.casefold() in t.name.casefold()]
    if not tables:
        if pattern is None:
            return "the database has no tables or views"
        return (
            f"no table or view name contains '{echo_value(pattern)}'; call list_tables "
            'without "pattern" to see every name'
        )
    ordered = [t for t in tables if t.kind != "view"] + [t for t in tables if t.kind == "view"]
    names: list[str] = []
    size = 0
    for table in ordered[:max_names]:
        name = show_ident(table.name) if table.note is None else f"{show_ident(table.name)} [{table.note}]"
        size += len(name) + 2
        if names and size > max_chars:
            break
        names.append(name)
    count = _counted(ordered, len(schema.tables) if pattern is not None else None)
    if len(names) == len(ordered):
        return f"{', '.join(names)} ({count})"
    return (
        f"{', '.join(names)}, … (showing {format_count(len(names))} of {count}; call list_tables "
        'with {"pattern": "word"} to list only the names containing a word)'
    )


def _counted(tables: Sequence[Table], of_all: int | None) -> str:
    views = sum(1 for t in tables if t.kind == "view")
    parts = [plural(len(tables) - views, "table")] if len(tables) > views else []
    parts += [plural(views, "view")] if views else []
    text = " and ".join(parts)
    return text if of_all is None else f"{text} of {format_count(of_all)}"


def _link(fk: ForeignKey) -> str:
    return f"{show_ident(fk.table)}: {_key_clause(fk)}"


def render_key_links(table: Table, schema: Schema, max_chars: int) -> str:
    """foreign_keys: the table's own FOREIGN KEY clauses, then those of tables referencing it."""
    outgoing = [_link(fk) for fk in table.foreign_keys]
    incoming = [_link(fk) for fk in schema.incoming(table.name) if fk.table != table.name]
    lines = outgoing + incoming
    if not lines:
        return f"{show_ident(table.name)} has no foreign keys and no table references it"
    kept, _ = _fit(lines, max_chars)
    if len(kept) < len(lines):
        kept.append(
            f"... (showing first {len(kept)} of {len(lines)} links; join_path gives the "
            "link between two tables)"
        )
    return "\n".join(kept)

"""Texts that help the model recover: nearest real names and hints for SQLite errors."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from ..sqlite.types import Schema, Table
from ..text import ECHO_CHARS, echo_value
from .result_text import SQLITE_KEYWORDS, join_names, show_column, show_ident

LIST_ALL_UP_TO = 30  # with no near match, list every name when there are at most this many

# Functions of other SQL dialects that SQLite lacks, with the SQLite way to write them.
_FUNCTION_HINTS = (
    ("year", "strftime('%Y', col) (text; CAST(... AS INTEGER) for a number)"),
    ("month", "strftime('%m', col)"),
    ("day", "strftime('%d', col)"),
    ("now", "datetime('now')"),
    ("curdate", "date('now')"),
    ("getdate", "datetime('now')"),
    ("datediff", "julianday(a) - julianday(b) (days)"),
    ("date_format", "strftime(format, col)"),
    ("concat", "a || b"),
    ("isnull", "ifnull(a, b) or col IS NULL"),
    ("len", "length(col)"),
    ("left", "substr(col, 1, n)"),
    ("right", "substr(col, -n)"),
    ("extract", "strftime('%Y', col) and friends"),
    ("to_char", "strftime(format, col)"),
    ("string_agg", "group_concat(col, sep)"),
)
# Keywords worth suggesting for a misspelled one (`FORM` -> FROM).
_COMMON_KEYWORDS = (
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "ORDER",
    "BY",
    "HAVING",
    "JOIN",
    "LEFT",
    "INNER",
    "ON",
    "AS",
    "AND",
    "OR",
    "NOT",
    "LIMIT",
    "DISTINCT",
    "UNION",
    "BETWEEN",
    "LIKE",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "DESC",
    "ASC",
    "WITH",
)
_NO_SUCH_TABLE = re.compile(r"no such table: (?:main\.)?(.+)")
_NO_SUCH_COLUMN = re.compile(r"no such column: (.+)")
_AMBIGUOUS = re.compile(r"ambiguous column name: (.+)")
_NO_SUCH_FUNCTION = re.compile(r"no such function: (.+)")
_NEAR = re.compile(r'near "(.*)": syntax error', re.DOTALL)


def nearest_names(name: str, candidates: Sequence[str], limit: int = 3) -> tuple[str, ...]:
    """Real names closest to `name`, compared case-insensitively (difflib, then substrings)."""
    by_folded: dict[str, list[str]] = {}
    for candidate in candidates:
        by_folded.setdefault(candidate.casefold(), []).append(candidate)
    folded = name.casefold().strip()
    if not folded:
        return ()
    matches = difflib.get_close_matches(folded, list(by_folded), n=limit, cutoff=0.6)
    # difflib misses a name inside a longer one ('order' in 'order details'); short names
    # ('id') would match everything, so substrings count from three characters.
    matches += sorted(
        f
        for f in by_folded
        if f not in matches and min(len(f), len(folded)) >= 3 and (folded in f or f in folded)
    )
    found = [real for f in matches for real in sorted(by_folded[f])]
    return tuple(found[:limit])


def unknown_table_text(name: str, schema: Schema) -> str:
    """`no table 'trak'; did you mean Track?` or the list of tables to pick from."""
    lead = f"no table {_quote_given(name)}"
    matching = [t.name for t in schema.tables if t.name.casefold() == name.casefold()]
    if len(matching) > 1:
        return (
            f"{lead}; several tables differ from it only in case: "
            f"{join_names([show_ident(n) for n in matching])}; write the exact name"
        )
    near = nearest_names(name, schema.names)
    if near:
        return f"{lead}; did you mean {join_names([show_ident(n) for n in near])}?"
    if not schema.tables:
        return f"{lead}; the database has no tables"
    if len(schema.tables) <= LIST_ALL_UP_TO:
        return f"{lead}; the tables are: {', '.join(show_ident(n) for n in schema.names)}"
    return f"{lead}; call list_tables to see the table names"


def unknown_column_text(name: str, table: Table) -> str:
    """`no column 'Nme' in Track; did you mean Name?` or the table's columns."""
    lead = f"no column {_quote_given(name)} in {show_ident(table.name)}"
    columns = [c.name for c in table.columns]
    near = nearest_names(name, columns)
    if near:
        return f"{lead}; did you mean {join_names([show_ident(n) for n in near])}?"
    if len(columns) <= 2 * LIST_ALL_UP_TO:
        return f"{lead}; its columns are: {', '.join(show_ident(c) for c in columns)}"
    return f"{lead}; call describe_table to see its columns"


def find_column(table: Table, name: str) -> str | None:
    """The real name of a column of `table` matching `name` exactly or case-insensitively."""
    for column in table.columns:
        if column.name == name:
            return column.name
    folded = [c.name for c in table.columns if c.name.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def sql_error_hint(error: str, schema: Schema) -> str | None:
    """A hint that helps fix the statement SQLite rejected with `error`, or None."""
    if m := _NO_SUCH_TABLE.fullmatch(error):
        return _table_hint(m.group(1), schema)
    if m := _NO_SUCH_COLUMN.fullmatch(error):
        return _column_hint(m.group(1), schema)
    if m := _AMBIGUOUS.fullmatch(error):
        owners = _owners(m.group(1), schema)
        example = show_column(owners[0], m.group(1)) if owners else f"t.{echo_value(m.group(1))}"
        return f"several tables in the query have this column; write it with its table, e.g. {example}"
    if m := _NO_SUCH_FUNCTION.fullmatch(error):
        return _function_hint(m.group(1))
    if m := _NEAR.fullmatch(error):
        return _syntax_hint(m.group(1), schema)
    if error == "incomplete input":
        return "the statement ends too early; finish it"
    if error.startswith("only one statement"):
        return "send a single SELECT statement without a second statement after ';'"
    return None


def _quote_given(name: str) -> str:
    shown = name if len(name) <= ECHO_CHARS else name[:ECHO_CHARS] + "…"
    return "'" + echo_value(shown.replace("'", "''"), ECHO_CHARS + 20) + "'"


def _table_hint(name: str, schema: Schema) -> str:
    near = nearest_names(name, schema.names)
    if near:
        return f"did you mean {join_names([show_ident(n) for n in near])}?"
    if schema.tables and len(schema.tables) <= LIST_ALL_UP_TO:
        return f"the tables are: {', '.join(show_ident(n) for n in schema.names)}"
    return "call list_tables to see the table names (an alias must be defined in FROM)"


def _owners(column: str, schema: Schema) -> list[str]:
    return [t.name for t in schema.tables if find_column(t, column) is not None]


def _column_hint(given: str, schema: Schema) -> str:
    qualifier, _, column = given.rpartition(".")
    table = schema.find(qualifier) if qualifier else None
    if table is not None:
        near = nearest_names(column, [c.name for c in table.columns])
        if near:
            return f"did you mean {join_names([show_column(table.name, n) for n in near])}?"
        return f"{show_ident(table.name)} has the columns: " + ", ".join(
            show_ident(c.name) for c in table.columns
        )
    owners = _owners(column, schema)
    if owners:
        tables = join_names([show_ident(t) for t in owners[:5]], "and")
        more = f" and {len(owners) - 5} more" if len(owners) > 5 else ""
        where = "the table or alias before the dot" if qualifier else "the tables in FROM"
        return (
            f"{show_ident(column)} is a column of {tables}{more}, not of {where}; "
            "JOIN the table that has it or fix the qualifier"
        )
    pairs = [(t.name, c.name) for t in schema.tables for c in t.columns]
    near_columns = nearest_names(column, sorted({c for _, c in pairs}))
    if near_columns:
        suggestions = [show_column(t, c) for c in near_columns for t, c2 in pairs if c2 == c][:5]
        return f"did you mean {join_names(suggestions)}?"
    shown = echo_value(column)
    return f"if {shown} is a text value, write it in single quotes: '{shown}'"


def _function_hint(name: str) -> str:
    name = echo_value(name)
    for other, sqlite_way in _FUNCTION_HINTS:
        if name.casefold() == other:
            return f"SQLite has no {name}(); use {sqlite_way}"
    return f"SQLite has no function {name}(); use SQLite's built-in functions"


def _syntax_hint(token: str, schema: Schema) -> str:
    word = token.casefold()
    needs_quotes = [n for n in schema.names if show_ident(n) != n]
    spaced = [n for n in needs_quotes if word and word in re.split(r"[^\w]+", n.casefold())]
    if spaced:
        return (
            "names with spaces, symbols or SQL keywords need double quotes, e.g. "
            f"{join_names([show_ident(n) for n in spaced[:3]])}"
        )
    if token.upper() not in SQLITE_KEYWORDS:
        keyword = difflib.get_close_matches(token.upper(), _COMMON_KEYWORDS, n=1, cutoff=0.7)
        if keyword:
            return f"did you mean {keyword[0]}?"
    if not token:
        return "the statement ends too early; finish it"
    return f'check the SQL just before "{echo_value(token)}"'

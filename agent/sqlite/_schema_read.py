"""Reading a database's schema through a guarded connection, degrading per object and bounded in size."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from .types import Column, ForeignKey, Schema, Table

SCHEMA_NOTE_CHARS = 200  # how much of SQLite's reason an unreadable object's note keeps
# A view that expands to more table references than this is not described: SQLite would
# spend seconds expanding it (a chain of views each joining the previous one twice doubles
# at every step) before failing at its own limit of 65,535.
MAX_VIEW_REFERENCES = 10_000
_SQL_NOISE = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?(?:\*/|\Z)", re.DOTALL)
_SQL_NAME = re.compile(r'"((?:[^"]|"")*)"|`([^`]*)`|\[([^\]]*)\]|([A-Za-z_][A-Za-z0-9_$]*)')


def read_schema(conn: sqlite3.Connection, schema_chars: int, warnings: Sequence[str] = ()) -> Schema:
    """Tables and views with their columns and foreign keys, degrading per object.

    An object SQLite cannot describe (a view over a virtual table that is unsafe with
    trusted_schema=OFF, a view chain with too many references, a missing module) is kept
    with a note and no columns; every other object reads as usual. What is kept is bounded
    by `schema_chars`, so a schema of huge names cannot fill the server's memory. The
    schema's warnings are `warnings`, then one for what did not fit.
    """
    listing = conn.execute(
        "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
        "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    ).fetchall()
    budget = schema_chars
    too_wide = oversized_views(conn)
    raw: dict[str, tuple[str, list[Column], list[tuple[Any, ...]], str | None]] = {}
    dropped_tables = dropped_columns = 0
    for name, kind in listing:
        if len(name) > budget:
            dropped_tables += 1
            continue
        budget -= len(name)
        if name in too_wide:
            raw[name] = (
                kind,
                [],
                [],
                f"cannot be read: the view expands to more than {MAX_VIEW_REFERENCES:,} table references",
            )
            continue
        try:
            cols, total = _read_columns(conn, name, budget)
            fks = conn.execute(
                'SELECT id, seq, "table", "from", "to" FROM pragma_foreign_key_list(?) ORDER BY id, seq',
                (name,),
            ).fetchall()
        except sqlite3.Error as exc:
            reason = " ".join(str(exc).split())[:SCHEMA_NOTE_CHARS]
            raw[name] = (kind, [], [], f"cannot be read: {reason}")
            continue
        budget -= sum(_column_chars(c) for c in cols)
        note = None
        if len(cols) < total:
            dropped_columns += total - len(cols)
            note = (
                f"only the first {len(cols):,} of {total:,} columns are listed: the schema is "
                "larger than the server keeps"
            )
        raw[name] = (kind, cols, fks if note is None else [], note)
    tables = [
        Table(
            name,
            kind,
            tuple(cols),
            _foreign_keys(name, fks, raw),
            note,
            unreadable=note is not None and not cols and note.startswith("cannot be read"),
        )
        for name, (kind, cols, fks, note) in raw.items()
    ]
    tables.sort(key=lambda t: (t.name.casefold(), t.name))
    notes = list(warnings)
    if dropped_tables or dropped_columns:
        notes.append(
            f"the schema is larger than the {schema_chars:,} characters of names "
            f"kept per database: {dropped_tables:,} tables and {dropped_columns:,} columns are "
            "not listed (queries can still use them)"
        )
    return Schema(tuple(tables), tuple(notes))


def _read_columns(conn: sqlite3.Connection, name: str, budget: int) -> tuple[list[Column], int]:
    """The columns of one object that fit in `budget` characters, and how many it has."""
    cursor = conn.execute("SELECT * FROM pragma_table_xinfo(?)", (name,))
    cols: list[Column] = []
    total = 0
    for r in cursor:
        total += 1
        column = Column(
            name=r[1],
            type=r[2] or "",
            not_null=bool(r[3]),
            default=r[4],
            primary_key=int(r[5]),
            hidden=bool(r[6]),
        )
        size = _column_chars(column)
        if size <= budget and len(cols) == total - 1:
            cols.append(column)
            budget -= size
    return cols, total


def oversized_views(conn: sqlite3.Connection) -> frozenset[str]:
    """Views whose expansion references more than MAX_VIEW_REFERENCES tables and views."""
    sql_of = {
        name: sql or "" for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view'")
    }
    by_folded = {name.casefold(): name for name in sql_of}
    uses: dict[str, list[str]] = {}
    for name, sql in sql_of.items():
        words = (
            next(g for g in m.groups() if g is not None) for m in _SQL_NAME.finditer(_SQL_NOISE.sub(" ", sql))
        )
        uses[name] = [by_folded[w.casefold()] for w in words if w.casefold() in by_folded]
    weight: dict[str, int] = {}
    for root in sql_of:  # depth-first without recursion: chains may be thousands long
        stack = [(root, False)]
        while stack:
            name, expanded = stack.pop()
            if name in weight:
                continue
            if expanded:
                total = sum(weight.get(u, 1) for u in uses[name] if u != name) + 1
                weight[name] = min(total, MAX_VIEW_REFERENCES + 1)
                continue
            stack.append((name, True))
            stack += [(u, False) for u in uses[name] if u not in weight and u != name]
    return frozenset(n for n, w in weight.items() if w > MAX_VIEW_REFERENCES)


def _column_chars(column: Column) -> int:
    return len(column.name) + len(column.type) + len(column.default or "")


def _foreign_keys(
    table: str, rows: list[tuple[Any, ...]], raw: dict[str, tuple[Any, ...]]
) -> tuple[ForeignKey, ...]:
    grouped: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row)
    keys = []
    for parts in grouped.values():
        ref_table = parts[0][2]
        ref_cols = [p[4] for p in parts]
        if any(c is None for c in ref_cols):
            # `REFERENCES t` without columns means t's primary key.
            target = raw.get(ref_table) or next(
                (v for k, v in raw.items() if k.casefold() == ref_table.casefold()), None
            )
            pk = sorted((c for c in target[1] if c.primary_key), key=lambda c: c.primary_key) if target else []
            ref_cols = [c.name for c in pk] or ["rowid"] * len(parts)
        keys.append(ForeignKey(table, tuple(p[3] for p in parts), ref_table, tuple(ref_cols)))
    return tuple(keys)

"""Resolving hide rules on an open connection: every object of the file, read whole.

The rules are matched against sqlite_master and each table's columns as SQLite reports them,
not against the schema kept for the model (which `schema_chars` may cut): a name past that
bound is hidden all the same.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Protocol

from ._hide_resolution import FileIndex, FileObject, resolve_rules
from ._schema_read import oversized_views
from .hiding import HideRules, Withheld
from .sql_text import quote_name
from .types import Column, HideReport

PROBE_SECONDS = 5.0  # preparing a read of a view runs no rows; this only bounds a pathological one


class StatementGuard(Protocol):
    """The part of the connection's authorizer state the view probe uses."""

    hidden: bool

    def reset(self, deadline: float, withheld: Withheld | None = None, sql: str = "") -> None:
        """Start a statement under `withheld` (nothing hidden when None)."""


def resolve_on(
    conn: sqlite3.Connection, guard: StatementGuard, rules: HideRules
) -> tuple[Withheld, HideReport]:
    """`rules` resolved on an open connection whose authorizer is `guard` (nothing hidden meanwhile)."""
    guard.reset(float("inf"))
    objects, indexes = read_file_objects(conn, rules.names_columns_of)

    def reads_hidden(view: str, withheld: Withheld) -> bool:
        probe = f"SELECT 1 FROM {quote_name(view)} LIMIT 0"
        guard.reset(time.monotonic() + PROBE_SECONDS, withheld, probe)
        try:
            conn.execute(probe).fetchall()
        except sqlite3.Error:
            return guard.hidden  # another error (a broken view) is not ours to hide
        finally:
            guard.reset(float("inf"))
        return False

    return resolve_rules(rules, objects, indexes, reads_hidden)


def read_file_objects(
    conn: sqlite3.Connection, wants_columns: Callable[[str], bool]
) -> tuple[list[FileObject], list[FileIndex]]:
    """Every table, virtual table and view of the file, with its columns when
    `wants_columns(name)` (else None), and every index; SQLite's own tables (sqlite_*) are left
    out: under rules none may be read."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
        "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    ).fetchall()
    virtual = {name.casefold(): name for kind, name, sql in rows if kind == "table" and _is_virtual(sql)}
    shadows = _shadow_tables(conn, virtual)
    too_wide = oversized_views(conn)  # describing one would take SQLite seconds, then fail
    listed = conn.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index'").fetchall()
    stored = frozenset(name.casefold() for name, _, _ in listed)  # indexes with a b-tree of their own
    objects = []
    for kind, name, sql in rows:
        if kind == "table" and name.casefold() in virtual:
            kind = "virtual"
        columns = _columns(conn, name) if wants_columns(name) and name not in too_wide else None
        key = _storage_key(conn, name, columns, stored) if kind == "table" and columns else ()
        objects.append(FileObject(name, kind, sql or "", columns, shadows.get(name.casefold()), key))
    indexes = [FileIndex(name, table, _index_columns(conn, name), sql or "") for name, table, sql in listed]
    return objects, indexes


def _is_virtual(sql: str | None) -> bool:
    return (sql or "").lstrip()[:20].upper().startswith("CREATE VIRTUAL TABLE")


def _shadow_tables(conn: sqlite3.Connection, virtual: dict[str, str]) -> dict[str, str]:
    """Casefolded shadow-table name -> the virtual table whose storage it is.

    SQLite names a shadow table after its virtual table, `<vtab>_<suffix>`, and (3.37+) lists it
    as "shadow" in table_list; before that, every table named so is taken for one (hiding more,
    never less).
    """
    try:
        names = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'shadow'"
            )
        ]
    except sqlite3.Error:  # SQLite before 3.37
        names = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    owners = {}
    for name in names:
        owner = virtual.get(name.rpartition("_")[0].casefold())
        if owner is not None:
            owners[name.casefold()] = owner
    return owners


def _columns(conn: sqlite3.Connection, table: str) -> tuple[Column, ...] | None:
    try:
        rows = conn.execute(
            'SELECT name, type, "notnull", dflt_value, pk, hidden FROM pragma_table_xinfo(?)', (table,)
        ).fetchall()
    except sqlite3.Error:  # e.g. a virtual table whose module this SQLite lacks
        return None
    return tuple(
        Column(
            name=r[0],
            type=r[1] or "",
            not_null=bool(r[2]),
            default=r[3],
            primary_key=int(r[4]),
            hidden=bool(r[5]),
        )
        for r in rows
    )


def _storage_key(
    conn: sqlite3.Connection, table: str, columns: tuple[Column, ...], stored_indexes: frozenset[str]
) -> tuple[str, ...]:
    """The columns `table`'s rows are stored in order of: its rowid alias, or its WITHOUT ROWID key.

    A single primary key column with no index of its own is the rowid alias (INTEGER PRIMARY
    KEY); a primary key index that sqlite_master does not list is a WITHOUT ROWID table itself.
    """
    keyed = sorted((c for c in columns if c.primary_key), key=lambda c: c.primary_key)
    if not keyed:
        return ()
    try:
        pk = conn.execute("SELECT name FROM pragma_index_list(?) WHERE origin = 'pk'", (table,)).fetchall()
    except sqlite3.Error:  # unknown: the table's indexes already stand for it
        return ()
    if not pk:
        return (keyed[0].name,) if len(keyed) == 1 else ()
    return () if pk[0][0].casefold() in stored_indexes else tuple(c.name for c in keyed)


def _index_columns(conn: sqlite3.Connection, index: str) -> tuple[str, ...] | None:
    try:
        rows = conn.execute(
            "SELECT name FROM pragma_index_xinfo(?) WHERE name IS NOT NULL", (index,)
        ).fetchall()
    except sqlite3.Error:  # unknown, so taken as over a hidden column when its table has one
        return None
    return tuple(name for (name,) in rows)

"""The main database's b-trees: each root page resolved to its table or index and the columns its
records hold by position, for reading a statement's program (`_reads.py`).

The catalog is read from sqlite_master and the table and index pragmas, and read again when the
schema changes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Fetch = Callable[[str, tuple[Any, ...]], list[Any]]  # runs one of our own schema reads: its rows
MAIN_DATABASE = 0  # P3 of OpenRead: the database; nothing but main is attached on a guarded connection


@dataclass(frozen=True)
class Btree:
    """What a root page holds: a table or one of its indexes, its record's columns by position."""

    table: str
    columns: tuple[str | None, ...]  # by position in a record (None: an expression, an unnamed rowid)
    keys: int  # leading positions a seek compares (an index's or WITHOUT ROWID table's key)
    index: bool  # an index: positions past `keys` find the table's row
    rowid: str | None  # the table's rowid alias (INTEGER PRIMARY KEY), None without one


class BtreeCatalog:
    """The main database's root pages resolved to b-trees, re-read when the schema changes.

    Its statements are our own reads of the schema: the caller runs them with nothing withheld.
    """

    def __init__(self) -> None:
        self._version: int | None = None
        self._roots: dict[int, tuple[str, str, str]] = {}  # root page: (type, name, table)
        self._indexes: frozenset[str] = frozenset()  # indexes with a b-tree of their own
        self._trees: dict[int, Btree | None] = {}
        self._tables: dict[str, Btree] = {}
        self._stored: dict[str, bool] = {}  # folded table or view name: whether it has a b-tree
        self._virtual: frozenset[str] = frozenset()  # folded names of the virtual tables
        self._modules: frozenset[str] | None = None  # virtual table modules (None: not listed)

    @property
    def version(self) -> int | None:
        """The schema version the catalog describes."""
        return self._version

    def resolver(self, fetch: Fetch) -> Callable[[int], Btree | None]:
        """A root page's b-tree on the current schema (None for sqlite_master's own page)."""
        version = fetch("PRAGMA schema_version", ())[0][0]
        if version != self._version:
            rows = fetch(
                "SELECT rootpage, type, name, tbl_name FROM sqlite_master "
                "WHERE type IN ('table', 'index', 'view')",
                (),
            )
            self._roots = {
                root: (kind, name, table) for root, kind, name, table in rows if kind != "view" and root
            }
            self._indexes = frozenset(name for _, kind, name, _ in rows if kind == "index")
            self._stored = {name.casefold(): bool(root) for root, kind, name, _ in rows if kind != "index"}
            self._virtual = frozenset(
                name.casefold() for root, kind, name, _ in rows if kind == "table" and not root
            )
            self._trees, self._tables = {}, {}
            self._version = version
        if self._modules is None:
            self._modules = _module_names(fetch)

        def resolve(root: int) -> Btree | None:
            if root not in self._trees:
                self._trees[root] = self._read(fetch, root)
            return self._trees[root]

        return resolve

    def unread_counts(self, counted: Iterable[str], program_tables: Iterable[str]) -> set[str]:
        """Of the names the authorizer saw only counted, those no table stands behind: CTEs.

        SQLite tells the authorizer of `WITH a AS (...) SELECT count(*) FROM a` that table `a`
        is read, as it does of a table; a table's b-tree is opened by the program, a CTE's never
        is. So a counted name is a CTE when it is a table the program did not open, or no table,
        view, virtual table or schema table at all (eponymous virtual tables, json_each or
        pragma_*, stay: they are no CTE). Call after `resolver`, with that program's tables.
        """
        opened = {table.casefold() for table in program_tables}
        ctes = set()
        for name in counted:
            folded = name.casefold()
            if folded in opened or folded.startswith(("sqlite_", "pragma_")):
                continue
            btree = self._stored.get(folded)
            if btree or (btree is None and self._modules is not None and folded not in self._modules):
                ctes.add(name)
        return ctes

    def virtual_storage(self, seen: Iterable[str], program_tables: Iterable[str]) -> set[str]:
        """Of the tables the authorizer saw, the storage of a virtual table the statement reads.

        A virtual table's module reads its shadow tables (`<vtab>_<suffix>`, as FTS5 names
        `docs_content`) with statements of its own, prepared the first time this connection needs
        them: the authorizer sees them on that run only. They are the module's reads, not the
        statement's, so a statement reads the same tables on every run. A shadow table the
        program opens itself (`FROM docs_content`) is the statement's and stays. Call after
        `resolver`, with that program's tables.
        """
        names = {name.casefold(): name for name in seen}
        opened = {table.casefold() for table in program_tables}
        read_virtual = self._virtual & (opened | names.keys())
        return {
            name
            for folded, name in names.items()
            if folded not in opened and self._stored.get(folded) and folded.rpartition("_")[0] in read_virtual
        }

    def _read(self, fetch: Fetch, root: int) -> Btree | None:
        if root not in self._roots:
            return None  # sqlite_master itself (page 1)
        kind, name, table = self._roots[root]
        if table not in self._tables:
            self._tables[table] = _table_btree(fetch, table, self._indexes)
        if kind == "index":
            return _index_btree(fetch, name, self._tables[table])
        return self._tables[table]


def _module_names(fetch: Fetch) -> frozenset[str] | None:
    """The virtual table modules SQLite knows (json_each, fts5, ...): the eponymous ones are read
    by name without a schema entry. None where this build does not list them."""
    try:
        return frozenset(str(name).casefold() for (name,) in fetch("SELECT name FROM pragma_module_list", ()))
    except sqlite3.Error:
        return None


def _table_btree(fetch: Fetch, table: str, stored_indexes: frozenset[str]) -> Btree:
    """`table`'s own b-tree.

    A rowid table's record holds its columns in order, VIRTUAL generated ones last; a WITHOUT
    ROWID table is stored as its primary key index (an index with no b-tree of its own), key
    columns first. A single primary key column with no index of its own is the rowid alias.
    """
    columns = fetch("SELECT name, pk, hidden FROM pragma_table_xinfo(?) ORDER BY cid", (table,))
    pk_index = fetch("SELECT name FROM pragma_index_list(?) WHERE origin = 'pk'", (table,))
    if pk_index and pk_index[0][0] not in stored_indexes:
        rows = fetch("SELECT name, key FROM pragma_index_xinfo(?) ORDER BY seqno", (pk_index[0][0],))
        return Btree(table, tuple(name for name, _ in rows), sum(1 for _, key in rows if key), False, None)
    stored = [name for name, _, hidden in columns if hidden != 2]
    generated = [name for name, _, hidden in columns if hidden == 2]
    keyed = [name for name, pk, _ in columns if pk]
    rowid = keyed[0] if len(keyed) == 1 and not pk_index else None
    return Btree(table, tuple(stored + generated), 0, False, rowid)


def _index_btree(fetch: Fetch, name: str, table: Btree) -> Btree:
    """An index's record: its key columns, then the rowid (or the WITHOUT ROWID table's key)."""
    rows = fetch("SELECT cid, name, key FROM pragma_index_xinfo(?) ORDER BY seqno", (name,))
    columns = tuple(table.rowid if cid == -1 else column for cid, column, _ in rows)
    return Btree(table.table, columns, sum(1 for *_, key in rows if key), True, table.rowid)

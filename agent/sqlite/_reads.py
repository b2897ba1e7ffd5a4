"""What a statement reads, from its program: the tables and columns the authorizer is not told of.

SQLite calls the authorizer for each column a statement names, but matches the columns of a
USING or NATURAL join by name without a call: a table joined only through them, and every
join column, go unreported. The statement's program (`EXPLAIN`, prepared by us, never shown to
the model) opens each b-tree it reads by root page and reads columns by position; root pages
resolve to tables and indexes through sqlite_master, positions to names through
pragma_table_xinfo and pragma_index_xinfo. An index stands for its table.

A rowid is read for two reasons: as a value (a rowid alias compared or returned, a join on it)
or only to find a row (an index's entry leads to its table's row; a WITHOUT ROWID table's key
plays that part). Only the first is a read of the alias column; the registers a read fills are
followed far enough to tell the two apart.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from . import hiding
from ._btrees import MAIN_DATABASE, Btree, BtreeCatalog, Fetch
from .types import SqlValue

Read = tuple[str, str]  # (table, column)
Program = list[Sequence[Any]]  # the rows of an EXPLAIN listing
_Name = TypeVar("_Name", str, Read)  # a table, or a (table, column) pair
PROGRAMS_KEPT = 256  # statements whose program reads a connection remembers
ProgramKey = tuple[str, tuple[tuple[str, str, SqlValue], ...], bool, int, int, hiding.Withheld]


def program_key(
    sql: str,
    bound: Mapping[str, SqlValue] | tuple[()],
    own_functions: bool,
    schema_version: int,
    data_version: int,
    withheld: hiding.Withheld,
) -> ProgramKey:
    """Everything a statement's program reads depends on: its text, the values bound to it (with
    their types: 1 and 1.0 are equal keys in Python), the connection's functions (its own or the
    checked twin's), the schema, the data (statistics from ANALYZE change plans without changing
    the schema version; any commit by another connection changes `PRAGMA data_version`), and
    what the rules withhold. A new file at the path gets a new connection, with nothing remembered."""
    params = (
        tuple(sorted((name, type(value).__name__, value) for name, value in bound.items()))
        if isinstance(bound, Mapping)
        else ()
    )
    return (sql, params, own_functions, schema_version, data_version, withheld)


class KnownPrograms:
    """What the programs of a connection's last PROGRAMS_KEPT statements read, by `program_key`."""

    def __init__(self) -> None:
        self._known: OrderedDict[ProgramKey, tuple[set[str], set[Read]]] = OrderedDict()

    def get(self, key: ProgramKey) -> tuple[set[str], set[Read]] | None:
        """The tables and columns read, as copies; None when not known."""
        known = self._known.get(key)
        if known is None:
            return None
        self._known.move_to_end(key)
        return set(known[0]), set(known[1])

    def keep(self, key: ProgramKey, tables: set[str], columns: set[Read]) -> None:
        """Remember what the program of `key` reads (the oldest is forgotten past PROGRAMS_KEPT)."""
        self._known[key] = (set(tables), set(columns))
        if len(self._known) > PROGRAMS_KEPT:
            self._known.popitem(last=False)


# Opcodes that compare key registers [P3, P3+P4) with the entries of cursor P1.
_KEY_SEEKS = frozenset(
    {
        "SeekGE",
        "SeekGT",
        "SeekLE",
        "SeekLT",
        "IdxGE",
        "IdxGT",
        "IdxLE",
        "IdxLT",
        "Found",
        "NotFound",
        "NoConflict",
        "IfNoHope",
    }
)
# Opcodes that find the row whose rowid is in register P3 in cursor P1.
_ROWID_SEEKS = frozenset({"SeekRowid", "NotExists"})
_COMPARISONS = frozenset({"Eq", "Ne", "Lt", "Le", "Gt", "Ge"})
_OPENS = frozenset({"OpenRead", "ReopenIdx"})
# Cursors over data the program made itself (or a virtual table, which has no root page).
_OTHER_OPENS = frozenset({"OpenEphemeral", "OpenAutoindex", "OpenPseudo", "SorterOpen", "VOpen"})


@dataclass(frozen=True)
class _Held:
    """A register filled by a read of a table (or of one of its indexes)."""

    btree: Btree
    column: str | None
    finds_row: bool  # a rowid or key read to find a row: a read of `column` only where compared


_FOUND_ROWS = object()  # a register holding rowids the program collected itself (RowSetRead)


def statement_reads(
    explain: Callable[[], Program], fetch: Fetch, catalog: BtreeCatalog
) -> tuple[set[str], set[Read]] | None:
    """Tables and (table, column) pairs the program `explain` lists reads (None: not known).

    `explain` prepares the statement under its own guard; `fetch` runs our schema reads. Raises
    sqlite3.Error when the statement cannot be prepared.
    """
    for _ in range(2):
        resolve = catalog.resolver(fetch)
        program = explain()
        if _schema_cookie(program) in (None, catalog.version):
            return program_reads(program, resolve)
        # The program was made from the schema the connection last loaded, which another
        # connection has changed since (EXPLAIN never checks): a statement that reads a table
        # loads the new one.
        fetch("SELECT 1 FROM sqlite_master LIMIT 0", ())
    return None  # the schema keeps changing under us: the authorizer's reads stand


def counted_names(tables: Iterable[str], columns: Iterable[Read]) -> set[str]:
    """The authorizer's tables read with no column (`count(*) FROM name`)."""
    exact = {table for table, _ in columns}
    rest = [table for table in tables if table not in exact]  # usually none: nothing to fold
    if not rest:
        return set()
    named = {table.casefold() for table in exact}
    return {table for table in rest if table.casefold() not in named}


def merged(program: set[_Name], authorizer: set[_Name]) -> frozenset[_Name]:
    """The program's reads and the authorizer's, each once, in the program's (the schema's) spelling.

    The authorizer names a table only counted (`SELECT count(*) FROM CUSTOMER`) as the SQL
    spells it.
    """
    if authorizer <= program:  # each spelled as the program spells it: nothing to fold
        return frozenset(program)
    spelled = {_folded(name) for name in program}
    return frozenset(program | {name for name in authorizer if _folded(name) not in spelled})


def _folded(name: str | Read) -> Hashable:
    return name.casefold() if isinstance(name, str) else (name[0].casefold(), name[1].casefold())


def _schema_cookie(program: Program) -> int | None:
    """The schema version the program was made for (its Transaction on main), if it reads any."""
    return next((row[4] for row in program if row[1] == "Transaction" and row[2] == MAIN_DATABASE), None)


def program_reads(
    program: Iterable[Sequence[Any]], btree: Callable[[int], Btree | None]
) -> tuple[set[str], set[Read]]:
    """Tables and (table, column) pairs an EXPLAIN listing reads; `btree` resolves a root page."""
    reader = _ProgramReader(list(program), btree)
    reader.run()
    return reader.tables, reader.reads


class _ProgramReader:
    """One pass over a program, following the registers its reads fill."""

    def __init__(self, program: list[Sequence[Any]], btree: Callable[[int], Btree | None]) -> None:
        self.program = program
        self.btree = btree
        self.cursors: dict[int, Btree] = {}
        self.held: dict[int, object] = {}
        # What the program copies into an automatic index is read only where the index is
        # searched or read: SQLite copies more columns than a statement uses (of a table with
        # over 63 columns, every one past the 63rd).
        self.copied = _copied_into_autoindexes(program)
        self.autoindexes: dict[int, dict[int, object]] = {}  # cursor: {position: value}
        self.tables: set[str] = set()
        self.reads: set[Read] = set()

    def read(self, value: object) -> None:
        if isinstance(value, _Held) and value.column:
            self.reads.add((value.btree.table, value.column))

    def hold(self, register: int, value: object) -> None:
        if value is None:
            self.held.pop(register, None)
        else:
            self.held[register] = value

    def run(self) -> None:
        for row in self.program:
            address, opcode, p1, p2, p3, p4 = row[:6]
            if opcode in _OPENS:
                self.open(p1, p2, p3)
            elif opcode == "OpenDup":
                if p2 in self.cursors:
                    self.cursors[p1] = self.cursors[p2]
                if p2 in self.autoindexes:
                    self.autoindexes[p1] = self.autoindexes[p2]
            elif opcode in _OTHER_OPENS:
                self.cursors.pop(p1, None)
                self.autoindexes.pop(p1, None)
            elif opcode in ("Column", "Rowid", "IdxRowid"):
                self.column(address, opcode, p1, p2, p3)
            elif opcode == "RowSetRead":
                self.held[p3] = _FOUND_ROWS
            elif opcode in ("Copy", "SCopy", "Move"):
                count = p3 if opcode == "Move" else (p3 + 1 if opcode == "Copy" else 1)
                moved = [self.held.get(p1 + i) for i in range(max(count, 1))]
                for i, value in enumerate(moved):
                    self.hold(p2 + i, value)
            elif opcode in _ROWID_SEEKS:
                self.rowid_seek(p1, self.held.get(p3))
            elif opcode in _KEY_SEEKS:
                self.key_seek(p1, [self.held.get(p3 + i) for i in range(_int(p4))])
            elif opcode in _COMPARISONS:
                self.read(self.held.get(p1))
                self.read(self.held.get(p3))
            elif opcode == "ResultRow":
                for register in range(p1, p1 + p2):
                    self.read(self.held.get(register))

    def open(self, cursor: int, root: int, database: int) -> None:
        found = self.btree(root) if database == MAIN_DATABASE else None
        self.autoindexes.pop(cursor, None)
        if found is None:
            self.cursors.pop(cursor, None)
            return
        self.cursors[cursor] = found
        self.tables.add(found.table)

    def column(self, address: int, opcode: str, cursor: int, position: int, register: int) -> None:
        """Column P1 P2 P3, or Rowid/IdxRowid P1 P2 (register in P2)."""
        if opcode != "Column":
            position, register = -1, position
        value: object = None
        if cursor in self.autoindexes:
            fields = self.autoindexes[cursor]
            value = fields.get(max(fields, default=-1) if position < 0 else position)
        elif (tree := self.cursors.get(cursor)) is not None:
            value = _Held(tree, tree.rowid, True) if position < 0 else _record_column(tree, position)
        if address in self.copied:
            index, field = self.copied[address]
            self.autoindexes.setdefault(index, {})[field] = value
        elif isinstance(value, _Held) and not value.finds_row:
            self.read(value)
        self.hold(register, value)

    def rowid_seek(self, cursor: int, key: object) -> None:
        """SeekRowid/NotExists: the rowid compared with `key`, unless it only finds an index's row."""
        tree = self.cursors.get(cursor)
        if tree is None or _finds_own_row(key, tree):
            return
        if tree.rowid:
            self.reads.add((tree.table, tree.rowid))
        self.read(key)

    def key_seek(self, cursor: int, keys: list[object]) -> None:
        """A seek compares its key registers with the first len(keys) positions of a cursor.

        Only a seek into a table, an index or an automatic index joins one table to another:
        the program's other lookups (the rows a RIGHT JOIN matched, DISTINCT's values, an IN
        list) take their keys from what the SQL names, or from rowids kept for itself.
        """
        tree, fields = self.cursors.get(cursor), self.autoindexes.get(cursor)
        if tree is not None:
            if any(_finds_own_row(k, tree) for k in keys):
                return  # an index entry finding its WITHOUT ROWID table's row
            self.reads.update((tree.table, name) for name in tree.columns[: min(len(keys), tree.keys)] if name)
        elif fields is not None:
            for position in range(len(keys)):
                self.read(fields.get(position))
        else:
            return
        for key in keys:
            self.read(key)


def _record_column(tree: Btree, position: int) -> _Held | None:
    if position >= len(tree.columns):
        return None
    return _Held(tree, tree.columns[position], tree.index and position >= tree.keys)


def _finds_own_row(key: object, tree: Btree) -> bool:
    """True when `key` came from an index of the same table, or from the program's own rowids."""
    if key is _FOUND_ROWS:
        return True
    return isinstance(key, _Held) and key.finds_row and key.btree.index and key.btree.table == tree.table


def _copied_into_autoindexes(program: list[Sequence[Any]]) -> dict[int, tuple[int, int]]:
    """Address of each read whose value goes into an automatic index: (its cursor, field)."""
    opened: dict[int, int] = {}  # cursor: address of its OpenAutoindex
    copied: dict[int, tuple[int, int]] = {}
    for address, opcode, p1, p2, *_ in program:
        if opcode == "OpenAutoindex":
            opened[p1] = address
        elif opcode == "IdxInsert" and p1 in opened:
            makers = [
                row for row in program[opened[p1] + 1 : address] if row[1] == "MakeRecord" and row[4] == p2
            ]
            if not makers:
                continue
            start, count = makers[-1][2], makers[-1][3]
            for row in program[opened[p1] + 1 : makers[-1][0]]:
                target = row[4] if row[1] == "Column" else row[3] if row[1] == "Rowid" else None
                if target is not None and start <= target < start + count:
                    copied[row[0]] = (p1, target - start)
    return copied


def _int(p4: object) -> int:
    try:
        return int(str(p4))
    except ValueError:
        return 0

"""Plain values that cross the SQLite boundary: schema facts and query results."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# A value SQLite binds to a parameter: what a verified answer's parameters bind.
SqlValue = int | float | str | None


@dataclass(frozen=True)
class Column:
    """One column as SQLite's table_xinfo reports it."""

    name: str
    type: str
    not_null: bool
    default: str | None
    primary_key: int  # position in the primary key, 0 when not part of it
    hidden: bool = False  # generated or virtual-table hidden column


@dataclass(frozen=True)
class ForeignKey:
    """A (possibly composite) foreign key from `table` to `ref_table`."""

    table: str
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]  # resolved to the referenced primary key when omitted


@dataclass(frozen=True)
class Table:
    """A table or view with its columns and outgoing foreign keys."""

    name: str
    kind: str  # "table" or "view"
    columns: tuple[Column, ...]
    foreign_keys: tuple[ForeignKey, ...]
    # Why the object could not be read (its columns are then empty), or what of it was not
    # kept (a schema past the size bound); None for an ordinary table.
    note: str | None = None
    unreadable: bool = False  # SQLite refused to describe it: querying it fails the same way
    withheld_columns: int = 0  # columns left out because the database's owner hides them


@dataclass(frozen=True)
class HideReport:
    """What each hide rule hid on one database (for doctor and logs; never shown to the model)."""

    matches: tuple[tuple[str, tuple[str, ...]], ...]  # (rule as written, names it hid)
    derived: tuple[str, ...]  # what is hidden because it reads hidden data (views, generated
    # columns, virtual tables and their shadow tables)
    # Indexes of visible tables over a hidden column: a query without ORDER BY that SQLite
    # answers through one returns its rows in the order of the hidden values.
    indexes: tuple[str, ...] = ()
    # Hidden columns of visible tables that order the table's own rows ("Table.Column"): its
    # INTEGER PRIMARY KEY (the rowid) or a column of its WITHOUT ROWID primary key. A query
    # without ORDER BY returns such a table's rows in the order of the hidden values.
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Schema:
    """Every table and view of one database, in name order."""

    tables: tuple[Table, ...]
    warnings: tuple[str, ...] = ()  # how this database was opened, when the user should know
    hiding: HideReport | None = None  # what the hide rules hid; None when there are none
    _by_name: dict[str, Table] = field(init=False, repr=False, compare=False)
    _by_folded: dict[str, list[Table]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {t.name: t for t in self.tables}
        by_folded: dict[str, list[Table]] = {}
        for t in self.tables:
            by_folded.setdefault(t.name.casefold(), []).append(t)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_by_folded", by_folded)

    @property
    def names(self) -> tuple[str, ...]:
        """Table and view names in schema order."""
        return tuple(t.name for t in self.tables)

    def find(self, name: str) -> Table | None:
        """The table named exactly `name`, else the only case-insensitive match, else None."""
        exact = self._by_name.get(name)
        if exact is not None:
            return exact
        folded = self._by_folded.get(name.casefold(), [])
        return folded[0] if len(folded) == 1 else None

    def no_readable_tables(self) -> str | None:
        """Why no question can be answered here (no table or view can be read); None when one can."""
        if any(not t.unreadable for t in self.tables):
            return None
        if self.tables:
            names = ", ".join(t.name for t in self.tables[:5]) + (", ..." if len(self.tables) > 5 else "")
            return f"the database has no readable tables: SQLite cannot read its tables and views ({names})"
        if self.hiding is not None and any(names for _, names in self.hiding.matches):
            return "the database has no readable tables: its hide rules hide every table and view"
        return "the database has no readable tables: it has no tables or views"

    def incoming(self, name: str) -> tuple[ForeignKey, ...]:
        """Foreign keys of other tables that point at `name`."""
        return tuple(
            fk for t in self.tables for fk in t.foreign_keys if fk.ref_table.casefold() == name.casefold()
        )


class QueryStatus(StrEnum):
    """How a query ended."""

    OK = "ok"
    SQL_ERROR = "sql_error"  # SQLite rejected or failed the statement
    DENIED = "denied"  # the read-only guard refused it
    HIDDEN = "hidden"  # it reads a table or column the database's owner hides
    TIMEOUT = "timeout"  # the deadline interrupted it
    KILLED = "killed"  # the worker had to be killed (single opcode too long, or out of memory)
    CANCELLED = "cancelled"  # the caller cancelled it
    BUSY = "busy"  # another program held the file locked (a writer) past the busy wait: run it again


@dataclass(frozen=True)
class ResultCut:
    """What the worker cut from a result to fit its byte budget."""

    byte_budget: int
    total_columns: int
    columns_cut: int  # trailing columns left out
    cells_cut_to: int | None  # text cells clipped to this many characters, if they were
    rows_cut: bool  # rows left out because they did not fit


@dataclass(frozen=True)
class QueryResult:
    """Outcome of one statement: rows (up to the cap) or SQLite's own error message."""

    status: QueryStatus
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    total_rows: int = 0  # rows the statement produced, counted up to `count_cap`
    total_is_lower_bound: bool = False  # counting stopped at the cap or the deadline
    error: str | None = None
    # What it read: the authorizer's reads (CTEs under their own names, a view with the columns
    # named through it), completed from its program unless the query asked not to (`_reads`).
    tables_read: frozenset[str] = frozenset()  # tables and views
    columns_read: frozenset[tuple[str, str]] = frozenset()  # (table, column) pairs
    seconds: float = 0.0
    # Cuts made in the worker to fit `byte_budget` (bytes of the rows as JSON):
    columns_cut: int = 0  # trailing columns left out (`columns` holds the kept ones)
    cells_cut_to: int | None = None  # text cells clipped to this many characters
    rows_cut: bool = False  # rows left out although fewer than max_rows were kept
    byte_budget: int | None = None

    @property
    def ok(self) -> bool:
        """True when the statement ran to completion."""
        return self.status is QueryStatus.OK

    @property
    def truncated(self) -> bool:
        """True when more rows exist than were returned."""
        return self.total_rows > len(self.rows) or self.total_is_lower_bound

    @property
    def cut_to_fit(self) -> bool:
        """True when columns, cells or rows were cut to fit the byte budget."""
        return bool(self.columns_cut or self.cells_cut_to is not None or self.rows_cut)

    @property
    def cut(self) -> ResultCut | None:
        """The cuts made to fit the byte budget, or None when nothing was cut."""
        if not self.cut_to_fit or self.byte_budget is None:
            return None
        return ResultCut(
            self.byte_budget,
            len(self.columns) + self.columns_cut,
            self.columns_cut,
            self.cells_cut_to,
            self.rows_cut,
        )


@dataclass(frozen=True)
class BlobRef:
    """A blob cell replaced by its size (tool output never shows blob bytes)."""

    size: int

    def __str__(self) -> str:
        return f"<blob {self.size} bytes>"


@dataclass(frozen=True)
class ClippedText:
    """A text cell cut to a prefix in the worker, with its full length."""

    prefix: str
    length: int

    def __str__(self) -> str:
        return self.prefix

"""Resolving hide rules against every object of the file into a `Withheld` set and a `HideReport`.

What a rule hides, and what is hidden with it, is told in the docstring of hiding.py.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._sql_names import indexed_by, sql_mentions, sql_words
from .hiding import HideRules, Withheld, unchecked_join_risk
from .types import Column, HideReport


@dataclass(frozen=True)
class FileObject:
    """One table, virtual table or view of the file, as resolving the rules needs it."""

    name: str
    kind: str  # "table", "virtual" or "view"
    sql: str
    columns: tuple[Column, ...] | None  # None: not needed by any rule, or SQLite cannot list them
    owner: str | None = None  # the virtual table whose storage (shadow table) this table is
    # The columns its rows are stored in order of (scans return them in that order): the
    # rowid alias (INTEGER PRIMARY KEY) or a WITHOUT ROWID table's primary key; () otherwise.
    key: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileIndex:
    """One index of the file: its table and every name it is built from."""

    name: str
    table: str
    columns: tuple[str, ...] | None  # indexed (and, WITHOUT ROWID, carried) columns; None: unknown
    sql: str  # "" for the automatic index of a UNIQUE or PRIMARY KEY constraint


def resolve_rules(
    rules: HideRules,
    objects: Sequence[FileObject],
    indexes: Sequence[FileIndex],
    reads_hidden: Callable[[str, Withheld], bool],
) -> tuple[Withheld, HideReport]:
    """The names `rules` hide among the file's `objects`; `reads_hidden(view, withheld)` probes one view."""
    tables: set[str] = set()
    columns: set[tuple[str, str]] = set()
    matches: dict[str, list[str]] = {rule.text: [] for rule in rules.rules}
    derived: list[str] = []
    for obj in objects:
        _apply_rules(rules, obj, tables, columns, matches, derived)
    visible: set[tuple[str, str]] = set()  # what a USING join may name of a table with hidden columns
    for obj in objects:
        key, names = obj.name.casefold(), [c.name.casefold() for c in obj.columns or ()]
        if any((key, name) in columns for name in names):
            visible.update((key, name) for name in names if (key, name) not in columns)
    state = _Spreading(
        tables, columns, frozenset(o.name.casefold() for o in objects), indexes, frozenset(visible)
    )
    storage: dict[str, set[str]] = {}
    for obj in objects:
        if obj.owner is not None:
            storage.setdefault(obj.owner.casefold(), set()).add(obj.name.casefold())
    changed = bool(tables or columns)
    while changed:  # what reads a hidden thing may be found on the next pass
        changed = False
        for obj in objects:
            if obj.name.casefold() not in tables and _reads_hidden(obj, storage, state, reads_hidden):
                state.hide(obj.name)
                derived.append(obj.name)
                changed = True
    withheld = state.withheld()
    unsafe = sorted(
        (
            i.name
            for i in indexes
            if i.name.casefold() in withheld.indexes and not withheld.hides_table(i.table)
        ),
        key=lambda n: (n.casefold(), n),
    )
    keys = [
        f"{obj.name}.{column}"
        for obj in objects
        if not withheld.hides_table(obj.name)
        for column in obj.key
        if withheld.hides_column(obj.name, column)
    ]
    report = HideReport(
        tuple((text, tuple(hit)) for text, hit in matches.items()),
        tuple(derived),
        tuple(unsafe),
        tuple(sorted(keys, key=lambda n: (n.casefold(), n))),
    )
    return withheld, report


class _Spreading:
    """The hidden names while resolution spreads them to what reads them (a Withheld on demand)."""

    def __init__(
        self,
        tables: set[str],
        columns: set[tuple[str, str]],
        objects: frozenset[str],
        indexes: Sequence[FileIndex],
        visible: frozenset[tuple[str, str]],
    ) -> None:
        self.tables = tables
        self.risky = set(tables) | {t for t, _ in columns}
        self.visible = visible
        self._columns = frozenset(columns)
        self._objects = objects
        self._indexes = indexes
        self._withheld: Withheld | None = None

    def hide(self, name: str) -> None:
        self.tables.add(name.casefold())
        self.risky.add(name.casefold())
        self._withheld = None

    def withheld(self) -> Withheld:
        if self._withheld is None:
            tables, columns = frozenset(self.tables), self._columns
            unsafe = frozenset(
                index.name.casefold()
                for index in self._indexes
                if index.table.casefold() in tables
                or (index.columns is None and index.table.casefold() in self.risky)
                or any(
                    (index.table.casefold(), name.casefold()) in columns
                    for name in (*(index.columns or ()), *sql_words(index.sql))
                )
            )
            self._withheld = Withheld(
                tables, columns, frozenset(self.risky), self._objects, unsafe, self.visible
            )
        return self._withheld


def _apply_rules(
    rules: HideRules,
    obj: FileObject,
    tables: set[str],
    columns: set[tuple[str, str]],
    matches: dict[str, list[str]],
    derived: list[str],
) -> None:
    """Hide `obj` or some of its columns as the rules say."""
    key = obj.name.casefold()
    named = rules.naming(obj.name)
    hit = [r.text for r in named if r.column is None]
    if hit:
        tables.add(key)
        for text in hit:
            matches[text].append(obj.name)
        return
    if obj.columns is None:  # a rule may name one of the columns SQLite cannot list
        if named:
            tables.add(key)
            for rule in named:
                matches[rule.text].append(obj.name)
        return
    hidden_here = False
    for column in obj.columns:
        folded = column.name.casefold()
        for rule in named:
            if fnmatch.fnmatchcase(folded, rule.column or ""):
                matches[rule.text].append(f"{obj.name}.{column.name}")
                columns.add((key, folded))
                hidden_here = True
    if not hidden_here:
        return
    # A virtual table's module reads all its columns together (see hiding.py's docstring); a view's
    # columns are not the authorizer's to refuse (it sees the tables the view reads).
    if obj.kind in ("virtual", "view"):
        tables.add(key)
        derived.append(obj.name)
        return
    for column in obj.columns:  # a generated column may compute from a hidden one
        if column.hidden and (key, column.name.casefold()) not in columns:
            columns.add((key, column.name.casefold()))
            derived.append(f"{obj.name}.{column.name}")
    if all((key, c.name.casefold()) in columns for c in obj.columns):
        tables.add(key)  # nothing of it is left to see
        derived.append(obj.name)


def _reads_hidden(
    obj: FileObject,
    storage: dict[str, set[str]],
    state: _Spreading,
    reads_hidden: Callable[[str, Withheld], bool],
) -> bool:
    """True when reading `obj` would read something hidden (see hiding.py's module docstring)."""
    key = obj.name.casefold()
    if obj.owner is not None:
        return obj.owner.casefold() in state.tables
    if obj.kind == "virtual":
        return bool((sql_mentions(obj.sql) - {key}) & state.risky or storage.get(key, set()) & state.risky)
    if obj.kind != "view":
        return False
    if unchecked_join_risk(obj.sql, state.risky, state.visible):
        return True
    withheld = state.withheld()
    forced = {name.casefold() for name in indexed_by(obj.sql)}
    return bool(forced & withheld.indexes) or reads_hidden(obj.name, withheld)

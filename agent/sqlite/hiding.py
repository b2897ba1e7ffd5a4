"""Tables and columns the database's owner hides from the model, enforced in the worker.

Rules are `TABLE` or `TABLE.COLUMN` glob patterns (`*`, `?`, `[...]`), matched without regard
to case as SQLite matches names. They are resolved against every object of the file (never
against the schema kept for the model, which a size bound may cut) into a `Withheld` set, once
per connection and schema version:
- a table or view matched by a rule is hidden, with all its columns; a view with a column a
  rule matches is hidden whole;
- a column matched by a rule is hidden, and so is every generated column of the same table
  (its expression may read the hidden one); a table left with no column is hidden whole, and so
  is one whose columns SQLite cannot list when a rule names a table like it;
- a virtual table with a hidden column is hidden whole, with its shadow tables (its storage):
  modules such as FTS read all their columns at once (MATCH on the table, its table-valued
  form, highlight(), rank, FTS4's column filters) where the authorizer never sees a column; a
  virtual table whose definition names hidden data (an FTS index over a table's hidden column,
  an fts5vocab or fts4aux table over a hidden FTS table), or one of whose shadow tables a rule
  hides, is hidden whole too;
- a view is hidden when reading it reads anything hidden (found by preparing a read of it
  under the same authorizer the model's SQL meets), when a USING or NATURAL join of its SQL
  may compare a hidden column (`unchecked_join_risk`: those join columns never reach the
  authorizer), or when it forces an index over a hidden column (INDEXED BY);
- an index over a hidden column (or of a hidden table) cannot be named in INDEXED BY.
What a statement may do under the rules (`_refusals` words the refusals) is the authorizer's
(`_authorizer`) and the worker's checks before preparing (`_guard`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from ._sql_names import indexed_by, sql_mentions, sql_words, unchecked_joins
from .types import Column, HideReport, Schema

# Tables that describe the schema or its indexes: they would show hidden names, and
# sqlite_stat4 even holds sample values of indexed columns. Under rules these are refused, and
# so is every other table whose name starts with sqlite_ (sqlite_sequence names AUTOINCREMENT
# tables and their highest id; sqlite_stmt shows the connection's statements).
SCHEMA_TABLES = frozenset(
    {
        "sqlite_master",
        "sqlite_schema",
        "sqlite_temp_master",
        "sqlite_temp_schema",
        "sqlite_stat1",
        "sqlite_stat2",
        "sqlite_stat3",
        "sqlite_stat4",
        "dbstat",
    }
)

# Pragmas that name tables or columns (as statements or as pragma_* table-valued functions).
DESCRIBING_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "foreign_key_check",
        "table_list",
        "integrity_check",
        "quick_check",
    }
)
SCHEMA_HINT = "use list_tables and describe_table to see the tables and columns you may use"
JOIN_HINT = (
    "on this database joins must be written with ON, e.g. JOIN b ON b.id = a.b_id (not USING or NATURAL JOIN)"
)


@dataclass(frozen=True)
class HideRule:
    """One `TABLE` or `TABLE.COLUMN` pattern, as the owner wrote it."""

    text: str
    table: str  # casefolded glob
    column: str | None  # casefolded glob; None hides the whole table

    def hides_table(self, table: str) -> bool:
        """True when this rule hides all of `table`."""
        return self.column is None and fnmatch.fnmatchcase(table.casefold(), self.table)

    def hides_column(self, table: str, column: str) -> bool:
        """True when this rule hides `table`.`column` (or all of `table`)."""
        if not fnmatch.fnmatchcase(table.casefold(), self.table):
            return False
        return self.column is None or fnmatch.fnmatchcase(column.casefold(), self.column)


def parse_hide_rule(text: str, where: str = "hide rule") -> HideRule:
    """`TABLE` or `TABLE.COLUMN` (split at the first dot) into a rule; ConfigError if malformed."""
    raw = text.strip()
    table, dot, column = raw.partition(".")
    if not table.strip() or (dot and not column.strip()):
        raise ConfigError(
            f"{where}: {text!r} is not a rule; write TABLE or TABLE.COLUMN, e.g. "
            '"Customer.Email", "Invoice" or "*.password*"'
        )
    return HideRule(raw, table.strip().casefold(), column.strip().casefold() if dot else None)


@dataclass(frozen=True)
class HideRules:
    """Every hide rule of one database; empty hides nothing."""

    rules: tuple[HideRule, ...] = ()

    @classmethod
    def parse(cls, texts: Iterable[str]) -> HideRules:
        """Rules from their texts, in order, duplicates dropped."""
        seen: dict[str, HideRule] = {}
        for text in texts:
            rule = parse_hide_rule(text)
            seen.setdefault(rule.text.casefold(), rule)
        return cls(tuple(seen.values()))

    def __bool__(self) -> bool:
        return bool(self.rules)

    @property
    def texts(self) -> tuple[str, ...]:
        """The rules as written."""
        return tuple(r.text for r in self.rules)

    def hides_table(self, table: str) -> bool:
        """True when a rule hides all of `table`."""
        return any(r.hides_table(table) for r in self.rules)

    def hides_column(self, table: str, column: str) -> bool:
        """True when a rule hides `table`.`column`."""
        return any(r.hides_column(table, column) for r in self.rules)

    def naming(self, table: str) -> list[HideRule]:
        """The rules whose table part matches `table` (by name, or as a glob)."""
        by_name, globs = self._by_table
        folded = table.casefold()
        return by_name.get(folded, []) + [r for r in globs if fnmatch.fnmatchcase(folded, r.table)]

    def names_columns_of(self, table: str) -> bool:
        """True when a column rule may match a column of `table` (its columns must be read)."""
        return any(r.column is not None for r in self.naming(table))

    @functools.cached_property
    def _by_table(self) -> tuple[dict[str, list[HideRule]], list[HideRule]]:
        """Rules naming one table, by that name; rules whose table part is a glob."""
        by_name: dict[str, list[HideRule]] = {}
        globs = []
        for rule in self.rules:
            if any(ch in rule.table for ch in "*?["):
                globs.append(rule)
            else:
                by_name.setdefault(rule.table, []).append(rule)
        return by_name, globs


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


@dataclass(frozen=True)
class Withheld:
    """The rules resolved against one file: casefolded names the model may not read."""

    tables: frozenset[str] = frozenset()  # hidden tables, virtual tables and views
    columns: frozenset[tuple[str, str]] = frozenset()  # (table, column) of visible tables
    risky: frozenset[str] = frozenset()  # hidden tables and views, and tables with hidden columns
    objects: frozenset[str] = frozenset()  # every table and view of the file, hidden or not
    indexes: frozenset[str] = frozenset()  # indexes over a hidden column or of a hidden table
    visible: frozenset[tuple[str, str]] = frozenset()  # (table, column): the rest of tables with hidden columns

    def __bool__(self) -> bool:
        return bool(self.tables or self.columns)

    def hides_table(self, table: str) -> bool:
        """True when `table` (a table or view) is hidden."""
        return table.casefold() in self.tables

    def hides_column(self, table: str, column: str) -> bool:
        """True when `table`.`column` is hidden (or its table is)."""
        folded = table.casefold()
        return folded in self.tables or (folded, column.casefold()) in self.columns


def unchecked_join_risk(
    sql: str, risky: frozenset[str] | set[str], visible: frozenset[tuple[str, str]]
) -> bool:
    """True when a USING or NATURAL join of `sql` may compare a hidden column.

    SQLite matches those join columns by name without asking the authorizer. A FROM clause that
    names no table with hidden parts (`risky`) is safe, and so is a USING whose every column is
    a `visible` column of each such table it names (a table has one column of a name, so that
    one is not hidden). A NATURAL join joins on names the clause does not write: never safe there.
    The decision rests on what the model may know (which tables have hidden parts, their
    visible columns), so a refusal confirms no hidden name.
    """
    for join in unchecked_joins(sql):
        tables = join.names & risky
        if tables and (
            join.natural or any((table, column) not in visible for table in tables for column in join.using)
        ):
            return True
    return False


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
    # A virtual table's module reads all its columns together (see the docstring); a view's
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
    """True when reading `obj` would read something hidden (see the module docstring)."""
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


def hiding_findings(report: HideReport) -> tuple[tuple[bool, str], ...]:
    """What the hide rules did on one database, for the operator: (is a warning, text) lines.

    One text for `doctor` and the server's start-up log: a rule that hid nothing is probably a
    typo, and an index over a hidden column, or a hidden key a table's rows are stored by, leaks
    the order of its values.
    """
    lines: list[tuple[bool, str]] = []
    for rule, names in report.matches:
        lines.append(
            (False, f"hide rule '{rule}' hides {', '.join(names)}")
            if names
            else (
                True,
                f"hide rule '{rule}' matches no table or column; check its spelling "
                "(rules are TABLE or TABLE.COLUMN globs, any case)",
            )
        )
    if report.derived:
        lines.append((False, f"also hidden because they read hidden data: {', '.join(report.derived)}"))
    if report.indexes:
        lines.append(
            (
                True,
                f"indexes over hidden columns: {', '.join(report.indexes)}; a query without "
                "ORDER BY that SQLite answers through one returns rows in the order of the "
                "hidden values (and LIMIT picks by them): drop those indexes, or serve a copy "
                "without them, if that order is secret too",
            )
        )
    if report.keys:
        lines.append(
            (
                True,
                f"hidden keys that order their tables' rows: {', '.join(report.keys)} (an "
                "INTEGER PRIMARY KEY, or a WITHOUT ROWID table's primary key); a query "
                "without ORDER BY returns those tables' rows in the order of the hidden "
                "values (and LIMIT picks by them): serve a copy that stores the rows in "
                "another order, or without that key, if that order is secret too",
            )
        )
    return tuple(lines)


def filter_schema(schema: Schema, withheld: Withheld, report: HideReport) -> Schema:
    """`schema` without hidden tables, views and columns, and without links that touch them."""
    if not withheld:
        return dataclasses.replace(schema, hiding=report)
    kept = []
    for table in schema.tables:
        if withheld.hides_table(table.name):
            continue
        columns = tuple(c for c in table.columns if not withheld.hides_column(table.name, c.name))
        links = tuple(
            fk
            for fk in table.foreign_keys
            if not withheld.hides_table(fk.ref_table)
            and not any(withheld.hides_column(table.name, c) for c in fk.columns)
            and not any(withheld.hides_column(fk.ref_table, c) for c in fk.ref_columns)
        )
        kept.append(
            dataclasses.replace(
                table, columns=columns, foreign_keys=links, withheld_columns=len(table.columns) - len(columns)
            )
        )
    return dataclasses.replace(schema, tables=tuple(kept), hiding=report)

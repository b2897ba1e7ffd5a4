"""Tables and columns the database's owner hides from the model, enforced in the worker.

Rules are `TABLE` or `TABLE.COLUMN` glob patterns (`*`, `?`, `[...]`), matched without regard
to case as SQLite matches names. They are resolved against every object of the file (never
against the schema kept for the model, which a size bound may cut) into a `Withheld` set, once
per connection and schema version (`_hide_resolution`):
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
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ConfigError
from ._sql_names import unchecked_joins
from .types import HideReport, Schema

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


NOTHING_WITHHELD = Withheld()  # what a statement without rules runs under (frozen: one is shared)


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

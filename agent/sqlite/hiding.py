"""Tables and columns the database's owner hides from the model, enforced in the worker.

Rules are `TABLE` or `TABLE.COLUMN` glob patterns (`*`, `?`, `[...]`), matched without regard
to case as SQLite matches names. They are resolved against the real schema into a `Withheld`
set once per connection and schema version:
- a table matched by a rule is hidden, with all its columns;
- a column matched by a rule is hidden, and so is every generated column of the same table
  (its expression may read the hidden one); a table left with no column is hidden whole;
- a view is hidden when reading it reads anything hidden (found by preparing a read of it
  under the same authorizer the model's SQL meets), or when its SQL joins with USING or
  NATURAL (those join columns never reach the authorizer) and mentions a hidden name.
The authorizer then refuses any statement that reads a hidden table, view or column, any read
of sqlite_schema, and the pragmas that describe tables; USING/NATURAL joins are refused
before preparing, because SQLite resolves their columns without asking the authorizer.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..errors import ConfigError
from .sql_text import skip_comment, skip_quoted
from .types import HideReport, Schema

# Tables that describe the schema or its indexes: they would show hidden names, and
# sqlite_stat4 even holds sample values of indexed columns.
SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master",
                           "sqlite_temp_schema", "sqlite_stat1", "sqlite_stat2", "sqlite_stat3",
                           "sqlite_stat4", "dbstat"})
# Pragmas that name tables or columns (as statements or as pragma_* table-valued functions).
DESCRIBING_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
     "foreign_key_list", "foreign_key_check", "table_list", "integrity_check", "quick_check"}
)
SCHEMA_HINT = "use list_tables and describe_table to see the tables and columns you may use"
JOIN_HINT = ("on this database joins must be written with ON, e.g. "
             "JOIN b ON b.id = a.b_id (not USING or NATURAL JOIN)")


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
        raise ConfigError(f"{where}: {text!r} is not a rule; write TABLE or TABLE.COLUMN, e.g. "
                          "\"Customer.Email\", \"Invoice\" or \"*.password*\"")
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


@dataclass(frozen=True)
class Withheld:
    """The rules resolved against one schema: casefolded names the model may not read."""

    tables: frozenset[str] = frozenset()  # hidden tables and views
    columns: frozenset[tuple[str, str]] = frozenset()  # (table, column) of visible tables
    risky: frozenset[str] = frozenset()  # hidden tables and views, and tables with hidden columns

    def __bool__(self) -> bool:
        return bool(self.tables or self.columns)

    def hides_table(self, table: str) -> bool:
        """True when `table` (a table or view) is hidden."""
        return table.casefold() in self.tables

    def hides_column(self, table: str, column: str) -> bool:
        """True when `table`.`column` is hidden (or its table is)."""
        folded = table.casefold()
        return folded in self.tables or (folded, column.casefold()) in self.columns


_WORD = re.compile(r"[A-Za-z_\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*")


def _tokens(sql: str) -> Iterator[tuple[bool, str]]:
    """(quoted, casefolded name) for each identifier or keyword of `sql`; literals and comments skipped."""
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        # Comments only: SQLite reads whitespace outside ASCII as part of a name, as _WORD does.
        if (end := skip_comment(sql, i)) > i:
            i = end
        elif ch in "'\"`[":
            close = "]" if ch == "[" else ch
            end = skip_quoted(sql, i, close)
            if ch != "'":
                yield True, sql[i + 1:end - 1].replace(close * 2, close).casefold()
            i = end
        elif match := _WORD.match(sql, i):
            yield False, match.group().casefold()
            i = match.end()
        else:
            i += 1


def sql_names(sql: str) -> frozenset[str]:
    """Casefolded identifiers and keywords of `sql` (quoted ones unquoted)."""
    return frozenset(name for _, name in _tokens(sql))


def uses_unchecked_join(sql: str) -> bool:
    """True when `sql` joins with USING or NATURAL, whose columns SQLite never authorizes."""
    return any(not quoted and name in ("using", "natural") for quoted, name in _tokens(sql))


def resolve_rules(rules: HideRules, schema: Schema, view_sql: Mapping[str, str],
                  reads_hidden: Callable[[str, Withheld], bool]) -> tuple[Withheld, HideReport]:
    """The names `rules` hide on `schema`; `reads_hidden(view, withheld)` probes one view."""
    tables: set[str] = set()
    columns: set[tuple[str, str]] = set()
    matches: dict[str, list[str]] = {rule.text: [] for rule in rules.rules}
    derived: list[str] = []
    for table in schema.tables:
        if table.kind != "table":
            continue
        hit = [r.text for r in rules.rules if r.hides_table(table.name)]
        if hit:
            tables.add(table.name.casefold())
            for text in hit:
                matches[text].append(table.name)
            continue
        hidden_here = False
        for column in table.columns:
            for rule in rules.rules:
                if rule.column is not None and rule.hides_column(table.name, column.name):
                    matches[rule.text].append(f"{table.name}.{column.name}")
                    columns.add((table.name.casefold(), column.name.casefold()))
                    hidden_here = True
        if hidden_here:
            for column in table.columns:  # a generated column may compute from a hidden one
                key = (table.name.casefold(), column.name.casefold())
                if column.hidden and key not in columns:
                    columns.add(key)
                    derived.append(f"{table.name}.{column.name}")
            if all((table.name.casefold(), c.name.casefold()) in columns for c in table.columns):
                tables.add(table.name.casefold())  # nothing of it is left to see
                derived.append(table.name)
    withheld = _withheld(tables, columns)
    views = [t.name for t in schema.tables if t.kind == "view"]
    changed = True
    while changed and withheld:  # a view over a hidden view is found on the next pass
        changed = False
        for view in views:
            if view.casefold() in tables:
                continue
            sql = view_sql.get(view, "")
            if ((uses_unchecked_join(sql) and sql_names(sql) & withheld.risky)
                    or reads_hidden(view, withheld)):
                tables.add(view.casefold())
                derived.append(view)
                withheld = _withheld(tables, columns)
                changed = True
    report = HideReport(tuple((text, tuple(names)) for text, names in matches.items()),
                        tuple(derived))
    return withheld, report


def quote_name(name: str) -> str:
    """`name` as a double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


class StatementGuard(Protocol):
    """The part of the connection's authorizer state the view probe uses."""

    hidden: bool

    def reset(self, deadline: float, withheld: Withheld | None = None, sql: str = "") -> None:
        """Start a statement under `withheld` (nothing hidden when None)."""


PROBE_SECONDS = 5.0  # preparing a read of a view runs no rows; this only bounds a pathological one


def resolve_on(conn: sqlite3.Connection, guard: StatementGuard, rules: HideRules,
               schema: Schema) -> tuple[Withheld, HideReport]:
    """`rules` resolved on an open connection whose authorizer is `guard`."""
    view_sql = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view'").fetchall())

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

    return resolve_rules(rules, schema, view_sql, reads_hidden)


def _withheld(tables: set[str], columns: set[tuple[str, str]]) -> Withheld:
    risky = frozenset(tables) | frozenset(t for t, _ in columns)
    return Withheld(frozenset(tables), frozenset(columns), risky)


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
            fk for fk in table.foreign_keys
            if not withheld.hides_table(fk.ref_table)
            and not any(withheld.hides_column(table.name, c) for c in fk.columns)
            and not any(withheld.hides_column(fk.ref_table, c) for c in fk.ref_columns))
        kept.append(dataclasses.replace(table, columns=columns, foreign_keys=links,
                                        withheld_columns=len(table.columns) - len(columns)))
    return dataclasses.replace(schema, tables=tuple(kept), hiding=report)


def hidden_read_reason(withheld: Withheld, table: str, column: str | None, source: str | None,
                       named: frozenset[str]) -> str | None:
    """Why reading `table`.`column` is refused (None: allowed); `named` are the SQL's own names.

    The text names a hidden table or column only when the SQL itself names it, so a refusal
    never tells the model a name it did not write.
    """
    if table.casefold() in SCHEMA_TABLES:
        return f"{table} cannot be read on this database; {SCHEMA_HINT}"
    source_named = source is not None and source.casefold() in named
    hidden_view = source is not None and withheld.hides_table(source)
    if withheld.hides_table(table) or hidden_view:
        if withheld.hides_table(table) and table.casefold() in named and not hidden_view:
            return (f"{table} is not available (hidden by the database's owner); leave it out "
                    "of the query")
        if source_named:
            return (f"{source} reads data hidden by the database's owner; leave it out of the "
                    "query")
        return f"the query reads a table hidden by the database's owner; {SCHEMA_HINT}"
    if column is None or not withheld.hides_column(table, column):
        return None
    if column.casefold() in named:
        return (f"column {table}.{column} is not available (hidden by the database's owner); "
                "leave it out of the query")
    if source_named and source is not None:
        return (f"{source} reads columns of {table} hidden by the database's owner; select "
                f"only the columns you need from {table} by name (describe_table {table} lists them)")
    return (f"{table} has columns hidden by the database's owner, so SELECT * cannot read it; "
            f"name the columns you need (describe_table {table} lists them)")

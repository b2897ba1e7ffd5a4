"""What a statement is told when hide rules refuse it.

A hidden table, view, column or index answers exactly as SQLite answers one that does not
exist (`no such table: Invoice`, `no such column: c.Email`, `no such index: ...`), as written
in the statement, so the model's hints treat it as missing and a guessed name is not confirmed.
A refusal that reveals no hidden name (`SELECT *` on a table with hidden columns, SQLite's own
tables, EXPLAIN, USING joins) says what to write instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ._sql_names import indexed_by, written_column, written_table
from .hiding import JOIN_HINT, SCHEMA_HINT, SCHEMA_TABLES, Withheld, unchecked_join_risk
from .sql_text import first_keyword

# Eponymous virtual tables that compute from their arguments only, readable under rules
# (pragma_* ones are judged as the pragma they run). Every other one is refused: sqlite_stmt,
# dbstat, sqlite_dbpage, bytecode() and tables_used() show the connection, pages or plans.
_ARGUMENT_TABLES = frozenset({"json_each", "json_tree", "jsonb_each", "jsonb_tree", "generate_series"})
EXPLAIN_TEXT = "EXPLAIN cannot be used on this database; run the SELECT itself"


@dataclass(frozen=True)
class Refusal:
    """Why a statement is refused under the rules."""

    text: str
    missing: bool = False  # worded as SQLite's own error for a missing name (an SQL error)


def read_refusal(
    withheld: Withheld,
    table: str,
    column: str | None,
    source: str | None,
    sql: str,
    ctes: Callable[[], frozenset[str]] = frozenset,
) -> Refusal | None:
    """Why `sql` may not read `table`.`column` (through view `source`); None when it may.

    `ctes` gives the names the statement's WITH clauses define that no table-valued function
    has: SQLite reports a CTE read without a column (`count(*) FROM r`) as a read of `r`, and
    what the CTE itself reads is authorized on its own.
    """
    folded = table.casefold()
    if folded.startswith("sqlite_") or folded in SCHEMA_TABLES:
        return Refusal(f"{table} cannot be read on this database; {SCHEMA_HINT}")
    if folded not in withheld.objects and folded not in _ARGUMENT_TABLES and not folded.startswith("pragma_"):
        if not column and folded in ctes():
            return None
        return Refusal(f"{table} cannot be read on this database; {SCHEMA_HINT}")
    hidden_column = bool(column) and withheld.hides_column(table, column or "")
    hidden_source = source is not None and withheld.hides_table(source)
    if not (hidden_column or hidden_source or withheld.hides_table(table)):
        return None
    if written := written_table(sql, withheld.tables):
        return Refusal(f"no such table: {written}", missing=True)
    if hidden_column and column and (written := written_column(sql, column)):
        return Refusal(f"no such column: {written}", missing=True)
    if hidden_column and not withheld.hides_table(table) and not hidden_source:
        return Refusal(
            f"{table} has columns hidden by the database's owner, so SELECT * cannot "
            f"read it; name the columns you need (describe_table {table} lists them)"
        )
    return Refusal(f"the query reads data hidden by the database's owner; {SCHEMA_HINT}")


def statement_refusal(withheld: Withheld, sql: str) -> Refusal | None:
    """Why `sql` is refused before it is prepared: what SQLite resolves without the authorizer.

    EXPLAIN shows indexes and columns by name; INDEXED BY names an index; USING and NATURAL
    join columns are matched by name without asking the authorizer.
    """
    if not withheld:
        return None
    if first_keyword(sql) == "explain":
        return Refusal(EXPLAIN_TEXT)
    forced = [name for name in indexed_by(sql) if name.casefold() in withheld.indexes]
    unchecked = unchecked_join_risk(sql, withheld.risky, withheld.visible)
    if not (forced or unchecked):
        return None
    if written := written_table(sql, withheld.tables):
        return Refusal(f"no such table: {written}", missing=True)
    if forced:
        return Refusal(f"no such index: {forced[0]}", missing=True)
    return Refusal(JOIN_HINT)

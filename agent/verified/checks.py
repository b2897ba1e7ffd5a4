"""What SQL must do to be served as a verified answer, checked under the database's hide rules.

`sql_refusal` runs an entry's SQL (with its parameters bound, for a template) in the guarded
worker under the rules, to its first row; `template_sample` gives a template's slots the values
it is checked with: a sample of each type within its bounds, and for a `value` one real value
of its column, read under the same rules, so a hidden column fails as a missing one does.

Nothing here runs SQL without the database's rules. Under them a hidden name fails as a
missing one does, and that is all a refusal's `reason` says, so it may be told to whoever
wrote the SQL; only the operator's log line (`logged`) adds the hidden names the SQL writes,
found from its text (`Database.hidden_names`), never from a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..golden_file import SlotType
from ..sqlite import Database, QueryResult, QueryStatus, SqlValue
from .slot_types import sample_value
from .templates import Template, value_sample_sql

CHECK_COUNT_CAP = 1  # a check runs the SQL to its first row: enough to prove it runs


@dataclass(frozen=True)
class SqlRefusal:
    """Why SQL may not be served: what anyone may be told, and what the operator's log adds."""

    reason: str  # the outcome under the rules: a hidden name fails here as a missing one does
    hidden: tuple[str, ...] = ()  # operator only: hidden names the SQL writes (Database.hidden_names)
    subject: str = "its SQL"  # what wrote the hidden names: the SQL, or a value parameter's column

    @property
    def logged(self) -> str | None:
        """The reason as the operator's log gives it, when it has more to say than `reason`."""
        if not self.hidden:
            return None
        return f"{self.subject} names {', '.join(self.hidden)}, which the hide rules hide ({self.reason})"


def sql_refusal(
    database: Database, sql: str, params: Mapping[str, SqlValue] | None = None
) -> SqlRefusal | None:
    """Why `sql` may not be served as a verified answer on `database`, or None when it may.

    It must run under the database's hide rules in the guarded worker (to its first row), with
    `params` bound, and the tables and columns the worker reports it read must all be visible.
    It runs under the rules only: they refuse a statement naming hidden data before it runs,
    whatever the data holds, so the outcome (and `reason`) is the same for a hidden name as for
    a missing one and for any condition on hidden values.
    """
    result = database.query(sql, max_rows=0, count_cap=CHECK_COUNT_CAP, params=params)
    if result.ok:
        hidden = hidden_reads(database, result)
        # The worker refuses these before they run; should one ever run, it is never served.
        return None if hidden is None else SqlRefusal("its SQL reads data the hide rules hide", (hidden,))
    return SqlRefusal(f"its SQL {failure_text(result)}", _named(database, sql, result))


def template_sample(database: Database, template: Template) -> dict[str, SqlValue] | SqlRefusal:
    """The values a template's SQL is checked with: a sample of each slot's type within its
    bounds, and for a `value` slot the first value its column holds (read under the rules)."""
    sample: dict[str, SqlValue] = {}
    for slot in template.slots:
        spec = slot.spec
        if spec.type is not SlotType.VALUE:
            sample[slot.name] = sample_value(spec.type, minimum=spec.min, maximum=spec.max)
            continue
        sql = value_sample_sql(spec.column or "")
        subject = f"its parameter {slot.name}"
        said = f"{subject} is a value of {spec.column}, but"
        result = database.query(sql, max_rows=1, count_cap=CHECK_COUNT_CAP)
        if not result.ok:  # a hidden column fails here as a missing one does
            return SqlRefusal(
                f"{said} reading that column {failure_text(result)}", _named(database, sql, result), subject
            )
        hidden = hidden_reads(database, result)
        if hidden is not None:  # the worker refuses these before they run
            return SqlRefusal(f"{said} reading that column reads data the hide rules hide", (hidden,), subject)
        value = result.rows[0][0] if result.rows else None
        if not isinstance(value, int | float | str):
            return SqlRefusal(f"{said} that column holds no text or number to check the SQL with")
        sample[slot.name] = value
    return sample


def hidden_reads(database: Database, result: QueryResult) -> str | None:
    """The first hidden table or column a query read (`table Invoice`, `column Customer.Email`)."""
    rules = database.hide
    if not rules:
        return None
    for table in sorted(result.tables_read):
        if rules.hides_table(table):
            return f"table {table}"
    for table, column in sorted(result.columns_read):
        if rules.hides_column(table, column):
            return f"column {table}.{column}"
    return None


def failure_text(result: QueryResult) -> str:
    """How a failed check is said: `fails: no such column: x`, `ran past the query time limit ...`."""
    if result.status is QueryStatus.DENIED:
        return f"is refused by the read-only guard ({result.error})"
    if result.status in (QueryStatus.TIMEOUT, QueryStatus.KILLED):
        return f"ran past the query time limit ({result.error}); it could not be served within it"
    return f"fails: {result.error or result.status.value}"


def _named(database: Database, sql: str, result: QueryResult) -> tuple[str, ...]:
    """The hidden names `sql` writes, for the operator's log, when it failed as a hidden name fails."""
    return database.hidden_names(sql) if result.status in (QueryStatus.SQL_ERROR, QueryStatus.HIDDEN) else ()

"""What every tool implementation shares: settings, outcomes, the queries it asks for, lookups."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from ..sqlite import QueryResult, QueryStatus, Schema, Table
from ..sqlite.sql_text import quote_name
from ._args import clamp_limit, unquote_name
from ._hints import find_column, sql_error_hint, unknown_column_text, unknown_table_text
from ._schema_text import render_unreadable
from .environment import DEFAULT_TRAINED_TEXTS, TrainedTexts
from .result_text import render_query_failure, show_ident


@dataclass(frozen=True)
class ToolSettings:
    """Output caps for tool results, and the authors' own texts where the episode has them."""

    sample_rows: int = 10
    max_sample_rows: int = 20
    query_rows: int = 50
    distinct_values: int = 20
    max_distinct_values: int = 50
    cell_chars: int = 100
    result_chars: int = 4_000
    row_count_cap: int = 100_000  # describe_table/sample_rows count a table's rows up to this
    row_count_timeout: float = 1.0  # seconds; a slower count is left out of the text
    query_bytes: int = 65_536  # what a tool's rows may weigh when they leave the SQLite worker
    # The trained environment shows these whole: every table name, a table's CREATE statement.
    list_names: int = 500  # list_tables: names listed before the list is cut (use a pattern)
    long_text_chars: int = 16_000  # list_tables / describe_table text cap
    texts: TrainedTexts = DEFAULT_TRAINED_TEXTS  # the episode's prompts carry them (PromptSet.texts)


DEFAULT_TOOL_SETTINGS = ToolSettings()


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call returned."""

    text: str  # exactly what the model sees
    ok: bool  # False for any error text (unknown table, bad args, SQL error...)
    tables: frozenset[str]  # real table names this call looked at / read (for evaluation)
    query: QueryResult | None = None  # for run_query and submit_sql: the raw result


@dataclass(frozen=True)
class QuerySpec:
    """One statement a tool needs run, with its limits."""

    sql: str
    max_rows: int
    cell_limit: int | None = None
    timeout: float | None = None
    count_cap: int | None = None  # rows counted in all (None: the engine's default)
    # What it read, completed from its program: only for the model's own SQL; a tool's own
    # query of one table needs no more than the authorizer's reads.
    reads: bool = False

    @property
    def options(self) -> dict[str, Any]:
        """The keyword arguments of Database.query/aquery for this statement."""
        return {
            "max_rows": self.max_rows,
            "cell_limit": self.cell_limit,
            "timeout": self.timeout,
            "count_cap": self.count_cap,
            "reads": self.reads,
        }


Steps = Generator[QuerySpec, QueryResult, ToolOutcome]


@dataclass(frozen=True)
class ToolContext:
    """What an implementation runs against: the schema, the caps and the statement time limit."""

    schema: Schema
    settings: ToolSettings
    query_timeout: float


def find_table(schema: Schema, given: str) -> Table | ToolOutcome:
    """The table the model named (in any form it copies), or the not-found outcome."""
    bare = unquote_name(given)
    table = schema.find(given) or schema.find(bare)
    if table is None:
        return ToolOutcome(unknown_table_text(bare or given, schema), False, frozenset())
    return table


def real_tables(schema: Schema, names: frozenset[str]) -> frozenset[str]:
    """The schema's own spelling of the tables a statement read."""
    return frozenset(t.name for n in names if (t := schema.find(n)) is not None)


def with_note(text: str, note: str | None) -> str:
    """`text`, then `note` on its own line when there is one."""
    return text if note is None else f"{text}\n{note}"


def read_failure(ctx: ToolContext, table: Table, result: QueryResult) -> ToolOutcome:
    """A tool's own query of `table` failed: say so, and where the model can filter instead."""
    slow = result.status in (QueryStatus.TIMEOUT, QueryStatus.KILLED)
    # The model cannot add WHERE to this tool's query; run_query is where it can.
    hint = (
        "the table is too large to scan in time; use run_query with a WHERE filter and LIMIT" if slow else None
    )
    text = f"cannot read {show_ident(table.name)}: " + render_query_failure(result, hint, ctx.query_timeout)
    return ToolOutcome(text, False, frozenset([table.name]))


def sample_query(table: Table, limit: int) -> str:
    """`SELECT * FROM t LIMIT n`; with hidden columns (refused by *), the visible ones by name."""
    shown = (
        "*"
        if not table.withheld_columns
        else ", ".join(quote_name(c.name) for c in table.columns if not c.hidden)
    )
    return f"SELECT {shown} FROM {quote_name(table.name)} LIMIT {limit}"


def readable_table(schema: Schema, given: str) -> Table | ToolOutcome:
    """The table `given` names when its rows can be read; else the outcome saying why not."""
    table = find_table(schema, given)
    if isinstance(table, ToolOutcome) or not table.unreadable:
        return table
    return ToolOutcome(render_unreadable(table), False, frozenset([table.name]))


def column_named(table: Table, given: str) -> str | ToolOutcome:
    """The column of `table` that `given` names (quoted or bare); else the outcome with near names."""
    bare = unquote_name(given)
    column = find_column(table, given) or find_column(table, bare)
    if column is None:
        return ToolOutcome(unknown_column_text(bare or given, table), False, frozenset([table.name]))
    return column


def distinct_query(table: Table, column: str, limit: int, cell_chars: int) -> QuerySpec:
    """The values of `column` with their counts, most frequent first.

    No LIMIT: the engine counts the groups past the first `limit`, which is the total.
    """
    return QuerySpec(
        f"SELECT {quote_name(column)}, count(*) FROM {quote_name(table.name)} GROUP BY 1 ORDER BY 2 DESC, 1",
        max_rows=limit,
        cell_limit=cell_chars,
    )


RenderValues = Callable[[Table, str, QueryResult, ToolSettings], str]


DirectTool = Callable[[ToolContext, dict[str, Any]], ToolOutcome]  # a tool that needs no query
QueryTool = Callable[[ToolContext, dict[str, Any]], Steps]  # a tool that yields the queries it needs


def count_table_rows(
    ctx: ToolContext,
    table: Table,
) -> Generator[QuerySpec, QueryResult, tuple[int, bool] | None]:
    """(rows, exact) of `table`, counted up to the cap; None when the count is too slow or fails."""
    cap = ctx.settings.row_count_cap
    result = yield QuerySpec(
        f"SELECT count(*) FROM (SELECT 1 FROM {quote_name(table.name)} LIMIT {cap + 1})",
        max_rows=1,
        timeout=ctx.settings.row_count_timeout,
    )
    if not result.ok or not result.rows:
        return None  # too slow or unreadable: the text simply leaves the count out
    count = int(result.rows[0][0])
    return (min(count, cap), count <= cap)


def sample_rows_tool(
    render: Callable[[Table, QueryResult, tuple[int, bool] | None, ToolSettings], str], *, count_rows: bool
) -> QueryTool:
    """sample_rows for an environment: the same lookup and query, its text from `render`.

    With `count_rows` a full sample is followed by a count of the table's rows, which `render`
    gets as (rows, exact); without, it gets None and the engine counts no further than the sample.
    """

    def sample_rows(ctx: ToolContext, args: dict[str, Any]) -> Steps:
        table = find_table(ctx.schema, args["table_name"])
        if isinstance(table, ToolOutcome):
            return table
        s = ctx.settings
        limit, note = clamp_limit(args["limit"], s.sample_rows, s.max_sample_rows)
        result = yield QuerySpec(
            sample_query(table, limit),
            max_rows=limit,
            cell_limit=s.cell_chars,
            count_cap=None if count_rows else limit,
        )
        if not result.ok:
            return read_failure(ctx, table, result)
        total: tuple[int, bool] | None = None
        if count_rows:
            total = (
                (len(result.rows), True)
                if len(result.rows) < limit
                else (yield from count_table_rows(ctx, table))
            )
        return ToolOutcome(
            with_note(render(table, result, total, s), note),
            True,
            frozenset([table.name]) | real_tables(ctx.schema, result.tables_read),
        )

    return sample_rows


def list_tables_tool(render: Callable[[ToolContext, str | None], str]) -> DirectTool:
    """list_tables for an environment: the same pattern match, its text from `render`."""

    def list_tables(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
        pattern = args["pattern"]
        matched = pattern is None or any(pattern.casefold() in n.casefold() for n in ctx.schema.names)
        return ToolOutcome(render(ctx, pattern), matched, frozenset())

    return list_tables


def foreign_keys_tool(render: Callable[[Table, Schema, int], str]) -> DirectTool:
    """foreign_keys for an environment: the same lookup, its text from `render(table, schema, chars)`."""

    def foreign_keys(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
        table = find_table(ctx.schema, args["table_name"])
        if isinstance(table, ToolOutcome):
            return table
        return ToolOutcome(render(table, ctx.schema, ctx.settings.result_chars), True, frozenset([table.name]))

    return foreign_keys


def run_query_tool(
    query: Callable[[str, ToolSettings], QuerySpec],
    render_rows: Callable[[QueryResult, ToolSettings], str],
    render_failure: Callable[[QueryResult, str | None, float, ToolSettings], str],
) -> QueryTool:
    """run_query for an environment: its row limits from `query`, its texts from the renderers."""

    def run_query(ctx: ToolContext, args: dict[str, Any]) -> Steps:
        result = yield query(args["sql"], ctx.settings)
        tables = real_tables(ctx.schema, result.tables_read)
        if result.ok:
            return ToolOutcome(render_rows(result, ctx.settings), True, tables, result)
        hint = sql_error_hint(result.error or "", ctx.schema) if result.error else None
        return ToolOutcome(render_failure(result, hint, ctx.query_timeout, ctx.settings), False, tables, result)

    return run_query


def distinct_values_tool(render: RenderValues) -> QueryTool:
    """distinct_values for an environment: the same lookups and query, its text from `render`."""

    def distinct_values(ctx: ToolContext, args: dict[str, Any]) -> Steps:
        table = readable_table(ctx.schema, args["table_name"])
        if isinstance(table, ToolOutcome):
            return table
        column = column_named(table, args["column_name"])
        if isinstance(column, ToolOutcome):
            return column
        s = ctx.settings
        limit, note = clamp_limit(args["limit"], s.distinct_values, s.max_distinct_values)
        result = yield distinct_query(table, column, limit, s.cell_chars)
        if not result.ok:
            return read_failure(ctx, table, result)
        return ToolOutcome(with_note(render(table, column, result, s), note), True, frozenset([table.name]))

    return distinct_values

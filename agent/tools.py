"""The eight tools the model explores a database with.

`run_tool` / `arun_tool` never raise for anything the model can get wrong: an unknown tool,
a missing or mistyped argument, an unknown table or column, or failing SQL all come back
as a ToolOutcome with ok=False and a text saying what to do next. Each tool is written
once, as a generator that yields the queries it needs; a sync and an async driver run it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from . import trained_text
from .environment import DEFAULT_ENVIRONMENT, Environment
from .hints import find_column, sql_error_hint, unknown_column_text, unknown_table_text
from .joins import shortest_join_path
from .render import (
    join_names,
    quote_ident,
    render_distinct,
    render_query_failure,
    render_query_result,
    render_sample,
    show_ident,
)
from .schema_text import (
    join_tables,
    render_description,
    render_join_path,
    render_links,
    render_no_path,
    render_same_table,
    render_table_list,
)
from .sqlite import Database, QueryResult, QueryStatus, Schema, Table
from .tool_args import ArgProblem, clamp_limit, echo, parse_args, unquote_name

TOOL_NAMES = ("list_tables", "describe_table", "foreign_keys", "join_path", "sample_rows",
              "distinct_values", "run_query", "submit_sql")


@dataclass(frozen=True)
class ToolSettings:
    """Output caps for tool results."""

    sample_rows: int = 10
    max_sample_rows: int = 20
    query_rows: int = 50
    distinct_values: int = 20
    max_distinct_values: int = 50
    cell_chars: int = 100
    result_chars: int = 4_000
    row_count_cap: int = 100_000  # describe_table/sample_rows count a table's rows up to this
    row_count_timeout: float = 1.0  # seconds; a slower count is left out of the text
    # The trained environment shows these whole: every table name, a table's CREATE statement.
    list_names: int = 500  # list_tables: names listed before the list is cut (use a pattern)
    long_text_chars: int = 16_000  # list_tables / describe_table text cap


DEFAULT_SETTINGS = ToolSettings()


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
    count_cap: int | None = None  # rows counted past max_rows (None: the engine's default)


Steps = Generator[QuerySpec, QueryResult, ToolOutcome]


@dataclass(frozen=True)
class _Context:
    schema: Schema
    settings: ToolSettings
    query_timeout: float


def _find_table(schema: Schema, given: str) -> Table | ToolOutcome:
    bare = unquote_name(given)
    table = schema.find(given) or schema.find(bare)
    if table is None:
        return ToolOutcome(unknown_table_text(bare or given, schema), False, frozenset())
    return table


def _real_tables(schema: Schema, names: frozenset[str]) -> frozenset[str]:
    return frozenset(t.name for n in names if (t := schema.find(n)) is not None)


def _with_note(text: str, note: str | None) -> str:
    return text if note is None else f"{text}\n{note}"


def _count_rows(ctx: _Context, table: Table) -> Generator[QuerySpec, QueryResult, tuple[int, bool] | None]:
    cap = ctx.settings.row_count_cap
    result = yield QuerySpec(
        f"SELECT count(*) FROM (SELECT 1 FROM {quote_ident(table.name)} LIMIT {cap + 1})",
        max_rows=1, timeout=ctx.settings.row_count_timeout)
    if not result.ok or not result.rows:
        return None  # too slow or unreadable: the text simply leaves the count out
    count = int(result.rows[0][0])
    return (min(count, cap), count <= cap)


# --- the tools, each a function of the schema and parsed arguments -------------------------

def _list_tables(ctx: _Context, args: dict[str, Any]) -> ToolOutcome:
    pattern = args["pattern"]
    text = render_table_list(ctx.schema, pattern, ctx.settings.result_chars)
    matched = pattern is None or any(pattern.casefold() in n.casefold() for n in ctx.schema.names)
    return ToolOutcome(text, matched, frozenset())


def _describe_table(ctx: _Context, args: dict[str, Any]) -> Steps:
    table = _find_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    rows = None if table.kind == "view" else (yield from _count_rows(ctx, table))
    text = render_description(table, ctx.schema, rows, ctx.settings.result_chars)
    return ToolOutcome(text, True, frozenset([table.name]))


def _foreign_keys(ctx: _Context, args: dict[str, Any]) -> ToolOutcome:
    table = _find_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    text = render_links(table, ctx.schema, ctx.settings.result_chars)
    return ToolOutcome(text, True, frozenset([table.name]))


def _join_path(ctx: _Context, args: dict[str, Any]) -> ToolOutcome:
    table_a = _find_table(ctx.schema, args["table_a"])
    if isinstance(table_a, ToolOutcome):
        return table_a
    table_b = _find_table(ctx.schema, args["table_b"])
    if isinstance(table_b, ToolOutcome):
        return table_b
    if table_a.name == table_b.name:
        return ToolOutcome(render_same_table(table_a.name, ctx.schema), True, frozenset([table_a.name]))
    steps = shortest_join_path(ctx.schema, table_a.name, table_b.name)
    if steps is None:
        return ToolOutcome(render_no_path(table_a.name, table_b.name, ctx.schema), False,
                           frozenset([table_a.name, table_b.name]))
    return ToolOutcome(render_join_path(table_a.name, steps), True, join_tables(table_a.name, steps))


def _read_failure(ctx: _Context, table: Table, result: QueryResult) -> ToolOutcome:
    slow = result.status in (QueryStatus.TIMEOUT, QueryStatus.KILLED)
    # The model cannot add WHERE to this tool's query; run_query is where it can.
    hint = ("the table is too large to scan in time; use run_query with a WHERE filter and LIMIT"
            if slow else None)
    text = f"cannot read {show_ident(table.name)}: " + render_query_failure(result, hint, ctx.query_timeout)
    return ToolOutcome(text, False, frozenset([table.name]))


def _sample_rows(ctx: _Context, args: dict[str, Any]) -> Steps:
    table = _find_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    s = ctx.settings
    limit, note = clamp_limit(args["limit"], s.sample_rows, s.max_sample_rows)
    result = yield QuerySpec(f"SELECT * FROM {quote_ident(table.name)} LIMIT {limit}",
                             max_rows=limit, cell_limit=s.cell_chars)
    if not result.ok:
        return _read_failure(ctx, table, result)
    if len(result.rows) < limit:
        total: tuple[int, bool] | None = (len(result.rows), True)
    else:
        total = yield from _count_rows(ctx, table)
    text = render_sample(table.name, result, total, s.cell_chars, s.result_chars)
    return ToolOutcome(_with_note(text, note), True,
                       frozenset([table.name]) | _real_tables(ctx.schema, result.tables_read))


def _distinct_values(ctx: _Context, args: dict[str, Any]) -> Steps:
    table = _find_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    bare = unquote_name(args["column_name"])
    column = find_column(table, args["column_name"]) or find_column(table, bare)
    if column is None:
        return ToolOutcome(unknown_column_text(bare or args["column_name"], table), False,
                           frozenset([table.name]))
    s = ctx.settings
    limit, note = clamp_limit(args["limit"], s.distinct_values, s.max_distinct_values)
    # No LIMIT: the engine counts the groups past the first `limit`, which is the total.
    result = yield QuerySpec(
        f"SELECT {quote_ident(column)}, count(*) FROM {quote_ident(table.name)} "
        "GROUP BY 1 ORDER BY 2 DESC, 1", max_rows=limit, cell_limit=s.cell_chars)
    if not result.ok:
        return _read_failure(ctx, table, result)
    text = render_distinct(table.name, column, result, s.cell_chars, s.result_chars)
    return ToolOutcome(_with_note(text, note), True, frozenset([table.name]))


def _run_query(ctx: _Context, args: dict[str, Any]) -> Steps:
    s = ctx.settings
    result = yield QuerySpec(args["sql"], max_rows=s.query_rows, cell_limit=s.cell_chars)
    if result.ok:
        text = render_query_result(result, s.cell_chars, s.result_chars)
        return ToolOutcome(text, True, _real_tables(ctx.schema, result.tables_read), result)
    hint = sql_error_hint(result.error or "", ctx.schema) if result.error else None
    text = render_query_failure(result, hint, ctx.query_timeout)
    return ToolOutcome(text, False, _real_tables(ctx.schema, result.tables_read), result)


# --- the trained environment's texts (agent/trained_text.py) -------------------------------

def _trained_list_tables(ctx: _Context, args: dict[str, Any]) -> ToolOutcome:
    pattern, s = args["pattern"], ctx.settings
    text = trained_text.render_names(ctx.schema, pattern, s.list_names, s.long_text_chars)
    matched = pattern is None or any(pattern.casefold() in n.casefold() for n in ctx.schema.names)
    return ToolOutcome(text, matched, frozenset())


def _trained_describe_table(ctx: _Context, args: dict[str, Any]) -> Steps:
    table = _find_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    literal = "'" + table.name.replace("'", "''") + "'"
    result = yield QuerySpec(
        f"SELECT sql FROM sqlite_master WHERE type IN ('table', 'view') AND name = {literal}",
        max_rows=1, cell_limit=ctx.settings.long_text_chars, count_cap=1)
    stored = result.rows[0][0] if result.ok and result.rows else None  # else: built from columns
    text = trained_text.render_statement(table, stored, ctx.settings.long_text_chars)
    return ToolOutcome(text, True, frozenset([table.name]))


def _trained_foreign_keys(ctx: _Context, args: dict[str, Any]) -> ToolOutcome:
    table = _find_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    text = trained_text.render_key_links(table, ctx.schema, ctx.settings.result_chars)
    return ToolOutcome(text, True, frozenset([table.name]))


def _trained_sample_rows(ctx: _Context, args: dict[str, Any]) -> Steps:
    table = _find_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    s = ctx.settings
    limit, note = clamp_limit(args["limit"], s.sample_rows, s.max_sample_rows)
    result = yield QuerySpec(f"SELECT * FROM {quote_ident(table.name)} LIMIT {limit}",
                             max_rows=limit, cell_limit=s.cell_chars, count_cap=limit)
    if not result.ok:
        return _read_failure(ctx, table, result)
    text = trained_text.render_sample_rows(result, s.cell_chars, s.result_chars)
    return ToolOutcome(_with_note(text, note), True,
                       frozenset([table.name]) | _real_tables(ctx.schema, result.tables_read))


def _trained_distinct_values(ctx: _Context, args: dict[str, Any]) -> Steps:
    table = _find_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    bare = unquote_name(args["column_name"])
    column = find_column(table, args["column_name"]) or find_column(table, bare)
    if column is None:
        return ToolOutcome(unknown_column_text(bare or args["column_name"], table), False,
                           frozenset([table.name]))
    s = ctx.settings
    limit, note = clamp_limit(args["limit"], s.distinct_values, s.max_distinct_values)
    result = yield QuerySpec(
        f"SELECT {quote_ident(column)}, count(*) FROM {quote_ident(table.name)} "
        "GROUP BY 1 ORDER BY 2 DESC, 1", max_rows=limit, cell_limit=s.cell_chars)
    if not result.ok:
        return _read_failure(ctx, table, result)
    text = trained_text.render_values(show_ident(column), result, s.cell_chars, s.result_chars)
    return ToolOutcome(_with_note(text, note), True, frozenset([table.name]))


def _trained_run_query(ctx: _Context, args: dict[str, Any]) -> Steps:
    s = ctx.settings
    rows = trained_text.QUERY_ROWS  # counting stops one row past: enough to say "more rows exist"
    result = yield QuerySpec(args["sql"], max_rows=rows, cell_limit=s.cell_chars, count_cap=rows)
    if result.ok:
        text = trained_text.render_rows(result, s.cell_chars, s.result_chars)
        return ToolOutcome(text, True, _real_tables(ctx.schema, result.tables_read), result)
    hint = sql_error_hint(result.error or "", ctx.schema) if result.error else None
    text = trained_text.render_failure(result, hint, ctx.query_timeout)
    return ToolOutcome(text, False, _real_tables(ctx.schema, result.tables_read), result)


_Impl = Callable[[_Context, dict[str, Any]], ToolOutcome | Steps]
_IMPLS: Mapping[str, _Impl] = MappingProxyType({
    "list_tables": _list_tables,
    "describe_table": _describe_table,
    "foreign_keys": _foreign_keys,
    "join_path": _join_path,
    "sample_rows": _sample_rows,
    "distinct_values": _distinct_values,
    "run_query": _run_query,
    "submit_sql": _run_query,
})
_TRAINED_IMPLS: Mapping[str, _Impl] = MappingProxyType({
    **_IMPLS,
    "list_tables": _trained_list_tables,
    "describe_table": _trained_describe_table,
    "foreign_keys": _trained_foreign_keys,
    "sample_rows": _trained_sample_rows,
    "distinct_values": _trained_distinct_values,
    "run_query": _trained_run_query,
    "submit_sql": _trained_run_query,
})
_IMPLS_BY_ENVIRONMENT = MappingProxyType({Environment.RICH: _IMPLS, Environment.TRAINED: _TRAINED_IMPLS})


def _resolve_tool(name: Any) -> str | ToolOutcome:
    if isinstance(name, str):
        folded = name.strip().casefold()
        if folded in _IMPLS:
            return folded
    near = difflib.get_close_matches(str(name).casefold(), TOOL_NAMES, n=1, cutoff=0.7)
    guess = f"did you mean {near[0]}? " if near else ""
    text = f"unknown tool {echo(str(name))}; {guess}the tools are: {join_names(TOOL_NAMES, 'and')}"
    return ToolOutcome(text, False, frozenset())


def _prepare(name: Any, args: Any) -> tuple[str, dict[str, Any]] | ToolOutcome:
    tool = _resolve_tool(name)
    if isinstance(tool, ToolOutcome):
        return tool
    parsed = parse_args(tool, args)
    if isinstance(parsed, ArgProblem):
        return ToolOutcome(parsed.text, False, frozenset())
    return tool, parsed


def run_tool(db: Database, name: str, args: Mapping[str, Any],
             settings: ToolSettings = DEFAULT_SETTINGS,
             environment: Environment = DEFAULT_ENVIRONMENT) -> ToolOutcome:
    """Run one tool call; the model's mistakes come back as ok=False texts."""
    prepared = _prepare(name, args)
    if isinstance(prepared, ToolOutcome):
        return prepared
    tool, parsed = prepared
    ctx = _Context(db.schema(), settings, db.limits.query_timeout)
    steps = _IMPLS_BY_ENVIRONMENT[environment][tool](ctx, parsed)
    if isinstance(steps, ToolOutcome):
        return steps
    try:
        spec = next(steps)
        while True:
            result = db.query(spec.sql, max_rows=spec.max_rows, cell_limit=spec.cell_limit,
                              timeout=spec.timeout, count_cap=spec.count_cap)
            spec = steps.send(result)
    except StopIteration as done:
        return done.value


async def arun_tool(db: Database, name: str, args: Mapping[str, Any],
                    settings: ToolSettings = DEFAULT_SETTINGS,
                    environment: Environment = DEFAULT_ENVIRONMENT) -> ToolOutcome:
    """`run_tool` on the event loop; cancelling the caller interrupts the running query."""
    prepared = _prepare(name, args)
    if isinstance(prepared, ToolOutcome):
        return prepared
    tool, parsed = prepared
    ctx = _Context(await db.aschema(), settings, db.limits.query_timeout)
    steps = _IMPLS_BY_ENVIRONMENT[environment][tool](ctx, parsed)
    if isinstance(steps, ToolOutcome):
        return steps
    try:
        spec = next(steps)
        while True:
            result = await db.aquery(spec.sql, max_rows=spec.max_rows, cell_limit=spec.cell_limit,
                                     timeout=spec.timeout, count_cap=spec.count_cap)
            spec = steps.send(result)
    except StopIteration as done:
        return done.value


# --- one function per tool, for callers that know which tool they want ---------------------

def list_tables(db: Database, settings: ToolSettings = DEFAULT_SETTINGS, *,
                pattern: str | None = None) -> ToolOutcome:
    """Every table and view name (those containing `pattern` if given)."""
    return run_tool(db, "list_tables", {"pattern": pattern}, settings)


def describe_table(db: Database, table_name: str, settings: ToolSettings = DEFAULT_SETTINGS) -> ToolOutcome:
    """Columns of a table or view with types, keys, defaults and FK targets."""
    return run_tool(db, "describe_table", {"table_name": table_name}, settings)


def foreign_keys(db: Database, table_name: str, settings: ToolSettings = DEFAULT_SETTINGS) -> ToolOutcome:
    """Outgoing and incoming foreign keys of a table."""
    return run_tool(db, "foreign_keys", {"table_name": table_name}, settings)


def join_path(db: Database, table_a: str, table_b: str,
              settings: ToolSettings = DEFAULT_SETTINGS) -> ToolOutcome:
    """The shortest chain of foreign-key joins between two tables, as FROM/JOIN lines."""
    return run_tool(db, "join_path", {"table_a": table_a, "table_b": table_b}, settings)


def sample_rows(db: Database, table_name: str, limit: int | None = None,
                settings: ToolSettings = DEFAULT_SETTINGS) -> ToolOutcome:
    """The first rows of a table (default settings.sample_rows)."""
    return run_tool(db, "sample_rows", {"table_name": table_name, "limit": limit}, settings)


def distinct_values(db: Database, table_name: str, column_name: str, limit: int | None = None,
                    settings: ToolSettings = DEFAULT_SETTINGS) -> ToolOutcome:
    """The most frequent values of a column with counts, and how many distinct values exist."""
    args = {"table_name": table_name, "column_name": column_name, "limit": limit}
    return run_tool(db, "distinct_values", args, settings)


def run_query(db: Database, sql: str, settings: ToolSettings = DEFAULT_SETTINGS) -> ToolOutcome:
    """Run one read-only statement and show its rows or its error with a hint."""
    return run_tool(db, "run_query", {"sql": sql}, settings)


def submit_sql(db: Database, sql: str, settings: ToolSettings = DEFAULT_SETTINGS) -> ToolOutcome:
    """Run the answer SQL exactly as run_query does (the loop ends the episode on it)."""
    return run_tool(db, "submit_sql", {"sql": sql}, settings)

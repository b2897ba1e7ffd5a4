"""The eight tools the model explores a database with.

`run_tool` / `arun_tool` never raise for anything the model can get wrong: an unknown tool,
a missing or mistyped argument, an unknown table or column, or failing SQL all come back
as a ToolOutcome with ok=False and a text saying what to do next. Each tool is written
once per environment, as a generator that yields the queries it needs; a sync and an async
driver run it.

Two environments (`environment.py`) decide the texts the model reads: `trained` (default; the
authors' environment as their episodes show it: `_trained.py`, `trained_text.py`) and `rich`
(our own formats: the implementations below, `result_text.py`, `_schema_text.py`).

`TOOLS` is the one table of the tools: a tool's name, arguments, example call, implementations
and progress label are its row, and every other list of tools (the completion parser's, the
progress lines', the CLI's) is derived from it. Adding a tool means a row here, an
implementation above it and one in `_trained.py`, their texts, and its line in the system
prompt (`agent/prompt.py`; a test checks the two agree).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..sqlite import Database, Schema
from ..text import nearest
from . import _trained
from ._args import ArgProblem, Param, echo, parse_params
from ._base import (
    DEFAULT_TOOL_SETTINGS,
    QuerySpec,
    Steps,
    ToolContext,
    ToolOutcome,
    ToolSettings,
    count_table_rows,
    distinct_values_tool,
    find_table,
    foreign_keys_tool,
    list_tables_tool,
    readable_table,
    run_query_tool,
    sample_rows_tool,
)
from ._joins import shortest_join_path
from ._schema_text import (
    join_tables,
    render_description,
    render_join_path,
    render_links,
    render_no_path,
    render_same_table,
    render_table_list,
)
from .environment import DEFAULT_ENVIRONMENT, Environment
from .result_text import (
    join_names,
    render_distinct,
    render_query_failure,
    render_query_result,
    render_sample,
)

__all__ = [
    "DEFAULT_ENVIRONMENT",
    "DEFAULT_TOOL_SETTINGS",
    "TOOLS",
    "TOOL_NAMES",
    "ArgProblem",
    "Environment",
    "Param",
    "QuerySpec",
    "ToolOutcome",
    "ToolSettings",
    "ToolSpec",
    "arun_tool",
    "call_label_args",
    "canonical_tool_name",
    "nearest_tool_name",
    "parse_args",
    "run_tool",
    "unknown_tool_text",
]

# --- the tools, each a function of the schema and parsed arguments -------------------------

_list_tables = list_tables_tool(
    lambda ctx, pattern: render_table_list(ctx.schema, pattern, ctx.settings.result_chars)
)


def _describe_table(ctx: ToolContext, args: dict[str, Any]) -> Steps:
    table = readable_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    rows = None if table.kind == "view" else (yield from count_table_rows(ctx, table))
    text = render_description(table, ctx.schema, rows, ctx.settings.result_chars)
    return ToolOutcome(text, True, frozenset([table.name]))


_foreign_keys = foreign_keys_tool(render_links)


def _join_path(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    table_a = find_table(ctx.schema, args["table_a"])
    if isinstance(table_a, ToolOutcome):
        return table_a
    table_b = find_table(ctx.schema, args["table_b"])
    if isinstance(table_b, ToolOutcome):
        return table_b
    if table_a.name == table_b.name:
        return ToolOutcome(render_same_table(table_a.name, ctx.schema), True, frozenset([table_a.name]))
    steps = shortest_join_path(ctx.schema, table_a.name, table_b.name)
    if steps is None:
        return ToolOutcome(
            render_no_path(table_a.name, table_b.name, ctx.schema),
            False,
            frozenset([table_a.name, table_b.name]),
        )
    return ToolOutcome(render_join_path(table_a.name, steps), True, join_tables(table_a.name, steps))


_sample_rows = sample_rows_tool(
    lambda table, result, total, s: render_sample(table.name, result, total, s.cell_chars, s.result_chars),
    count_rows=True,
)


_distinct_values = distinct_values_tool(
    lambda table, column, result, s: render_distinct(table.name, column, result, s.cell_chars, s.result_chars)
)


_run_query = run_query_tool(
    lambda sql, s: QuerySpec(sql, max_rows=s.query_rows, cell_limit=s.cell_chars, reads=True),
    lambda result, s: render_query_result(result, s.cell_chars, s.result_chars),
    lambda result, hint, timeout, s: render_query_failure(result, hint, timeout),
)


# --- the table of tools: everything else about a tool is derived from its row -------------

_Impl = Callable[[ToolContext, dict[str, Any]], ToolOutcome | Steps]


def _label_none(args: Mapping[str, Any]) -> tuple[str, ...]:
    return ()


def _label_table(args: Mapping[str, Any]) -> tuple[str, ...]:
    return (str(args["table_name"]),) if "table_name" in args else ()


def _label_column(args: Mapping[str, Any]) -> tuple[str, ...]:
    if "column_name" not in args:
        return _label_table(args)
    return (f"{args.get('table_name', '?')}.{args['column_name']}",)


def _label_pair(args: Mapping[str, Any]) -> tuple[str, ...]:
    return (str(args.get("table_a", "?")), str(args.get("table_b", "?")))


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, arguments, an example call, what runs it, and its progress label."""

    name: str
    params: tuple[Param, ...]
    example: str  # the "args" object of a correct call, shown when a call's arguments are wrong
    impl: _Impl  # the rich environment's (our own formats)
    trained: _Impl  # the trained environment's (the texts the model saw in training; _trained.py)
    # what a progress line shows of a call's arguments: `describe_table(Track)`
    label: Callable[[Mapping[str, Any]], tuple[str, ...]] = _label_none

    def impl_for(self, environment: Environment) -> _Impl:
        """The implementation whose texts the model reads in `environment`."""
        return self.trained if environment is Environment.TRAINED else self.impl


_TABLE = Param("table_name", "text", aliases=("table", "name"))
_SQL = Param("sql", "text", aliases=("query",))
_LIMIT = Param("limit", "count", required=False)
_SPECS = (
    ToolSpec(
        "list_tables",
        (Param("pattern", "text", required=False, in_system_prompt=False),),
        "{}",
        _list_tables,
        _trained.list_tables,
    ),
    ToolSpec(
        "describe_table",
        (_TABLE,),
        '{"table_name": "<table>"}',
        _describe_table,
        _trained.describe_table,
        _label_table,
    ),
    ToolSpec(
        "foreign_keys",
        (_TABLE,),
        '{"table_name": "<table>"}',
        _foreign_keys,
        _trained.foreign_keys,
        _label_table,
    ),
    ToolSpec(
        "join_path",
        (Param("table_a", "text"), Param("table_b", "text")),
        '{"table_a": "<table>", "table_b": "<table>"}',
        _join_path,
        _join_path,
        _label_pair,
    ),
    ToolSpec(
        "sample_rows",
        (_TABLE, _LIMIT),
        '{"table_name": "<table>", "limit": 5}',
        _sample_rows,
        _trained.sample_rows,
        _label_table,
    ),
    ToolSpec(
        "distinct_values",
        (_TABLE, Param("column_name", "text", aliases=("column",)), _LIMIT),
        '{"table_name": "<table>", "column_name": "<column>", "limit": 20}',
        _distinct_values,
        _trained.distinct_values,
        _label_column,
    ),
    ToolSpec("run_query", (_SQL,), '{"sql": "SELECT ..."}', _run_query, _trained.run_query),
    ToolSpec("submit_sql", (_SQL,), '{"sql": "SELECT ..."}', _run_query, _trained.run_query),
)
TOOLS: Mapping[str, ToolSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})
TOOL_NAMES: tuple[str, ...] = tuple(TOOLS)
NEAR_NAME_CUTOFF = 0.7  # difflib ratio for a suggestion; 0.6 would offer describe_table for drop_table


def canonical_tool_name(name: str) -> str | None:
    """The tool `name` means, ignoring case and surrounding space; None for no tool."""
    folded = name.strip().casefold()
    return folded if folded in TOOLS else None


def nearest_tool_name(name: str) -> str | None:
    """The tool name closest to a misspelt `name`, or None when none is close."""
    return nearest(name.strip().casefold(), TOOL_NAMES, NEAR_NAME_CUTOFF)


def parse_args(tool: str, args: Any) -> dict[str, Any] | ArgProblem:
    """Every parameter of `tool` under its canonical name (None when optional and absent)."""
    spec = TOOLS[tool]
    return parse_params(spec.name, spec.params, spec.example, args)


def call_label_args(tool: str, args: Mapping[str, Any]) -> tuple[str, ...]:
    """What a progress line shows of a call's arguments (nothing for an unknown tool)."""
    spec = TOOLS.get(tool)
    return spec.label(args) if spec is not None else ()


def unknown_tool_text(name: Any) -> str:
    """What an unknown tool name gets: the nearest tool's name, and every tool's."""
    near = nearest_tool_name(str(name))
    guess = f"did you mean {near}? " if near else ""
    return f"unknown tool {echo(str(name))}; {guess}the tools are: {join_names(TOOL_NAMES, 'and')}"


def _resolve_tool(name: Any) -> str | ToolOutcome:
    if isinstance(name, str) and (tool := canonical_tool_name(name)) is not None:
        return tool
    return ToolOutcome(unknown_tool_text(name), False, frozenset())


def _prepare(name: Any, args: Any) -> tuple[str, dict[str, Any]] | ToolOutcome:
    tool = _resolve_tool(name)
    if isinstance(tool, ToolOutcome):
        return tool
    parsed = parse_args(tool, args)
    if isinstance(parsed, ArgProblem):
        return ToolOutcome(parsed.text, False, frozenset())
    return tool, parsed


def _steps(
    name: Any, args: Any, schema: Schema, settings: ToolSettings, environment: Environment, query_timeout: float
) -> ToolOutcome | Steps:
    """The call's outcome when it needs no query, else the generator of the queries it needs."""
    prepared = _prepare(name, args)
    if isinstance(prepared, ToolOutcome):
        return prepared
    tool, parsed = prepared
    return TOOLS[tool].impl_for(environment)(ToolContext(schema, settings, query_timeout), parsed)


def run_tool(
    db: Database,
    name: str,
    args: Mapping[str, Any],
    settings: ToolSettings = DEFAULT_TOOL_SETTINGS,
    environment: Environment = DEFAULT_ENVIRONMENT,
) -> ToolOutcome:
    """Run one tool call in `environment`'s texts; the model's mistakes come back as ok=False texts."""
    steps = _steps(name, args, db.schema(), settings, environment, db.limits.query_timeout)
    if isinstance(steps, ToolOutcome):
        return steps
    try:
        spec = next(steps)
        while True:
            spec = steps.send(db.query(spec.sql, byte_budget=settings.query_bytes, **spec.options))
    except StopIteration as done:
        return done.value


async def arun_tool(
    db: Database,
    name: str,
    args: Mapping[str, Any],
    settings: ToolSettings = DEFAULT_TOOL_SETTINGS,
    environment: Environment = DEFAULT_ENVIRONMENT,
) -> ToolOutcome:
    """`run_tool` on the event loop; cancelling the caller interrupts the running query."""
    steps = _steps(name, args, await db.aschema(), settings, environment, db.limits.query_timeout)
    if isinstance(steps, ToolOutcome):
        return steps
    try:
        spec = next(steps)
        while True:
            spec = steps.send(await db.aquery(spec.sql, byte_budget=settings.query_bytes, **spec.options))
    except StopIteration as done:
        return done.value

"""The trained environment's versions of the tools whose texts differ (texts in `trained_text`).

Each is the rich implementation's twin in `agent/tools/__init__.py`: the same lookups and
argument handling, other queries where the text needs less (no row counts) or more (the
stored CREATE statement), and the texts the authors' environment showed.
"""

from __future__ import annotations

from typing import Any

from . import trained_text as texts
from ._base import (
    QuerySpec,
    Steps,
    ToolContext,
    ToolOutcome,
    distinct_values_tool,
    foreign_keys_tool,
    list_tables_tool,
    readable_table,
    run_query_tool,
    sample_rows_tool,
)
from .result_text import show_ident

# Every name on one line with the count (a pattern narrows it).
list_tables = list_tables_tool(
    lambda ctx, pattern: texts.render_names(
        ctx.schema, pattern, ctx.settings.list_names, ctx.settings.long_text_chars
    )
)


def describe_table(ctx: ToolContext, args: dict[str, Any]) -> Steps:
    """The CREATE statement stored in sqlite_master, on one line."""
    table = readable_table(ctx.schema, args["table_name"])
    if isinstance(table, ToolOutcome):
        return table
    literal = "'" + table.name.replace("'", "''") + "'"
    result = yield QuerySpec(
        f"SELECT sql FROM sqlite_master WHERE type IN ('table', 'view') AND name = {literal}",
        max_rows=1,
        cell_limit=ctx.settings.long_text_chars,
        count_cap=1,
    )
    stored = result.rows[0][0] if result.ok and result.rows else None  # else: built from columns
    text = texts.render_statement(table, stored, ctx.settings.long_text_chars)
    return ToolOutcome(text, True, frozenset([table.name]))


# FOREIGN KEY clauses from and to the table.
foreign_keys = foreign_keys_tool(texts.render_key_links)


# The first `limit` rows in the pipe format (no count query: the text shows none).
sample_rows = sample_rows_tool(
    lambda table, result, total, s: texts.render_sample_rows(result, s.cell_chars, s.result_chars),
    count_rows=False,
)


# `column | count` rows, most frequent first.
distinct_values = distinct_values_tool(
    lambda table, column, result, s: texts.render_values(
        show_ident(column), result, s.cell_chars, s.result_chars
    )
)


# At most 5 rows in the pipe format, or `Error: ...`; counting stops one row past: enough to
# say "more rows exist".
run_query = run_query_tool(
    lambda sql, s: QuerySpec(
        sql, max_rows=texts.QUERY_ROWS, cell_limit=s.cell_chars, count_cap=texts.QUERY_ROWS, reads=True
    ),
    lambda result, s: texts.render_rows(result, s.cell_chars, s.result_chars, s.texts.more_rows),
    lambda result, hint, timeout, s: texts.render_failure(result, hint, timeout, s.texts.error),
)

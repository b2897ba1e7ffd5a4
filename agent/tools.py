"""The eight tools the model explores a database with (interface; implementation in progress)."""

from __future__ import annotations

from dataclasses import dataclass

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

"""The tools on a model's mistakes: unknown tools, wrong arguments, junk, invalid characters."""

from __future__ import annotations

from typing import Any

import pytest

from agent.sqlite import Database
from tests.support.weird_database import outcome, run_tool


@pytest.mark.parametrize(
    ("name", "args", "text"),
    [
        (
            "drop_table",
            {},
            "unknown tool 'drop_table'; the tools are: list_tables, describe_table, foreign_keys, "
            "join_path, sample_rows, distinct_values, run_query and submit_sql",
        ),
        (
            "list_table",
            {},
            "unknown tool 'list_table'; did you mean list_tables? the tools are: list_tables, "
            "describe_table, foreign_keys, join_path, sample_rows, distinct_values, run_query "
            "and submit_sql",
        ),
        (
            "describe_table",
            {},
            'describe_table needs "table_name" (a string); call it as '
            '{"tool": "describe_table", "args": {"table_name": "<table>"}}',
        ),
        (
            "describe_table",
            {"table_name": 5},
            'describe_table needs "table_name" (a string), got 5; call it as '
            '{"tool": "describe_table", "args": {"table_name": "<table>"}}',
        ),
        (
            "describe_table",
            {"table_name": "  "},
            'describe_table needs "table_name" (a string); call it as '
            '{"tool": "describe_table", "args": {"table_name": "<table>"}}',
        ),
        (
            "join_path",
            {"table_a": "order"},
            'join_path needs "table_b" (a string); call it as {"tool": '
            '"join_path", "args": {"table_a": "<table>", "table_b": "<table>"}}',
        ),
        (
            "sample_rows",
            {"table_name": "order", "limit": "ten"},
            'sample_rows needs "limit" as a whole number, got \'ten\'; call it as {"tool": "sample_rows", '
            '"args": {"table_name": "<table>", "limit": 5}}',
        ),
        (
            "sample_rows",
            {"table_name": "order", "limit": True},
            'sample_rows needs "limit" as a whole number, got True; call it as {"tool": "sample_rows", '
            '"args": {"table_name": "<table>", "limit": 5}}',
        ),
        (
            "run_query",
            ["SELECT 1"],
            "run_query needs its arguments as a JSON object; call it as "
            '{"tool": "run_query", "args": {"sql": "SELECT ..."}}',
        ),
        (
            "run_query",
            {"sql": ["SELECT 1"]},
            "run_query needs \"sql\" (a string), got ['SELECT 1']; call it "
            'as {"tool": "run_query", "args": {"sql": "SELECT ..."}}',
        ),
        (
            "distinct_values",
            {"table_name": "order"},
            'distinct_values needs "column_name" (a string); call it as {"tool": "distinct_values", "args": '
            '{"table_name": "<table>", "column_name": "<column>", "limit": 20}}',
        ),
    ],
)
def test_model_mistakes_come_back_as_texts(weird: Database, name: Any, args: Any, text: str) -> None:
    """Unknown tools and missing or mistyped arguments are ok=False texts that show the right call."""
    assert run_tool(weird, name, args) == outcome(text, ok=False)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        (None, {}),
        (42, None),
        ("run_query", None),
        ("run_query", {"sql": "\x00"}),
        ("run_query", {"sql": "SELECT load_extension('x')"}),
        ("run_query", {"sql": "PRAGMA user_version = 1"}),
        ("run_query", {"sql": "ATTACH 'x.db' AS x"}),
        ("run_query", {"sql": "SELECT * FROM pragma_nope"}),
        ("sample_rows", {"table_name": "sqlite_master"}),
        ("distinct_values", {"table_name": {}}),
        ("join_path", {"table_a": "order", "table_b": "nope"}),
        ("list_tables", {"pattern": "zzz"}),
        ("describe_table", {"table_name": '"'}),
        ("describe_table", {"table_name": "[]"}),
        ("foreign_keys", {"table_name": "x" * 10_000}),
        ("sample_rows", {"table_name": "order", "limit": 1.5}),
    ],
)
def test_junk_calls_never_raise(weird: Database, name: Any, args: Any) -> None:
    """Whatever the model sends, the result is a not-ok text, never an exception."""
    result = run_tool(weird, name, args)
    assert not result.ok and result.text


def test_lone_surrogates_are_tool_results(weird: Database) -> None:
    """A lone surrogate in SQL or a table name comes back as a text the model can act on."""
    query = run_tool(weird, "run_query", {"sql": "SELECT '\ud800'"})
    table = run_tool(weird, "describe_table", {"table_name": "lonely\udc80"})
    assert (query.ok, table.ok) == (False, False)
    assert "invalid character ('\\ud800' at position 8); remove it" in query.text
    assert "invalid character ('\\udc80' at position 6); remove it" in table.text
    assert weird.query("SELECT '\ud800'", max_rows=1).error == (
        "the SQL has an invalid character ('\\ud800' at position 8); remove it"
    )

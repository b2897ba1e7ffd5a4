"""Parsing the model's tool arguments: aliases, numbers as text, clamping, quoted names."""

from __future__ import annotations

import json

import pytest

from agent.tools import TOOLS, ArgProblem, parse_args
from agent.tools._args import clamp_limit, echo, parse_count, unquote_name


def test_parse_args_canonical_names_and_aliases() -> None:
    """Aliases map to canonical names; optional parameters default to None; extras are ignored."""
    assert parse_args("distinct_values", {"table": "t", "column": "c", "extra": 1}) == {
        "table_name": "t",
        "column_name": "c",
        "limit": None,
    }
    assert parse_args("run_query", {"query": "SELECT 1"}) == {"sql": "SELECT 1"}
    assert parse_args("list_tables", None) == {"pattern": None}
    assert parse_args("sample_rows", {"table_name": "t", "limit": "7"}) == {"table_name": "t", "limit": 7}


def test_parse_args_problems_name_the_argument_and_the_call() -> None:
    """Missing, mistyped and non-object arguments say which and show the right call."""
    assert parse_args("join_path", {"table_a": "a", "table_b": 3}) == ArgProblem(
        'join_path needs "table_b" (a string), got 3; call it as '
        '{"tool": "join_path", "args": {"table_a": "<table>", "table_b": "<table>"}}'
    )
    assert parse_args("foreign_keys", "Track") == ArgProblem(
        "foreign_keys needs its arguments as a JSON object; call it as "
        '{"tool": "foreign_keys", "args": {"table_name": "<table>"}}'
    )
    long_value = parse_args("describe_table", {"table_name": list(range(1000))})
    assert isinstance(long_value, ArgProblem)
    assert long_value.text.startswith('describe_table needs "table_name" (a string), got [0, 1, 2, 3')
    assert len(long_value.text) < 200


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (5, 5),
        (-2, -2),
        (3.0, 3),
        (" 12 ", 12),
        ("5", 5),
        (True, None),
        (2.5, None),
        ("five", None),
        ([5], None),
        (None, None),
    ],
)
def test_parse_count(value: object, count: int | None) -> None:
    """Whole numbers come from ints, integral floats and numeric strings; booleans are not numbers."""
    assert parse_count(value) == count


def test_clamp_limit() -> None:
    """Defaults apply for None; out-of-range limits are clamped with a note."""
    assert [
        clamp_limit(None, 10, 20),
        clamp_limit(5, 10, 20),
        clamp_limit(99, 10, 20),
        clamp_limit(0, 10, 20),
    ] == [
        (10, None),
        (5, None),
        (20, "[limit 99 is above the maximum 20; showing up to 20]"),
        (1, "[limit 0 is below 1; showing up to 1]"),
    ]


@pytest.mark.parametrize(
    ("given", "bare"),
    [
        ('"Order Details"', "Order Details"),
        ("[Order Details]", "Order Details"),
        ("`x`", "x"),
        ("'x'", "x"),
        ('"say ""hi"""', 'say "hi"'),
        ("main.Track", "Track"),
        ('main."a b"', "a b"),
        ("  Track ", "Track"),
        ('"', '"'),
        ("[]", ""),
    ],
)
def test_unquote_name(given: str, bare: str) -> None:
    """Names copied with SQL quoting or a main. prefix come back bare."""
    assert unquote_name(given) == bare


def test_echo_cuts_long_values() -> None:
    """A bad value is echoed as repr, cut after 60 characters."""
    assert echo("abc") == "'abc'"
    assert echo("x" * 100) == "'" + "x" * 59 + "…"


def test_lone_surrogate_in_a_text_argument_is_a_problem() -> None:
    """A lone surrogate (not encodable as UTF-8) is named with its position, never passed on."""
    assert parse_args("run_query", {"sql": "SELECT '\ud800'"}) == ArgProblem(
        "run_query got \"sql\" with an invalid character ('\\ud800' at position 8); remove it; "
        'call it as {"tool": "run_query", "args": {"sql": "SELECT ..."}}'
    )


def test_huge_integers_are_described_not_printed() -> None:
    """A limit with thousands of digits is clamped and described by its size."""
    limit = parse_count(10**4000)
    assert clamp_limit(limit, 10, 20) == (
        20,
        "[limit a number of about 4,001 digits is above the maximum 20; showing up to 20]",
    )
    assert parse_count("9" * 4400) is None
    assert echo(-(10**5000)) == "a number of about 5,001 digits"


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_every_example_call_is_a_valid_call(tool: str) -> None:
    """The example a problem text shows is itself a call whose arguments parse."""
    parsed = parse_args(tool, json.loads(TOOLS[tool].example))
    assert isinstance(parsed, dict)
    assert sorted(parsed) == sorted(p.name for p in TOOLS[tool].params)

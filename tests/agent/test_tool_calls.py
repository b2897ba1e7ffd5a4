"""Reading completions: think blocks, tool calls in every shape, problems, the final SQL."""

from __future__ import annotations

import json

import pytest

from agent.episode import ToolCall
from agent.final_sql import last_bare_statement, last_sql_fence, read_final_sql
from agent.replies import ParsedCompletion, parse_completion, split_think


def extract_final_sql(text: str) -> str | None:
    """The answer SQL `read_final_sql` finds in `text`, without its note."""
    final = read_final_sql(text)
    return None if final is None else final.sql


TOOL_LIST = (
    "list_tables, describe_table, foreign_keys, join_path, sample_rows, distinct_values, run_query, submit_sql"
)
JSON_HINT = (
    'write {"tool": "<name>", "args": {...}} with double quotes around keys and strings, '
    'and \\" for a double quote inside a string'
)


def test_think_then_one_call() -> None:
    """The think block is read and the call after it parsed."""
    text = '<think>List first.</think>\n{"tool": "list_tables", "args": {}}'
    assert parse_completion(text) == ParsedCompletion(
        think="List first.",
        calls=(ToolCall("list_tables", {}),),
        problems=(),
        body='\n{"tool": "list_tables", "args": {}}',
    )


def test_calls_inside_think_are_not_run() -> None:
    """JSON drafted inside <think> is thinking, not a call."""
    parsed = parse_completion('<think>maybe {"tool": "run_query", "args": {"sql": "X"}}</think>ok')
    assert (parsed.think, parsed.calls, parsed.problems) == (
        'maybe {"tool": "run_query", "args": {"sql": "X"}}',
        (),
        (),
    )


def test_unclosed_think_is_all_thinking() -> None:
    """A completion cut inside <think> has its thinking and no calls, flagged unclosed."""
    assert parse_completion('<think>plan {"tool": "list_tables"') == ParsedCompletion(
        think='plan {"tool": "list_tables"', calls=(), problems=(), body="", think_unclosed=True
    )


def test_closing_tag_without_opening_tag() -> None:
    """Text before a lone </think> is thinking (the template opened the block)."""
    assert split_think('plan</think>{"tool": "list_tables"}') == ("plan", '{"tool": "list_tables"}', False)


def test_no_think_block() -> None:
    """Without tags there is no thinking and the whole text is the body."""
    assert split_think("just text") == (None, "just text", False)


def test_several_calls_in_fences_prose_and_lists() -> None:
    """Every call is found: in a json fence, in prose, in a JSON list, with braces inside strings."""
    text = (
        "Sure.\n```json\n"
        '{"tool": "describe_table", "args": {"table_name": "T"}}\n```\n'
        'and {"tool":"run_query","args":{"sql":"SELECT \'{\' FROM t WHERE a = \'}\'"}} then\n'
        '[{"tool": "list_tables", "args": {}}, '
        '{"tool": "sample_rows", "args": {"table_name": "a", "limit": 3}}]'
    )
    assert parse_completion(text).calls == (
        ToolCall("describe_table", {"table_name": "T"}),
        ToolCall("run_query", {"sql": "SELECT '{' FROM t WHERE a = '}'"}),
        ToolCall("list_tables", {}),
        ToolCall("sample_rows", {"table_name": "a", "limit": 3}),
    )


def test_multiline_sql_inside_a_json_string_is_accepted() -> None:
    """Raw newlines inside a JSON string (invalid strict JSON) are read as newlines."""
    text = '{"tool": "run_query", "args": {"sql": "SELECT a\nFROM t"}}'
    assert parse_completion(text).calls == (ToolCall("run_query", {"sql": "SELECT a\nFROM t"}),)


def test_name_arguments_spelling_and_args_as_string() -> None:
    """{"name", "arguments"} and "args" given as a JSON string are accepted."""
    text = (
        '{"name": "describe_table", "arguments": "{\\"table_name\\": \\"x\\"}"}'
        '{"tool": "Join_Path", "arguments": {"table_a": "a", "table_b": "b"}}'
    )
    assert parse_completion(text).calls == (
        ToolCall("describe_table", {"table_name": "x"}),
        ToolCall("join_path", {"table_a": "a", "table_b": "b"}),
    )


def test_arguments_next_to_the_tool_key_are_accepted() -> None:
    """Arguments written beside "tool" instead of inside "args" are used as the args."""
    assert parse_completion('{"tool": "describe_table", "table_name": "x"}').calls == (
        ToolCall("describe_table", {"table_name": "x"}),
    )


def test_doubled_braces_still_yield_the_call() -> None:
    """{{...}} (format-string style) still yields the inner call."""
    assert parse_completion('{{"tool": "list_tables", "args": {}}}').calls == (ToolCall("list_tables", {}),)


def test_list_tables_without_args_is_fine() -> None:
    """list_tables needs no arguments, so a missing "args" is not a problem."""
    assert parse_completion('{"tool": "list_tables"}') == ParsedCompletion(
        None, (ToolCall("list_tables", {}),), (), '{"tool": "list_tables"}'
    )


def test_problems_for_unknown_tool_missing_args_bad_name_and_bad_args() -> None:
    """Each unusable call gives one short corrective message, in order; good calls still count."""
    text = (
        '{"tool": "describe"} {"tool": "describe_table"} {"tool": 3} '
        '{"tool": "run_query", "args": ["SELECT 1"]} {"tool": "run_query", "args": "SELECT 1"} '
        '{"tool": "list_tables", "args": null}'
    )
    parsed = parse_completion(text)
    assert parsed.calls == (ToolCall("list_tables", {}),)
    assert parsed.problems == (
        f'unknown tool "describe"; did you mean describe_table? the tools are: {TOOL_LIST}',
        'the describe_table call has no "args"; write {"tool": "describe_table", "args": {...}} '
        "with its arguments",
        f'a call needs "tool" set to a tool name, one of: {TOOL_LIST}',
        'the "args" of the run_query call must be a JSON object like {"table_name": "..."}',
        'the "args" of the run_query call is a string that is not JSON (Expecting value); write '
        '"args" as an object, e.g. {"tool": "run_query", "args": {...}}',
    )


def test_broken_json_is_reported_with_a_snippet() -> None:
    """A call that is not valid JSON gives a problem quoting its start and the JSON error."""
    parsed = parse_completion('{"tool": "run_query", "args": {"sql": "SELECT "Name" FROM t"}} trailing')
    assert parsed.calls == ()
    assert parsed.problems == (
        'could not read the call {"tool": "run_query", "args": {"sql": "SELECT "Name" FROM t"… '
        f"as JSON (Expecting ',' delimiter); {JSON_HINT}",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"tool": "run_query", "args": {"sql": "SELECT 1"',
            'could not read the call {"tool": "run_query", "args": {"sql": "SELECT 1" as JSON '
            "(Expecting ',' delimiter)",
        ),
        (
            "{'tool': 'list_tables', 'args': {}}",
            "could not read the call {'tool': 'list_tables', 'args': {}} as JSON "
            "(Expecting property name enclosed in double quotes)",
        ),
    ],
)
def test_truncated_and_single_quoted_calls_are_problems(text: str, message: str) -> None:
    """Cut-off JSON and Python-style quotes are reported, never raised."""
    assert parse_completion(text).problems == (f"{message}; {JSON_HINT}",)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "}",
        "{}{}{",
        '{"tool"',
        '{"tool": {"tool": {"tool": 1}}}',
        "<think>",
        "</think>",
        "<think></think></think><think>",
        '{"tool": "run_query", "args": {"sql": 5}}',
        "\x00\ufffd{" * 50,
        '[{"tool": []}]',
        '{"tool": "submit_sql", "args": "[1, 2]"}',
    ],
)
def test_malformed_outputs_never_raise(text: str) -> None:
    """Any text parses to a ParsedCompletion without raising."""
    assert isinstance(parse_completion(text), ParsedCompletion)
    extract_final_sql(text)


def test_final_sql_prefers_submit_sql() -> None:
    """A submit_sql call wins over a fence in the same answer."""
    text = '{"tool": "submit_sql", "args": {"sql": " SELECT 9 "}}\n```sql\nSELECT 1\n```'
    assert extract_final_sql(text) == "SELECT 9"


def test_final_sql_takes_the_last_sql_fence() -> None:
    """Among several fences the last ```sql one is the answer; thinking is ignored."""
    text = "<think>```sql\nSELECT 0\n```</think>\n```sql\nSELECT 1;\n```\nor\n```SQL\nSELECT 2\n```"
    assert extract_final_sql(text) == "SELECT 2"


def test_fences_unlabelled_json_and_unclosed() -> None:
    """Unlabelled fences count when they hold a query; json fences never; an unclosed one does."""
    assert last_sql_fence("```\nSELECT 3\n```") == "SELECT 3"
    assert last_sql_fence('```json\n{"a": 1}\n```') is None
    assert last_sql_fence("```\nhello\n```") is None
    assert last_sql_fence("```sql\nSELECT 4 FROM t") == "SELECT 4 FROM t"


def test_final_sql_uses_a_run_query_call_before_bare_text() -> None:
    """A query tested in the answer turn is taken when there is no submit_sql or fence."""
    assert extract_final_sql('SELECT 0\n{"tool": "run_query", "args": {"sql": "SELECT 5"}}') == "SELECT 5"


@pytest.mark.parametrize(
    ("text", "sql"),
    [
        ("Final answer: SELECT a FROM t WHERE b = 'x;y'; done", "SELECT a FROM t WHERE b = 'x;y'"),
        ("Select the rows.\nSELECT a\nFROM t\n\nThat is it.", "SELECT a\nFROM t"),
        ("select a,\n\nb from t\n\n\nwhere x = 1\n\nWhere is it?", "select a,\n\nb from t\n\n\nwhere x = 1"),
        ("SELECT a FROM t WHERE x IN (\n\n1, 2)\n\nDone.", "SELECT a FROM t WHERE x IN (\n\n1, 2)"),
        ("SELECT name FROM t WHERE name = 'a\n\nb'\n\nok", "SELECT name FROM t WHERE name = 'a\n\nb'"),
        ("SELECT a FROM t\n\nOrder matters here.", "SELECT a FROM t"),
        ("SELECT 1\n\nSELECT 2", "SELECT 2"),
        ("WITH x AS (SELECT 1) SELECT * FROM x", "WITH x AS (SELECT 1) SELECT * FROM x"),
        ("with x(n) as (select 1) select n from x;", "with x(n) as (select 1) select n from x"),
        ("The answer is `SELECT name FROM t`.", None),
        ("`SELECT name FROM t`", "SELECT name FROM t"),
        ("- SELECT 1;\n- SELECT 2;", "SELECT 2"),
        ("With this we answer.", None),
        ("Select the best one.", None),
        ("<think>SELECT 1</think>nothing here", None),
    ],
)
def test_bare_statements(text: str, sql: str | None) -> None:
    """Bare SQL is read from a line start (after a label or list mark) to `;`, a blank line or `."""
    assert extract_final_sql(text) == sql


@pytest.mark.parametrize(
    "text",
    [
        "SELECT count(*)\nFROM Track\n\nWHERE MediaTypeId = 2",
        "SELECT a FROM t WHERE\n\nx = 1\n\n  AND y = 2\n\nORDER BY a",
        "SELECT a FROM t\n\n-- the newest first\nORDER BY a DESC",
        "SELECT a FROM t\n\nUNION\n\nSELECT b FROM u",
        "SELECT a\n\n, b FROM t",
        "SELECT a FROM t WHERE b =\n\n\n  2",
        "select a from t\n\n\norder by a\n\nlimit 3",
    ],
)
def test_a_bare_statement_goes_on_past_blank_lines_while_the_text_continues_it(text: str) -> None:
    """A blank line inside a statement (before a clause, after an operator or an open parenthesis)
    never cuts it."""
    assert extract_final_sql(text) == text


@pytest.mark.parametrize(
    ("text", "dropped"),
    [
        ("SELECT count(*)\nFROM Track\n\nThis counts every track.", "This counts every track."),
        ("SELECT 1; -- that is all", "-- that is all"),
        ("Answer: SELECT a FROM t;\n\nIt lists   every\nrow.", "It lists every row."),
        ("SELECT a FROM t", None),
        ("SELECT a FROM t;\n\n", None),
        ("`SELECT a FROM t`", None),
    ],
)
def test_what_follows_a_bare_statement_is_said(text: str, dropped: str | None) -> None:
    """Text after a bare answer that is not SQL is left out, and the note says what it was."""
    final = read_final_sql(text)
    assert final is not None
    assert final.note() == (
        None
        if dropped is None
        else "the answer's SQL was read up to where it ended; the text after it is not "
        f"SQL and was left out: {dropped}"
    )


def test_last_bare_statement_ignores_sql_inside_json_strings() -> None:
    """A query inside a JSON string is not bare SQL."""
    assert last_bare_statement('{"tool": "x", "args": {"sql": "SELECT 1"}}') is None


def test_deeply_nested_json_is_a_problem_not_a_crash() -> None:
    """JSON nested 3,000 levels (past Python's recursion limit) or 100 levels is a parse note."""
    deep_list = '{"tool": "run_query", "args": ' + "[" * 3000 + "]" * 3000 + "}"
    medium = '{"tool": "run_query", "args": {"sql": ' + "[" * 100 + "]" * 100 + "}}"
    as_string = '{"tool": "run_query", "args": "' + "[" * 3000 + "]" * 3000 + '"}'
    for text in (deep_list, medium):
        parsed = parse_completion(text)
        assert parsed.calls == ()
        assert len(parsed.problems) == 1 and "(nested too deeply)" in parsed.problems[0]
    assert parse_completion(as_string).problems == (
        'the "args" of the run_query call is a string that is not JSON (nested too deeply); write '
        '"args" as an object, e.g. {"tool": "run_query", "args": {...}}',
    )


def test_many_broken_calls_give_at_most_five_notes() -> None:
    """Thousands of nested broken call starts give five distinct notes and a count of the rest."""
    parsed = parse_completion('{"tool": ' * 3000 + "1" + "}" * 3000)
    assert len(parsed.problems) <= 6
    assert sum(len(p) for p in parsed.problems) < 2_000


def test_integer_with_4400_digits_is_a_problem() -> None:
    """A number past Python's 4,300-digit conversion limit is reported, not raised."""
    parsed = parse_completion(
        '{"tool": "sample_rows", "args": {"table_name": "t", "limit": ' + "9" * 4400 + "}}"
    )
    assert parsed.calls == ()
    assert parsed.problems == (
        'could not read the call {"tool": "sample_rows", "args": {"table_name": "t", "limit":… '
        f"as JSON (a number with too many digits); {JSON_HINT}",
    )


def test_unknown_tool_name_is_echoed_cut_and_escaped() -> None:
    """A 100 KB tool name with control characters is echoed on one line, cut to 60 characters."""
    parsed = parse_completion(json.dumps({"tool": "x\n" * 50_000, "args": {}}))
    assert parsed.problems[0].startswith('unknown tool "' + "x\\n" * 30 + '…[+99,940 chars]"; ')

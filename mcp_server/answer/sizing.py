"""An answer's size as clients count it (its text plus its structured content), kept within budget.

Claude Code warns about tool output past 10k tokens and, unless a tool declares
`_meta["anthropic/maxResultSizeChars"]`, keeps outputs past 50,000 characters out of the
conversation (it saves them to a file). With the default limits an answer stays under
DEFAULT_ANSWER_CHARS; a server configured for larger answers declares the size it allows, at
most MAX_ANSWER_CHARS, and no answer is ever larger than that figure.

What is counted: the text content and the structured content as compact JSON, together, in
characters as a JavaScript client counts them. A client hands its model one or the other (Claude
Code the structured content when there is some, else the text), so neither can exceed the
declared figure.

Claude Code, like most MCP hosts, is JavaScript: it measures a string's `length` (UTF-16 code
units, so a character outside the BMP, an emoji, counts 2) and writes numbers as
`JSON.stringify` does (`1e+20` becomes `100000000000000000000`). Python's `len` and `json.dumps`
count both differently, by up to 4 times for a row of such numbers: a limit checked with them
could be exceeded on the client (`text_chars`, `json_chars`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from mcp_types import CallToolResult, TextContent

from agent import clip, differing_excerpt, plural

from ..config.limits import DEFAULT_ANSWER_CHARS, MAX_ANSWER_CHARS, AnswerLimits, LimitName
from .answer_text import TextView, render_answer_text
from .output import AnswerOutput, Candidate

__all__ = [
    "DEFAULT_ANSWER_CHARS",
    "MAX_ANSWER_CHARS",
    "answer_chars",
    "fitted_response",
    "js_number_chars",
    "json_chars",
    "small_answer",
    "text_chars",
]

TRACE_ARG_CHARS = 200  # trace arguments once the answer has to shrink
CANDIDATE_SQL_CHARS = 300  # the other samples' SQL once the answer has to shrink (around where it differs)
ECHO_CHARS = 500  # question, error and note echoed back once the answer has to shrink
TEXT_SQL_CHARS = 2_000  # the text's SQL, once the answer has to shrink
KEPT_TRACE_CALLS = 5  # the last tool calls kept before the trace goes entirely
NAME_CHARS = 200  # a column or table name once the answer has to shrink
ROWS_SLACK = 64  # characters kept free when rows are cut: the note's and the text's counts grow with them
KEPT_TABLES = 50  # tables read listed once the answer has to shrink
# What is left of an answer that does not fit even without its rows: its essentials.
ESSENTIAL_ITEMS = 20  # column names, tables read
ESSENTIAL_CANDIDATES = 3  # the most voted results, their SQL clipped
ESSENTIAL_CHARS = 80  # each of those names and SQL
# An answer within all three is built on the event loop, a larger one in a thread (small_answer).
SMALL_ANSWER_CELLS = 200
SMALL_ANSWER_TRACE = 16
SMALL_ANSWER_CHARS = 8_000  # of the question, the SQL and the cells
# Exponents of d.ddd × 10**n where Python's repr and JavaScript switch to writing one.
_PYTHON_LARGE_EXPONENT, _JS_LARGE_EXPONENT = 16, 21
_PYTHON_SMALL_EXPONENT, _JS_SMALL_EXPONENT = -4, -7
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # as JSON.stringify writes
_STRING_OR_EXPONENT_FLOAT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|(-?\d+(?:\.\d+)?e[+-]\d+)')


def answer_chars(text: str, structured: dict[str, Any]) -> int:
    """The size of an answer as a client reads it: its text and its structured content as JSON."""
    return text_chars(text) + json_chars(structured)


class AnswerTooLarge(RuntimeError):
    """Our bug: every step of fitted_response was taken and the answer still exceeds its budget."""


def small_answer(answer: AnswerOutput) -> bool:
    """True for an answer small enough to build on the event loop (a verified hit, a count, a
    short list): building it takes about as long as handing it to a thread and back."""
    if (
        len(answer.rows) * max(len(answer.columns), 1) > SMALL_ANSWER_CELLS
        or len(answer.trace) > SMALL_ANSWER_TRACE
        or len(answer.candidates) > 1
    ):
        return False
    cell_chars = sum(len(cell) if isinstance(cell, str) else 32 for row in answer.rows for cell in row)
    return len(answer.question) + len(answer.sql or "") + cell_chars <= SMALL_ANSWER_CHARS


def fitted_response(answer: AnswerOutput, limits: AnswerLimits) -> CallToolResult:
    """The answer's CallToolResult, shrunk step by step (least useful parts first) to fit its budget.

    The rows already fit --max-result-bytes (the SQLite worker cut them); what may still overflow
    is what the model wrote (its SQL, its trace, other samples' SQL), what the text repeats, and
    what a JavaScript client counts longer than the worker did (numbers, emoji). The budget is
    the figure the tool declares: the steps end with an answer that fits, whatever it held.
    """
    budget = limits.answer_chars
    view = TextView()
    text, structured = _render(answer, limits, view)
    size = answer_chars(text, structured)
    for step in _STEPS:
        if size <= budget:
            break
        shrunk, shown = step(answer, view, limits, budget)
        if shrunk == answer and shown == view:  # nothing of this kind to cut
            continue
        answer, view = shrunk, shown
        text, structured = _render(answer, limits, view)
        size = answer_chars(text, structured)
    if size > budget:
        raise AnswerTooLarge(f"the answer takes {size:,} characters after every cut, more than {budget:,}")
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def _render(answer: AnswerOutput, limits: AnswerLimits, view: TextView) -> tuple[str, dict[str, Any]]:
    return render_answer_text(answer, limits, view), answer.model_dump(mode="json")


_Step = Callable[[AnswerOutput, TextView, AnswerLimits, int], tuple[AnswerOutput, TextView]]


def _clip_trace_arguments(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    trace = [
        entry.model_copy(
            update={
                "arguments": {
                    k: clip(v, TRACE_ARG_CHARS) if isinstance(v, str) else v for k, v in entry.arguments.items()
                }
            }
        )
        for entry in answer.trace
    ]
    return answer.model_copy(update={"trace": trace}), view


def _clip_candidate_sql(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return answer.model_copy(update={"candidates": _candidates_cut(answer, CANDIDATE_SQL_CHARS)}), view


def _candidates_cut(answer: AnswerOutput, limit: int, count: int | None = None) -> list[Candidate]:
    """The first `count` candidates with their SQL cut to about `limit` characters: the answer's own
    from its start (`sql` holds it whole), each other's around where it differs from the answer's."""

    def cut(sql: str | None) -> str | None:
        if sql is None or sql == answer.sql:
            return None if sql is None else clip(sql, limit)
        return differing_excerpt(sql, answer.sql, limit)

    return [c.model_copy(update={"sql": cut(c.sql)}) for c in answer.candidates[:count]]


def _clip_similar_verified(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    similar = [
        s.model_copy(update={"sql": clip(s.sql, CANDIDATE_SQL_CHARS), "question": clip(s.question, ECHO_CHARS)})
        for s in answer.similar_verified
    ]
    return answer.model_copy(update={"similar_verified": similar}), view


def _smaller_text_table(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return answer, replace(view, rows=3, columns=8)


def _keep_last_calls(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return _trace_kept(answer, KEPT_TRACE_CALLS), view


def _drop_trace(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return _trace_kept(answer, 0), view


def _drop_columns_read(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return answer.model_copy(update={"columns_read": {}, "tables": answer.tables[:KEPT_TABLES]}), view


def _clip_names(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    """Column and table names, and a verified entry's question, clipped (a database may hold long ones)."""
    verified = (
        None
        if answer.verified is None
        else answer.verified.model_copy(update={"question": clip(answer.verified.question, ECHO_CHARS)})
    )
    return answer.model_copy(
        update={
            "columns": [clip(c, NAME_CHARS) for c in answer.columns],
            "tables": [clip(t, NAME_CHARS) for t in answer.tables],
            "verified": verified,
        }
    ), view


def _cut_rows(
    answer: AnswerOutput, view: TextView, limits: AnswerLimits, budget: int
) -> tuple[AnswerOutput, TextView]:
    """Keep as many of the first rows as the whole answer fits (the text's table shrinks with them)."""
    if not answer.rows:
        return answer, view

    def kept(count: int) -> AnswerOutput:
        note = _rows_note(count, budget)
        if answer.note is not None:  # the worker cut the rows already: say both
            note = f"{answer.note}; then {note}"
        return answer.model_copy(
            update={
                "rows": answer.rows[:count],
                "truncated": True,
                "limits_hit": _with_result_bytes(answer),
                "note": note,
            }
        )

    def size(count: int) -> int:
        return answer_chars(*_render(kept(count), limits, view))

    # Each row adds its JSON and a comma; the text's table, which shows the first few, adds at
    # most what it does with all of them; a slack covers the note's and the text's counts.
    weights = [json_chars(row) + 1 for row in answer.rows]
    shown = min(view.rows, len(weights))
    table = max(0, size(shown) - size(0) - sum(weights[:shown]))
    room = budget - size(0) - table - ROWS_SLACK
    count, used = 0, 0
    for weight in weights:
        if used + weight > room:
            break
        used, count = used + weight, count + 1
    while count > 0 and size(count) > budget:  # the estimate fell short: a quarter fewer each time
        count = count * 3 // 4
    return kept(count), view


def _clip_echoes(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return answer.model_copy(
        update={
            field: clip(value, ECHO_CHARS)
            for field in ("question", "error", "note", "last_reply")
            if isinstance(value := getattr(answer, field), str)
        }
    ), view


def _clip_text_sql(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return answer, replace(view, sql_chars=TEXT_SQL_CHARS)


def _essentials(
    answer: AnswerOutput, view: TextView, _: AnswerLimits, budget: int
) -> tuple[AnswerOutput, TextView]:
    """What an answer too large even without its rows keeps: its SQL, counts and the start of its lists."""
    candidates = _candidates_cut(answer, ESSENTIAL_CHARS, ESSENTIAL_CANDIDATES)
    note = (
        f"the answer did not fit {budget:,} characters even without its rows: only its SQL, the "
        f"first {plural(min(ESSENTIAL_ITEMS, len(answer.columns)), 'column name')} and counts are "
        "kept; ask for fewer columns or an aggregate (COUNT, SUM, GROUP BY)"
    )
    return answer.model_copy(
        update={
            "rows": [],
            "truncated": answer.truncated or bool(answer.rows),
            "columns": [clip(c, ESSENTIAL_CHARS) for c in answer.columns[:ESSENTIAL_ITEMS]],
            "tables": [clip(t, ESSENTIAL_CHARS) for t in answer.tables[:ESSENTIAL_ITEMS]],
            "columns_read": {},
            "candidates": candidates,
            "similar_verified": [],
            "prompt_cache": [],
            "trace": [],
            "trace_omitted": answer.trace_omitted + len(answer.trace),
            "limits_hit": _with_result_bytes(answer),
            "note": note,
        }
    ), view


def _clip_structured_sql(
    answer: AnswerOutput, view: TextView, limits: AnswerLimits, budget: int
) -> tuple[AnswerOutput, TextView]:
    """The very last cut: the structured SQL itself, when it alone leaves no room (it no longer runs)."""
    sql = answer.sql
    if sql is None:
        return answer, view
    note = f"{answer.note}; " if answer.note else ""

    def cut(keep: int) -> AnswerOutput:
        return answer.model_copy(
            update={
                "sql": f"{sql[:keep]}\n-- … {len(sql) - keep:,} more characters cut here",
                "note": f"{note}the SQL ({len(sql):,} characters) was cut to fit {budget:,} characters: "
                "it does not run as it stands",
            }
        )

    low, high = 0, len(sql)
    while low < high:
        middle = (low + high + 1) // 2
        if _fits(cut(middle), limits, view, budget):
            low = middle
        else:
            high = middle - 1
    return cut(low), view


def _fits(answer: AnswerOutput, limits: AnswerLimits, view: TextView, budget: int) -> bool:
    return answer_chars(*_render(answer, limits, view)) <= budget


def _with_result_bytes(answer: AnswerOutput) -> list[LimitName]:
    """The answer's limits_hit, naming result_bytes (its size) too."""
    return answer.limits_hit if "result_bytes" in answer.limits_hit else [*answer.limits_hit, "result_bytes"]


def _trace_kept(answer: AnswerOutput, count: int) -> AnswerOutput:
    kept = answer.trace[len(answer.trace) - count :] if count else []
    return answer.model_copy(
        update={"trace": kept, "trace_omitted": answer.trace_omitted + len(answer.trace) - len(kept)}
    )


def _rows_note(kept: int, budget: int) -> str:
    return (
        f"the answer was cut to fit {budget:,} characters: only the first {plural(kept, 'row')} "
        "kept; ask for fewer columns, shorter values (substr) or an aggregate (COUNT, SUM, "
        "GROUP BY) to get all of it"
    )


# In order: the least useful to the reader first; the structured SQL, which no longer runs once
# cut, last of all.
_STEPS: tuple[_Step, ...] = (
    _clip_trace_arguments,
    _clip_candidate_sql,
    _clip_similar_verified,
    _smaller_text_table,
    _keep_last_calls,
    _drop_trace,
    _drop_columns_read,
    _clip_names,
    _cut_rows,
    _clip_echoes,
    _clip_text_sql,
    _essentials,
    _clip_structured_sql,
)


def text_chars(text: str) -> int:
    """`text`'s length in UTF-16 code units, as JavaScript's `String.length` counts it."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def json_chars(value: Any) -> int:
    """The length of `value` as compact JSON (`JSON.stringify`), counted as JavaScript does
    (never less; a float Python writes as `12.0` counts its 2 extra characters)."""
    dumped = _COMPACT.encode(value)
    return text_chars(dumped) + _number_excess(dumped)


def js_number_chars(number: float) -> int:
    """The length of a float as `JSON.stringify` writes it.

    Python's repr and JavaScript pick the same shortest round-trip digits; they differ in where
    they switch to an exponent (Python below 1e-4 and from 1e16, JavaScript below 1e-6 and from
    1e21), in Python's `.0` on whole numbers, and in its two-digit exponents (`1e-07`).
    """
    if not math.isfinite(number):
        return 4  # `null`
    if number == 0:
        return 1  # 0, and -0 too
    text = repr(number)
    mantissa, _, power = text.partition("e")
    if not power:  # 12.5, 0.0001, 12.0 (JavaScript: 12)
        return len(text) - 2 if text.endswith(".0") else len(text)
    sign = 1 if mantissa.startswith("-") else 0
    digits = len(mantissa) - sign - (1 if "." in mantissa else 0)
    exponent = int(power)  # number = d.ddd × 10**exponent
    if _PYTHON_LARGE_EXPONENT <= exponent < _JS_LARGE_EXPONENT:  # 100000000000000000000
        return sign + exponent + 1
    if _JS_SMALL_EXPONENT < exponent < _PYTHON_SMALL_EXPONENT:  # 0.0000015
        return sign + 1 - exponent + digits
    return len(text) - 1 if -10 < exponent < 0 else len(text)  # 1e-7, where Python writes 1e-07


def _number_excess(dumped: str) -> int:
    """How much longer the floats of Python's JSON `dumped` are in JavaScript's.

    Only floats Python writes with an exponent (`1.5e+20`) can be longer there; one it writes
    plainly never is (`12.0` is `12` there) and counts at Python's length: a small overcount,
    never an undercount. Strings are skipped whole, so text that looks like a number is none.
    """
    if "e+" not in dumped and "e-" not in dumped:  # the common case: no float with an exponent
        return 0
    floats = (token for token in _STRING_OR_EXPONENT_FLOAT.findall(dumped) if token)
    return sum(max(0, js_number_chars(float(token)) - len(token)) for token in floats)

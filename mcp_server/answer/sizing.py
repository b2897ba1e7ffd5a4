"""An answer's size as clients count it (its text plus its structured content), kept within budget.

Claude Code warns about tool output past 10k tokens and, unless a tool declares
`_meta["anthropic/maxResultSizeChars"]`, keeps outputs past 50,000 characters out of the
conversation (it saves them to a file). With the default limits an answer stays under
DEFAULT_ANSWER_CHARS; a server configured for larger answers declares the size it allows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from mcp_types import CallToolResult, TextContent

from agent.episode_text import clip
from agent.text import plural

from ..config.limits import AnswerLimits
from ..config.settings import ServerSettings
from .output import AnswerOutput, TextView, render_answer_text

DEFAULT_ANSWER_CHARS = 40_000  # ~10k tokens: under Claude Code's warning, far under its 25k cap
RESULT_SIZE_META = "anthropic/maxResultSizeChars"  # how a tool raises Claude Code's inline limit
MAX_RESULT_SIZE_CHARS = 500_000  # the most Claude Code accepts for it
# With the default rows budget, what is left beside the rows for the text, SQL, trace and the rest.
ROOM_BESIDE_ROWS = DEFAULT_ANSWER_CHARS - ServerSettings.model_fields["max_result_bytes"].default

TRACE_ARG_CHARS = 200  # trace arguments once the answer has to shrink
CANDIDATE_SQL_CHARS = 300  # the other samples' SQL once the answer has to shrink
ECHO_CHARS = 500  # question, error and note echoed back once the answer has to shrink
TEXT_SQL_CHARS = 2_000  # the text's SQL, as the very last cut (the structured `sql` is never cut)
KEPT_TRACE_CALLS = 5  # the last tool calls kept before the trace goes entirely


def answer_budget(limits: AnswerLimits) -> int:
    """Characters an answer may take: the rows' byte budget (--max-result-bytes) and room beside it."""
    return max(DEFAULT_ANSWER_CHARS, limits.max_result_bytes + ROOM_BESIDE_ROWS)


def result_size_meta(limits: AnswerLimits) -> dict[str, Any] | None:
    """The tool's `_meta` raising Claude Code's inline limit, when the limits allow larger answers."""
    budget = answer_budget(limits)
    if budget <= DEFAULT_ANSWER_CHARS:
        return None
    return {RESULT_SIZE_META: min(budget, MAX_RESULT_SIZE_CHARS)}


def answer_chars(text: str, structured: dict[str, Any]) -> int:
    """The size of an answer as a client reads it: its text and its structured content as JSON."""
    return len(text) + len(json.dumps(structured, ensure_ascii=False, separators=(",", ":")))


def fitted_response(answer: AnswerOutput, limits: AnswerLimits) -> CallToolResult:
    """The answer's CallToolResult, shrunk step by step (least useful parts first) to fit its budget.

    The rows already fit --max-result-bytes (the SQLite worker cut them); what may still overflow
    is what the model wrote (its SQL, its trace, other samples' SQL) and what the text repeats.
    """
    budget = answer_budget(limits)
    view = TextView()
    text, structured = _render(answer, limits, view)
    for step in _STEPS:
        if answer_chars(text, structured) <= budget:
            break
        answer, view = step(answer, view, limits, budget)
        text, structured = _render(answer, limits, view)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def _render(answer: AnswerOutput, limits: AnswerLimits, view: TextView) -> tuple[str, dict[str, Any]]:
    return render_answer_text(answer, limits, view), answer.model_dump(mode="json")


_Step = Callable[[AnswerOutput, TextView, AnswerLimits, int], tuple[AnswerOutput, TextView]]


def _clip_trace_arguments(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    trace = [entry.model_copy(update={"arguments": {
        k: clip(v, TRACE_ARG_CHARS) if isinstance(v, str) else v for k, v in entry.arguments.items()}})
        for entry in answer.trace]
    return answer.model_copy(update={"trace": trace}), view


def _clip_candidate_sql(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    candidates = [c.model_copy(update={"sql": None if c.sql is None else clip(c.sql, CANDIDATE_SQL_CHARS)})
                  for c in answer.candidates]
    return answer.model_copy(update={"candidates": candidates}), view


def _clip_similar_verified(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    similar = [s.model_copy(update={"sql": clip(s.sql, CANDIDATE_SQL_CHARS),
                                    "question": clip(s.question, ECHO_CHARS)})
               for s in answer.similar_verified]
    return answer.model_copy(update={"similar_verified": similar}), view


def _smaller_text_table(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return answer, replace(view, rows=3, columns=8)


def _keep_last_calls(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return _trace_kept(answer, KEPT_TRACE_CALLS), view


def _drop_trace(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return _trace_kept(answer, 0), view


def _drop_columns_read(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return answer.model_copy(update={"columns_read": {}, "tables": answer.tables[:50]}), view


def _cut_rows(answer: AnswerOutput, view: TextView, limits: AnswerLimits,
              budget: int) -> tuple[AnswerOutput, TextView]:
    """Keep the first rows while the whole answer fits (the text's table shrinks with them)."""
    empty = answer.model_copy(update={"rows": [], "note": _rows_note(0, budget)})
    room = budget - answer_chars(*_render(empty, limits, view))
    kept, used = 0, 0
    for row in answer.rows:
        # A row weighs its JSON in the structured content and about as much again in the text's table.
        weight = 2 * (len(json.dumps(row, ensure_ascii=False, separators=(",", ":"))) + 1)
        if used + weight > room:
            break
        used += weight
        kept += 1
    if kept == len(answer.rows):
        return answer, view
    hit = answer.limits_hit if "result_bytes" in answer.limits_hit else [*answer.limits_hit, "result_bytes"]
    note = _rows_note(kept, budget)
    if answer.note is not None:  # the worker cut the rows already: say both
        note = f"{answer.note}; then {note}"
    return answer.model_copy(update={"rows": answer.rows[:kept], "truncated": True, "limits_hit": hit,
                                     "note": note}), view


def _clip_echoes(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return answer.model_copy(update={
        field: clip(value, ECHO_CHARS) for field in ("question", "error", "note", "last_reply")
        if isinstance(value := getattr(answer, field), str)}), view


def _clip_text_sql(answer: AnswerOutput, view: TextView, *_: Any) -> tuple[AnswerOutput, TextView]:
    return answer, replace(view, sql_chars=TEXT_SQL_CHARS)


def _trace_kept(answer: AnswerOutput, count: int) -> AnswerOutput:
    kept = answer.trace[len(answer.trace) - count:] if count else []
    return answer.model_copy(update={
        "trace": kept, "trace_omitted": answer.trace_omitted + len(answer.trace) - len(kept)})


def _rows_note(kept: int, budget: int) -> str:
    return (f"the answer was cut to fit {budget:,} characters: only the first {plural(kept, 'row')} "
            "kept; ask for fewer columns, shorter values (substr) or an aggregate (COUNT, SUM, "
            "GROUP BY) to get all of it")


# In order: the least useful to the reader first, the SQL in the text last.
_STEPS: tuple[_Step, ...] = (_clip_trace_arguments, _clip_candidate_sql, _clip_similar_verified,
                             _smaller_text_table, _keep_last_calls, _drop_trace, _drop_columns_read, _cut_rows,
                             _clip_echoes, _clip_text_sql)

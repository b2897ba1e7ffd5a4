"""Human-facing text about an episode: progress lines, the answer table, the round-by-round trace.

Pure functions; the CLI and the MCP server both print through them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from .episode import EpisodeResult, EpisodeStatus, Round, ToolCall
from .replies import split_think
from .sqlite.types import BlobRef, ClippedText, ResultCut
from .text import escape_unsafe, plural
from .tools import call_label_args
from .tools.result_text import format_cell, render_grid
from .untrusted import SqlAuthor, sql_block

ANSWER_ROWS = 20
ANSWER_CELL_CHARS = 60
LABEL_CHARS = 60
LAST_REPLY_CHARS = 400  # of a failed answer's last reply shown to the caller
EXACT_SQL = "`ask --json`"  # where the printed answer sends a reader for the exact SQL
# How a failed answer ends when a writer held the database: waiting helps, rephrasing cannot.
BUSY_ADVICE = "another program was writing to the database: ask again once it is done"
REPHRASE_ADVICE = "try rephrasing the question or naming the tables it is about"


JsonCell = str | int | float | bool | None


def clip(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def json_cell(value: object) -> JsonCell:
    """A result cell as a JSON value: blobs as `<blob N bytes>`, other odd types as text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return str(BlobRef(len(value)))
    if isinstance(value, ClippedText):
        return f"{value.prefix}…[{value.length:,} chars]"
    return str(value)


def cut_note(cut: ResultCut, rows_kept: int) -> str:
    """What was cut from an answer's rows to fit the byte budget, and how to get less."""
    parts = []
    if cut.columns_cut:
        parts.append(f"{cut.total_columns - cut.columns_cut:,} of {cut.total_columns:,} columns kept")
    if cut.cells_cut_to is not None:
        parts.append(f"text cells clipped to {cut.cells_cut_to:,} characters")
    if cut.rows_cut:
        parts.append(f"only the first {plural(rows_kept, 'row')} kept")
    return (f"the result was cut to fit {cut.byte_budget:,} bytes ({'; '.join(parts)}); ask for "
            "fewer columns, shorter values (substr) or an aggregate (COUNT, SUM, GROUP BY) to "
            "get all of it")


def call_label(call: ToolCall) -> str:
    """A call as progress shows it: `describe_table(Track)`, `join_path(A, B)`, `run_query`.

    The model wrote the name and arguments: they are kept on one line with invisible and
    direction-changing characters shown as escapes.
    """
    shown = call_label_args(call.tool, call.args)
    name = escape_unsafe(clip(call.tool, 40))
    return f"{name}({escape_unsafe(clip(', '.join(shown), LABEL_CHARS))})" if shown else name


def progress_message(played: Round, max_tool_turns: int, limit: int = 200) -> str:
    """`round 2/6: describe_table(Track), run_query` (the final turn says `final answer`)."""
    labels: list[str] = []
    for record in played.calls:
        label = call_label(record.call)
        if label not in labels:
            labels.append(label)
    head = "final answer" if played.final else f"round {played.index}/{max_tool_turns}"
    body = ", ".join(labels) if labels else "no tool call"
    return clip(f"{head}: {body}", limit)


def render_rows(columns: tuple[str, ...], rows: tuple[tuple[Any, ...], ...], *,
                max_rows: int = ANSWER_ROWS, cell_chars: int = ANSWER_CELL_CHARS) -> str:
    """An aligned table of the first rows."""
    cells = [[format_cell(v, cell_chars) for v in row] for row in rows[:max_rows]]
    return render_grid(list(columns), cells)


def render_answer(result: EpisodeResult, *, max_rows: int = ANSWER_ROWS) -> str:
    """The SQL in a fence, then the first rows as a table, then what is missing."""
    lines = [f"status: {result.status.value} ({result.stop_reason.value}); {len(result.rounds)} rounds, "
             f"{result.tool_calls} tool calls, {result.seconds:.1f} s"]
    last_reply = last_reply_excerpt(result) if result.status is EpisodeStatus.FAILED else None
    if result.sql is None:
        lines.append(f"no SQL: {result.error or 'the model produced nothing runnable'}")
        if last_reply:
            lines.append(f"the model's last reply: {escape_unsafe(last_reply)}")
        return "\n".join(lines)
    author = SqlAuthor.LIBRARY if result.status is EpisodeStatus.VERIFIED else SqlAuthor.MODEL
    lines.append(sql_block(result.sql.strip(), author=author, ran=not result.error, exact=EXACT_SQL))
    if result.error:
        lines.append(f"error: {result.error}")
        if last_reply:
            lines.append(f"the model's last reply: {escape_unsafe(last_reply)}")
        return "\n".join(lines)
    if result.columns:
        lines.append(render_rows(result.columns, result.rows, max_rows=max_rows))
    shown = min(max_rows, len(result.rows))
    total = plural(result.row_count, "row")
    if result.truncated and result.row_count <= len(result.rows):
        total = f"more than {total}"
    lines.append(f"[{total}; first {shown} shown]" if shown < result.row_count or result.truncated
                 else f"[{total}]")
    if result.cut is not None:
        lines.append(f"[{cut_note(result.cut, len(result.rows))}]")
    return "\n".join(lines)


def render_trace(result: EpisodeResult) -> str:
    """Every round: the model's thoughts, its calls, and what each call returned."""
    out: list[str] = []
    for played in result.rounds:
        head = "final turn" if played.final else f"round {played.index}"
        cached = "unknown" if played.cached_tokens is None else played.cached_tokens
        out.append(f"=== {head}  (model {played.model_seconds:.2f} s, tools {played.tool_seconds:.3f} s, "
                   f"tokens {played.prompt_tokens}+{played.completion_tokens}, cached {cached}, "
                   f"context {played.context_tokens})")
        if played.think:
            out += ["--- thinking", played.think.strip()]
        for record in played.calls:
            args = json.dumps(record.call.args, ensure_ascii=False)
            flag = "" if record.ok else "  [error]"
            dup = "  [duplicate, not run again]" if record.duplicate else ""
            out += [f"--- {record.call.tool} {args}{flag}{dup}", record.text.rstrip()]
        for note in played.notes:
            out.append(f"--- note: {note}")
        if not played.calls and not played.think:
            out += ["--- completion", played.completion.strip()]
    return "\n".join(out)


def result_as_json(result: EpisodeResult) -> dict[str, Any]:
    """The episode result as JSON-safe data (blobs as `<blob N bytes>`)."""
    data = asdict(result)
    data["status"] = result.status.value
    data["stop_reason"] = result.stop_reason.value
    data["rows"] = [[json_cell(v) for v in row] for row in result.rows]
    data["tool_calls"] = result.tool_calls
    data["tables_seen"] = sorted(result.tables_seen)
    for played in data["rounds"]:
        for record in played["calls"]:
            record["tables"] = sorted(record["tables"])
    return data


def last_reply_excerpt(result: EpisodeResult, limit: int = LAST_REPLY_CHARS) -> str | None:
    """The model's last reply on one line, clipped: what it wrote outside its thinking (its
    calls, its SQL or its words), else the end of its thinking; None when it never replied."""
    if not result.rounds:
        return None
    thinking, outside, _ = split_think(result.rounds[-1].completion)
    said = " ".join(outside.split())
    if said:
        return clip(said, limit)
    thought = " ".join((thinking or "").split())
    if len(thought) <= limit:
        return thought
    return "…" + thought[len(thought) - limit + 1:]  # where it stopped says most


def never_called(rounds: int) -> str:
    """Why an episode whose tool turns held no call has no answer, and what to check."""
    return (f"no answer: the model called no tool in {rounds} rounds, so it never looked at the database. "
            "That is a problem of the model or its runtime, not of the question: another model may be "
            "served under this model's name, an Ollama Modelfile whose TEMPLATE is not the raw "
            "{{ .Prompt }} may rewrite the prompt, or a chat endpoint may rebuild it; run "
            "`sqale-agent doctor`, which asks the model one question and checks that it calls a tool")

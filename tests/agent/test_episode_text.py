"""Human-facing episode text: progress lines, the answer, the trace, JSON-safe results."""

from __future__ import annotations

from typing import Any

from agent.commands.ask import render_answer, result_as_json
from agent.episode import CallRecord, EpisodeResult, EpisodeStatus, Round, StopReason, ToolCall
from agent.episode_text import call_label, json_cell, progress_message
from agent.sqlite import ClippedText


def record(tool: str, args: dict[str, Any], text: str, ok: bool = True) -> CallRecord:
    return CallRecord(call=ToolCall(tool, args), ok=ok, text=text, seconds=0.01)


def make_round(index: int, calls: tuple[CallRecord, ...], final: bool = False) -> Round:
    return Round(
        index=index,
        final=final,
        completion="",
        think=None,
        calls=calls,
        notes=(),
        model_seconds=0.0,
        tool_seconds=0.0,
        prompt_tokens=0,
        completion_tokens=0,
        finish_reason="stop",
        context_tokens=0,
    )


def make_result(**changes: Any) -> EpisodeResult:
    base: dict[str, Any] = dict(
        question="q",
        evidence=None,
        sql="SELECT a FROM t",
        status=EpisodeStatus.SUBMITTED,
        stop_reason=StopReason.SUBMITTED,
        columns=("a",),
        rows=((1,), (2,)),
        row_count=2,
        truncated=False,
        error=None,
        rounds=(make_round(1, (record("run_query", {"sql": "x"}, "ok"),)),),
        tokens=10,
        seconds=1.25,
        model_seconds=1.0,
        tool_seconds=0.1,
        prompt="p",
    )
    base.update(changes)
    return EpisodeResult(**base)


def test_call_labels_and_progress_message() -> None:
    """Progress names each distinct call compactly; the final turn says `final answer`."""
    played = make_round(
        2,
        (
            record("describe_table", {"table_name": "Track"}, ""),
            record("describe_table", {"table_name": "Track"}, ""),
            record("join_path", {"table_a": "Track", "table_b": "Genre"}, ""),
            record("distinct_values", {"table_name": "Genre", "column_name": "Name"}, ""),
            record("run_query", {"sql": "SELECT 1"}, ""),
            record("sample_rows", {}, "", ok=False),
        ),
    )
    assert progress_message(played, 6) == (
        "round 2/6: describe_table(Track), join_path(Track, Genre), distinct_values(Genre.Name), "
        "run_query, sample_rows"
    )
    assert progress_message(make_round(7, (), final=True), 6) == "final answer: no tool call"
    assert call_label(ToolCall("x" * 50, {"table_name": "t"})) == "x" * 39 + "…"


def test_render_answer_shows_sql_rows_and_count() -> None:
    """The answer is a status line, the SQL in a fence, the rows and a row count."""
    assert render_answer(make_result()) == (
        "status: submitted (submit_sql); 1 rounds, 1 tool calls, 1.2 s\n"
        "```sql\nSELECT a FROM t\n```\na\n-\n1\n2\n[2 rows]"
    )


def test_render_answer_says_when_rows_are_cut() -> None:
    """A truncated answer says how many rows exist and how many are shown."""
    result = make_result(rows=tuple((i,) for i in range(30)), row_count=120, truncated=True)
    assert render_answer(result).endswith("[120 rows; first 20 shown]")


def test_render_answer_without_sql_gives_the_reason() -> None:
    """A failed episode says why there is no SQL."""
    result = make_result(sql=None, status=EpisodeStatus.FAILED, error="nothing ran", columns=(), rows=())
    assert render_answer(result).splitlines()[1] == "no SQL: nothing ran"


def test_json_cells_are_json_safe() -> None:
    """Blobs, clipped text and non-finite floats become strings; plain values pass through."""
    assert [json_cell(v) for v in (b"\x00\x01", ClippedText("ab", 9), float("nan"), 3, None)] == [
        "<blob 2 bytes>",
        "ab…[9 chars]",
        "nan",
        3,
        None,
    ]
    assert result_as_json(make_result(rows=((b"xyz",),)))["rows"] == [["<blob 3 bytes>"]]

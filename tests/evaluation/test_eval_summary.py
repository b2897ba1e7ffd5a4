"""The summary (numbers and console table), the progress line, and reading the results file back."""

from __future__ import annotations

import io
import json

import pytest
from pydantic import ValidationError

from agent.errors import ConfigError
from agent.evaluation.progress import ProgressLine, format_duration, format_progress
from agent.evaluation.records import (
    GoldRecord,
    Outcome,
    QuestionRecord,
    SampleRecord,
    describe_mismatch,
    drop_torn_tail,
    read_records,
    to_line,
)
from agent.evaluation.summary import render_summary, summarize

GOOD_GOLD = GoldRecord(status="ok", error=None, rows=1, ordered=False, tables=["t"], seconds=0.01)


def sample(
    k: int, outcome: Outcome, *, rounds: int = 3, calls: int = 4, tokens: int = 1000, saw: bool = True
) -> SampleRecord:
    """A sample record; backend outcomes get the backend_error status and no counts."""
    if outcome.is_backend:
        return SampleRecord(
            sample=k,
            seed=k,
            sql=None,
            status="backend_error",
            stop_reason=None,
            outcome=outcome,
            correct=False,
            error="down",
            result_rows=None,
            rounds=0,
            tool_calls=0,
            tokens=0,
            seconds=0.0,
            model_seconds=0.0,
            tool_seconds=0.0,
            tables_seen=[],
            saw_gold_tables=None,
            trace=None,
        )
    return SampleRecord(
        sample=k,
        seed=k,
        sql="SELECT 1",
        status="submitted",
        stop_reason="submit_sql",
        outcome=outcome,
        correct=outcome is Outcome.CORRECT,
        error=None,
        result_rows=1,
        rounds=rounds,
        tool_calls=calls,
        tokens=tokens,
        seconds=2.0,
        model_seconds=1.5,
        tool_seconds=0.5,
        tables_seen=["t"] if saw else [],
        saw_gold_tables=saw,
        trace=None,
    )


def question(
    index: int,
    db: str,
    level: str | None,
    samples: list[SampleRecord],
    *,
    voted: int = 0,
    gold: GoldRecord = GOOD_GOLD,
) -> QuestionRecord:
    """A question record with the given samples (voted sample chosen by the caller)."""
    scored = gold.status == "ok"
    chosen = samples[voted] if scored else None
    return QuestionRecord(
        key=str(index),
        index=index,
        benchmark="spider",
        model="m",
        db_id=db,
        difficulty=level,
        question=f"q{index}?",
        evidence=None,
        gold_sql="SELECT 1",
        gold=gold,
        gold_error=not scored,
        predicted_sql=chosen.sql if chosen else None,
        status=chosen.status if chosen else None,
        correct=chosen.correct if chosen else None,
        single_correct=sum(s.correct for s in samples) / len(samples) if scored else None,
        any_correct=any(s.correct for s in samples) if scored else None,
        voted_sample=voted if scored else None,
        vote_counts=[len(samples)] if scored else [],
        rounds=chosen.rounds if chosen else 0,
        tool_calls=chosen.tool_calls if chosen else 0,
        tokens=sum(s.tokens for s in samples),
        seconds=4.0,
        samples=samples,
    )


C, W, E = Outcome.CORRECT, Outcome.WRONG_RESULT, Outcome.SQL_ERROR
RECORDS = [
    question(0, "pets", "easy", [sample(0, C), sample(1, W)]),
    question(1, "pets", "hard", [sample(0, W, saw=False), sample(1, W)]),
    question(2, "zoo", "easy", [sample(0, E), sample(1, C)], voted=1),
    question(
        3,
        "zoo",
        "hard",
        [],
        gold=GoldRecord(
            status="sql_error", error="no such table: x", rows=0, ordered=False, tables=[], seconds=0.0
        ),
    ),
    question(4, "zoo", "hard", [sample(0, C), sample(1, Outcome.BACKEND_UNREACHABLE)]),
]


def test_summary_counts():
    """Accuracy voted/single/any overall and by group; gold errors apart; episode stats over runs."""
    summary = summarize(
        list(reversed(RECORDS)),
        benchmark="spider",
        model="m",
        samples=2,
        selected=6,
        missing_db_ids=["gone"],
        missing_db=1,
    )
    assert summary.questions.model_dump() == {
        "selected": 6,
        "missing_db": 1,
        "missing_db_ids": ["gone"],
        "evaluated": 5,
        "gold_errors": 1,
        "scored": 4,
    }
    assert summary.accuracy.model_dump() == {
        "questions": 4,
        "correct": 3,
        "ex": 0.75,
        "single": 0.375,
        "any": 0.75,
    }
    assert list(summary.by_difficulty) == ["easy", "hard"]
    assert summary.by_difficulty["hard"].model_dump() == {
        "questions": 2,
        "correct": 1,
        "ex": 0.5,
        "single": 0.25,
        "any": 0.5,
    }
    assert summary.by_database["zoo"].correct == 2
    assert summary.episodes.model_dump() == {
        "total": 8,
        "by_status": {"submitted": 7, "backend_error": 1},
        "outcomes": {"correct": 3, "wrong_result": 3, "backend_unreachable": 1, "sql_error": 1},
        "mean_rounds": 3.0,
        "mean_tool_calls": 4.0,
        "mean_tokens": 1000.0,
        "saw_gold_tables": 6 / 7,
    }
    assert (summary.gold_errors, summary.backend_failures, summary.mean_tokens_per_question) == (
        {"sql_error": 1},
        1,
        1750.0,
    )
    assert summary.timing.model_dump() == {
        "mean_question_seconds": 4.0,
        "mean_episode_seconds": 2.0,
        "mean_model_seconds": 1.5,
        "mean_tool_seconds": 0.5,
    }


def test_summary_table_golden():
    """The console table, byte for byte."""
    summary = summarize(
        RECORDS, benchmark="spider", model="m", samples=2, selected=6, missing_db_ids=["gone"], missing_db=1
    )
    assert render_summary(summary) == (
        "spider · model m · 2 samples per question\n"
        "questions: 6 selected, 5 evaluated, 1 gold errors, 4 scored\n"
        "left out: 1 questions whose database is missing (gone)\n"
        "gold errors: sql_error 1\n"
        "\n"
        "         n  voted EX  single  any of 2\n"
        "overall  4     75.0%   37.5%     75.0%\n"
        "easy     2    100.0%   50.0%    100.0%\n"
        "hard     2     50.0%   25.0%     50.0%\n"
        "\n"
        "database  n  voted EX  single  any of 2\n"
        "pets      2     50.0%   25.0%     50.0%\n"
        "zoo       2    100.0%   50.0%    100.0%\n"
        "\n"
        "episodes: 8 (submitted 7, backend_error 1)\n"
        "outcomes: correct 3, wrong_result 3, backend_unreachable 1, sql_error 1\n"
        "per episode: 3.0 rounds, 4.0 tool calls, 1,000 tokens; looked at every gold table: 85.7%\n"
        "per question: 1,750 tokens, 4.00 s\n"
        "backend failures: 1 episodes counted wrong; rerun with --resume to retry them\n"
    )


def test_single_sample_table_golden():
    """With one sample the table has a single EX column; no difficulty rows without labels."""
    records = [question(0, "pets", None, [sample(0, C)]), question(1, "pets", None, [sample(0, W)])]
    summary = summarize(records, benchmark="kaggledbqa", model="m", samples=1, selected=2)
    assert render_summary(summary) == (
        "kaggledbqa · model m · 1 sample per question\n"
        "questions: 2 selected, 2 evaluated, 0 gold errors, 2 scored\n"
        "\n"
        "         n     EX\n"
        "overall  2  50.0%\n"
        "\n"
        "database  n     EX\n"
        "pets      2  50.0%\n"
        "\n"
        "episodes: 2 (submitted 2)\n"
        "outcomes: correct 1, wrong_result 1\n"
        "per episode: 3.0 rounds, 4.0 tool calls, 1,000 tokens; looked at every gold table: 100.0%\n"
        "per question: 1,000 tokens, 4.00 s\n"
    )


def test_empty_summary_renders():
    """No records: dashes, no division by zero."""
    summary = summarize([], benchmark="bird", model="m", samples=1, selected=0)
    assert summary.accuracy.ex is None
    assert render_summary(summary) == (
        "bird · model m · 1 sample per question\n"
        "questions: 0 selected, 0 evaluated, 0 gold errors, 0 scored\n"
        "\n"
        "         n  EX\n"
        "overall  0   -\n"
        "\n"
        "episodes: 0\n"
        "outcomes: -\n"
        "per episode: - rounds, - tool calls, - tokens; looked at every gold table: -\n"
        "per question: - tokens, - s\n"
    )


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0s"), (42, "42s"), (370, "6m10s"), (7500, "2h05m"), (float("inf"), "?")]
)
def test_format_duration(seconds, text):
    """Durations for the ETA."""
    assert format_duration(seconds) == text


def test_progress_line_golden():
    """The progress line with voted and single accuracy, speed and ETA."""
    assert format_progress(
        done=123, total=972, scored=120, correct=60, single=48.0, samples=4, rate=2.5, eta=339.6
    ) == ("[123/972] · voted 50.0% of 120 · single 40.0% · 2.50 q/s · ETA 5m40s")
    assert (
        format_progress(done=0, total=5, scored=0, correct=0, single=0.0, samples=1, rate=0.0, eta=float("inf"))
        == "[0/5] · EX - · - q/s · ETA ?"
    )


def test_progress_prints_lines_when_not_a_terminal():
    """Off a terminal, a line every 5% and at the end; resumed records count but set no speed."""
    stream = io.StringIO()
    clock = iter([0.0, 10.0, 20.0]).__next__
    progress = ProgressLine(3, 1, stream, tty=False, clock=clock)
    progress.add_resumed([RECORDS[0]])
    progress.update(RECORDS[1])
    progress.update(RECORDS[2])
    progress.close()
    assert stream.getvalue() == (
        "[2/3] · EX 50.0% of 2 · 0.10 q/s · ETA 10s\n[3/3] · EX 66.7% of 3 · 0.10 q/s · ETA 0s\n"
    )


def test_progress_rewrites_one_line_on_a_terminal():
    """On a terminal the line is redrawn in place and ended at close."""
    stream = io.StringIO()
    progress = ProgressLine(1, 1, stream, tty=True, clock=iter([0.0, 1.0]).__next__)
    progress.update(RECORDS[0])
    progress.close()
    assert stream.getvalue() == "\r[1/1] · EX 100.0% of 1 · 1.00 q/s · ETA 0s\x1b[K\n"


def test_results_file_round_trip(tmp_path):
    """Lines read back equal what was written; a later line for a key wins; a torn tail is ignored."""
    path = tmp_path / "r.jsonl"
    changed = RECORDS[1].model_copy(update={"seconds": 9.0})
    path.write_text(
        to_line(RECORDS[0]) + to_line(RECORDS[1]) + to_line(changed) + '{"key": "4", "in', encoding="utf-8"
    )
    assert read_records(path) == {"0": RECORDS[0], "1": changed}
    drop_torn_tail(path)
    assert path.read_text(encoding="utf-8").endswith("\n")
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3
    assert read_records(tmp_path / "absent.jsonl") == {}


def test_a_foreign_line_is_an_error(tmp_path):
    """A complete line that is not a result record stops --resume with the line number and what is wrong."""
    path = tmp_path / "r.jsonl"
    path.write_text(to_line(RECORDS[0]) + json.dumps({"hello": 1}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_records(path)
    assert str(info.value) == (
        f"{path}: line 2 is not a result record of this tool (unknown field hello; "
        "missing fields any_correct, benchmark, correct and 20 more); "
        "give another --out"
    )


def test_the_mismatch_message_does_not_depend_on_the_order_of_pydantic_errors():
    """The same problems listed in any order give the same message (pydantic reorders between versions)."""
    errors = [
        {"type": "missing", "loc": ("key",), "input": {}},
        {"type": "extra_forbidden", "loc": ("hello",), "input": 1},
        {"type": "int_type", "loc": ("index",), "input": "x"},
        {"type": "missing", "loc": ("benchmark",), "input": {}},
    ]
    messages = {
        describe_mismatch(ValidationError.from_exception_data("QuestionRecord", order))
        for order in (errors, errors[::-1], errors[1:] + errors[:1])
    }
    assert messages == {
        "unknown field hello; missing fields benchmark, key; index: Input should be a valid integer"
    }

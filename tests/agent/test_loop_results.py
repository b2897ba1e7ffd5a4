"""The episode's result: final rows and cells, time and timeouts accounted, the oracle on Chinook."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.episode import EpisodeSettings, EpisodeStatus, StopReason
from agent.sqlite import BlobRef, ClippedText, Database, WorkerLimits, WorkerPool, create_database
from tests.conftest import SHARED_DATA
from tests.support.music_episodes import QUESTION, SCHEMA_SQL, run, script
from tests.support.policies import OraclePolicy, PolicyBackend, assistant_reply, tool_call

CHINOOK = SHARED_DATA / "dbs" / "Chinook_Sqlite.sqlite"

CHINOOK = SHARED_DATA / "dbs" / "Chinook_Sqlite.sqlite"


def test_final_result_keeps_result_rows_and_whole_cells(db: Database) -> None:
    """The final SQL runs once more with result_rows rows and no cell clipping."""
    long_text = "x" * 500
    backend = script(tool_call("submit_sql", sql="SELECT n FROM number"))
    result = run(QUESTION, db, backend, settings=EpisodeSettings(result_rows=50))
    assert (len(result.rows), result.row_count, result.truncated) == (50, 60, True)
    backend = script(tool_call("submit_sql", sql=f"SELECT '{long_text}' AS t"))
    assert run(QUESTION, db, backend).rows == ((long_text,),)


def test_result_cell_chars_clips_long_cells_of_the_final_result(db: Database) -> None:
    """With result_cell_chars set, long text arrives as ClippedText with its full length."""
    backend = script(tool_call("submit_sql", sql="SELECT printf('%.*c', 500, 'x') AS t, x'00' AS b"))
    result = run(QUESTION, db, backend, settings=EpisodeSettings(result_cell_chars=10))
    assert result.rows == ((ClippedText("x" * 10, 500), BlobRef(1)),)


def test_time_accounting_adds_up(db: Database) -> None:
    """Episode model/tool seconds cover the rounds; total seconds are at least their sum."""
    result = run(
        QUESTION,
        db,
        script(tool_call("run_query", sql="SELECT 1"), final="SELECT 1"),
        settings=EpisodeSettings(max_tool_turns=2),
    )
    assert result.model_seconds == sum(r.model_seconds for r in result.rounds)
    assert result.tool_seconds >= sum(r.tool_seconds for r in result.rounds) > 0
    assert result.seconds >= result.model_seconds + result.tool_seconds


CHINOOK_GOLD = {
    "How many tracks are there?": "SELECT count(*) FROM Track",
    "Which artists have more than 10 albums?": (
        "SELECT a.Name FROM Artist a JOIN Album b ON a.ArtistId = b.ArtistId "
        "GROUP BY a.ArtistId HAVING count(*) > 10 ORDER BY a.Name"
    ),
    "What are the five longest tracks?": "SELECT Name FROM Track ORDER BY Milliseconds DESC LIMIT 5",
}


CHINOOK_TABLES = {
    "How many tracks are there?": {"Track"},
    "Which artists have more than 10 albums?": {"Artist", "Album"},
    "What are the five longest tracks?": {"Track"},
}


@pytest.mark.needs_shared("dbs/Chinook_Sqlite.sqlite")
@pytest.mark.parametrize("question", list(CHINOOK_GOLD))
def test_oracle_answers_on_chinook(engine: WorkerPool, question: str) -> None:
    """On the real Chinook database the oracle's episode returns the gold SQL's rows."""
    database = Database.unruled(CHINOOK, engine)
    try:
        backend = PolicyBackend(OraclePolicy(CHINOOK_GOLD))
        result = run(question, database, backend)
        gold = database.query(CHINOOK_GOLD[question], max_rows=50)
    finally:
        database.close()
    assert (result.status, result.stop_reason, len(result.rounds)) == (
        EpisodeStatus.SUBMITTED,
        StopReason.SUBMITTED,
        3,
    )
    assert (result.columns, result.rows) == (gold.columns, gold.rows)
    assert result.tables_seen == CHINOOK_TABLES[question]


def test_statements_stopped_by_the_query_time_limit_are_counted(tmp_path: Path) -> None:
    """A run_query and an answer that overrun --query-timeout are counted for the caller."""
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    engine = WorkerPool(WorkerLimits(query_timeout=0.5))
    try:
        database = Database.unruled(create_database(tmp_path / "m.sqlite", SCHEMA_SQL), engine)
        database.query("SELECT 1", max_rows=1, timeout=30)  # start the worker outside the limit
        slow_answer = run(
            QUESTION,
            database,
            script(
                assistant_reply("slow", tool_call("run_query", sql=slow)),
                assistant_reply("fast", tool_call("run_query", sql="SELECT count(*) FROM album")),
                assistant_reply("answer", tool_call("submit_sql", sql=slow)),
            ),
        )
        fine = run(
            QUESTION, database, script(assistant_reply("answer", tool_call("submit_sql", sql="SELECT 1")))
        )
    finally:
        engine.close()
    # The submit_sql of round 3 overruns the limit and ends the episode: it falls back.
    assert (slow_answer.query_timeouts, slow_answer.answer_timed_out, slow_answer.status, slow_answer.sql) == (
        2,
        True,
        EpisodeStatus.FALLBACK,
        "SELECT count(*) FROM album",
    )
    assert (fine.query_timeouts, fine.answer_timed_out) == (0, False)

"""A database another program is writing (it holds the file locked): busy, not damaged, read once free.

SQLite's busy timeout has each statement wait for the writer first (WorkerLimits.busy_timeout_ms,
within half a query's time); past it, a query is BUSY and says a writer holds the file and to run
it again, a schema read raises DatabaseBusyError, and the model is told the same in its own words.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.episode import EpisodeSettings, EpisodeStatus
from agent.episode_text import BUSY_ADVICE
from agent.errors import DatabaseBusyError, DatabasePathError
from agent.sqlite import Database, QueryResult, QueryStatus, WorkerLimits, WorkerPool, create_database
from agent.tools import Environment, run_tool
from agent.tools.trained_text import render_failure
from mcp_server.answer.answer_text import render_answer_text
from mcp_server.answer.samples import answer_from_episode
from tests.support.music_episodes import QUESTION, SCHEMA_SQL, run, script
from tests.support.policies import assistant_reply, tool_call

BUSY_MS = 200


@contextmanager
def writer_holding(path: Path, how: str = "BEGIN EXCLUSIVE") -> Iterator[sqlite3.Connection]:
    """Another connection (the worker is another process) holding the file as a writer does."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
    try:
        if how == "exclusive mode":  # a writer in exclusive locking mode keeps the file after its commit
            conn.execute("PRAGMA locking_mode = EXCLUSIVE")
            conn.execute("INSERT INTO note (body) VALUES ('written')")
        else:
            conn.execute(how)
        yield conn
    finally:
        conn.close()


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    """Workers that wait BUSY_MS for a writer."""
    engine = WorkerPool(WorkerLimits(busy_timeout_ms=BUSY_MS))
    yield engine
    engine.close()


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """The music database, in rollback-journal mode (a WAL file's readers never wait for a writer)."""
    return create_database(tmp_path / "shop.sqlite", SCHEMA_SQL)


HOLDS = ["BEGIN EXCLUSIVE", "exclusive mode"]


@pytest.mark.parametrize("how", HOLDS)
def test_a_busy_file_is_busy_not_damaged_and_is_read_once_free(shop: Path, pool: WorkerPool, how: str) -> None:
    """Opening a file a writer holds raises DatabaseBusyError (no 'damaged' advice); a query on an open
    connection is BUSY with SQLite's words, that a writer holds it and to run it again; once the
    writer is done, the same handle reads it."""
    db = Database.unruled(shop, pool)
    with writer_holding(shop, how):
        with pytest.raises(DatabaseBusyError) as busy:
            db.schema()
        assert isinstance(busy.value, DatabaseBusyError) and not isinstance(busy.value, DatabasePathError)
        assert str(busy.value) == (
            f"{shop}: busy: another program is writing to it and held it locked for "
            "more than 0.2 s (SQLite: database is locked); try again once it is done"
        )
    assert "artist" in db.schema().names
    with writer_holding(shop, how):
        result = db.query("SELECT count(*) FROM artist", max_rows=5)
    assert (result.status, result.error) == (
        QueryStatus.BUSY,
        (
            "database is locked: another program is writing to the database and held it for more than 0.2 s; "
            "the query itself is fine: run it again in a moment"
        ),
    )
    assert db.query("SELECT count(*) FROM artist", max_rows=5).rows == ((2,),)


def test_a_reader_waits_for_a_short_write(tmp_path: Path) -> None:
    """A writer that commits within the busy timeout only delays the query (the default waits 5 s)."""
    path = create_database(tmp_path / "shop.sqlite", SCHEMA_SQL)
    engine = WorkerPool(WorkerLimits())
    try:
        db = Database.unruled(path, engine)
        assert db.query("SELECT 1", max_rows=1).ok  # the worker and its connection are up
        assert engine.limits.busy_wait_ms == 5_000
        with writer_holding(path) as writer:
            commit = threading.Timer(0.3, lambda: writer.execute("COMMIT"))
            commit.start()
            result = db.query("SELECT count(*) FROM album", max_rows=5)
            commit.join()
        assert (result.status, result.rows) == (QueryStatus.OK, ((3,),))
    finally:
        engine.close()
    assert WorkerLimits(query_timeout=2).busy_wait_ms == 1_000  # within half the query's time


def test_the_model_is_told_the_database_is_busy_in_its_own_words(shop: Path, pool: WorkerPool) -> None:
    """run_query on a busy file: the trained tools say SQLite's `Error: database is locked` and what it
    means; the rich ones the same line. An SQL error still reads exactly as before."""
    db = Database.unruled(shop, pool)
    db.schema()
    with writer_holding(shop):
        trained = run_tool(db, "run_query", {"sql": "SELECT * FROM artist"}, environment=Environment.TRAINED)
        rich = run_tool(db, "run_query", {"sql": "SELECT * FROM artist"}, environment=Environment.RICH)
    said = (
        "database is locked: another program is writing to the database and held it for more than 0.2 s; "
        "the query itself is fine: run it again in a moment"
    )
    assert (trained.ok, trained.text) == (False, f"Error: {said}")
    assert (rich.ok, rich.text) == (False, said)
    error = QueryResult(QueryStatus.SQL_ERROR, error="no such table: artst")
    assert render_failure(error, None, 10.0) == "Error: no such table: artst"


def test_an_episode_on_a_busy_file_advises_asking_again_not_rephrasing(shop: Path, pool: WorkerPool) -> None:
    """Every query of the episode meets the writer: the answer fails saying another program was writing
    and to ask again once it is done; nothing advises rephrasing the question."""
    db = Database.unruled(shop, pool)
    db.schema()  # read before the writer: the episode starts, and its statements meet the lock
    backend = script(
        assistant_reply("look", tool_call("run_query", sql="SELECT count(*) FROM album")),
        assistant_reply("answer", tool_call("submit_sql", sql="SELECT count(*) FROM album")),
    )
    with writer_holding(shop):
        result = run(QUESTION, db, backend)
    assert result.status is EpisodeStatus.FAILED
    assert result.error is not None and "rephras" not in result.error
    assert result.error.endswith(
        "and no query ran without error during exploration; another program was "
        "writing to the database: ask again once it is done"
    )
    assert "database is locked: another program is writing to the database" in result.error


def test_no_sql_while_a_writer_held_the_file_says_to_ask_again(shop: Path, pool: WorkerPool) -> None:
    """The model's queries all met the writer and it wrote no SQL: the episode and the tool's text say
    to ask again once the writer is done, not to rephrase."""
    db = Database.unruled(shop, pool)
    db.schema()
    backend = script(
        assistant_reply("look", tool_call("run_query", sql="SELECT count(*) FROM album")),
        final="I could not read the database.",
    )
    with writer_holding(shop):
        result = run(QUESTION, db, backend, settings=EpisodeSettings(max_tool_turns=2))
    assert (result.status, result.sql) == (EpisodeStatus.FAILED, None)
    assert result.error is not None and result.error.endswith(BUSY_ADVICE)
    text = render_answer_text(answer_from_episode(result, database="shop", model="m", max_rows=5))
    assert "rephras" not in text.lower() and BUSY_ADVICE in text

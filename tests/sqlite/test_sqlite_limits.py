"""agent.sqlite bounds every query: time bombs, cancellation, size bombs, byte budgets, schema size."""

from __future__ import annotations

import pickle
import threading
import time
from pathlib import Path

import pytest

from agent.sqlite import CancelToken, Database, QueryResult, QueryStatus, ResultCut, WorkerLimits, WorkerPool
from tests.support.databases import BOMBS
from tests.support.sqlite_files import DEADLINE, build_db


@pytest.fixture
def engine(deadline_engine: WorkerPool) -> WorkerPool:
    """A fresh pool with a short deadline (overrides the module-wide pool of conftest)."""
    return deadline_engine


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BOMBS))
def test_bomb_returns_within_deadline_and_next_query_works(name: str, shop: Path, engine: WorkerPool) -> None:
    """Each bomb releases the caller within the deadline plus 1 s; the next query works."""
    db = Database.unruled(shop, engine)
    db.query("SELECT 1", max_rows=1)  # the worker has started: its start-up is not timed
    start = time.monotonic()
    result = db.query(BOMBS[name], max_rows=5)
    held = time.monotonic() - start
    assert held < DEADLINE + 1.0, (name, held, result)
    assert not result.ok, result
    assert db.query("SELECT name FROM customer ORDER BY id", max_rows=5).rows == (("Ann",), ("Bob",))


# The bombs below would run this long: a cancelled one comes back well before (in half of it),
# the margin no busy machine eats. Each test starts its worker first: a cold interpreter's start
# on a loaded machine is no part of a cancellation and must not decide whether the cancel lands
# on a running query.
CANCEL_DEADLINE = 30.0


def test_cancel_token_interrupts_a_running_query(shop: Path) -> None:
    """Cancelling from another thread stops a long query well before its deadline."""
    eng = WorkerPool(WorkerLimits(query_timeout=CANCEL_DEADLINE))
    try:
        db = Database.unruled(shop, eng)
        db.query("SELECT 1", max_rows=1)  # the worker has started
        token = CancelToken()
        threading.Timer(0.3, token.cancel).start()
        start = time.monotonic()
        result = db.query(BOMBS["runaway recursive CTE"], max_rows=1, cancel=token)
        assert result.status is QueryStatus.CANCELLED
        assert time.monotonic() - start < CANCEL_DEADLINE / 2
        assert db.query("SELECT count(*) FROM customer", max_rows=1).rows == ((2,),)
    finally:
        eng.close()


def test_async_query_cancelled_by_caller_interrupts_worker(shop: Path) -> None:
    """Cancelling the awaiting task interrupts the query; the engine serves the next one."""
    import anyio

    eng = WorkerPool(WorkerLimits(query_timeout=CANCEL_DEADLINE))
    db = Database.unruled(shop, eng)

    async def scenario() -> tuple[float, QueryStatus]:
        await db.aquery("SELECT 1", max_rows=1)  # the worker has started
        start = time.monotonic()
        with anyio.move_on_after(0.3):
            await db.aquery(BOMBS["runaway recursive CTE"], max_rows=1)
        nxt = await db.aquery("SELECT count(*) FROM customer", max_rows=1)
        return time.monotonic() - start, nxt.status

    try:
        total, status = anyio.run(scenario)
        assert status is QueryStatus.OK
        assert total < CANCEL_DEADLINE / 2  # the next one did not wait for the bomb's deadline
    finally:
        eng.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["runaway recursive CTE", "instr on megabyte strings"])
def test_awaited_bomb_is_killed_at_its_deadline_while_the_loop_goes_on(
    name: str, shop: Path, engine: WorkerPool
) -> None:
    """A bomb awaited on the event loop (WorkerPool.arun: a worker idle and ready) comes back within
    the deadline plus 1 s, even one in a single C call that no progress handler interrupts (its
    worker is killed); the loop runs other tasks meanwhile, and the next query works."""
    import anyio

    db = Database.unruled(shop, engine)

    async def scenario() -> tuple[float, bool, int, tuple[tuple[object, ...], ...]]:
        await db.aquery("SELECT 1", max_rows=1)  # the worker has started and is idle
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as group:
            group.start_soon(tick)
            start = time.monotonic()
            result = await db.aquery(BOMBS[name], max_rows=5)
            held = time.monotonic() - start
            group.cancel_scope.cancel()
        after = await db.aquery("SELECT name FROM customer ORDER BY id", max_rows=5)
        return held, result.ok, ticks, after.rows

    held, ok, ticks, rows = anyio.run(scenario)
    assert held < DEADLINE + 1.0, (name, held)
    assert (ok, ticks > 5, rows) == (False, True, (("Ann",), ("Bob",)))


def test_awaited_query_cancelled_while_its_worker_starts_is_interrupted(shop: Path) -> None:
    """The first query of a pool waits in a thread for its worker to start (WorkerPool.arun's other
    way): cancelled, starting or running, it is stopped too, and the next query does not wait for it."""
    import anyio

    eng = WorkerPool(WorkerLimits(query_timeout=CANCEL_DEADLINE))
    db = Database.unruled(shop, eng)

    async def scenario() -> tuple[float, QueryStatus]:
        start = time.monotonic()
        with anyio.move_on_after(0.3):
            await db.aquery(BOMBS["runaway recursive CTE"], max_rows=1)
        nxt = await db.aquery("SELECT count(*) FROM customer", max_rows=1)
        return time.monotonic() - start, nxt.status

    try:
        total, status = anyio.run(scenario)
        assert status is QueryStatus.OK
        assert total < CANCEL_DEADLINE / 2
    finally:
        eng.close()


def test_awaited_query_cancelled_in_a_c_call_frees_its_worker(shop: Path) -> None:
    """A query cancelled inside one long C call (it never sees the cancel) is killed after the
    grace time, in a thread: the caller returns at once, and the next query gets a new worker."""
    import anyio

    eng = WorkerPool(WorkerLimits(query_timeout=CANCEL_DEADLINE))
    db = Database.unruled(shop, eng)

    async def scenario() -> tuple[float, QueryStatus]:
        await db.aquery("SELECT 1", max_rows=1)  # the worker has started and is idle
        start = time.monotonic()
        with anyio.move_on_after(0.3):
            await db.aquery(BOMBS["instr on megabyte strings"], max_rows=1)
        returned = time.monotonic() - start
        nxt = await db.aquery("SELECT count(*) FROM customer", max_rows=1)
        return returned, nxt.status

    try:
        returned, status = anyio.run(scenario)
        assert status is QueryStatus.OK
        assert returned < CANCEL_DEADLINE / 2
        assert eng.kills == 1
    finally:
        eng.close()


@pytest.mark.slow
def test_view_chain_bomb_returns_within_deadline(geo: Path, engine: WorkerPool) -> None:
    """Querying a view that doubles 17 times fails within the deadline; the next query works."""
    db = Database.unruled(geo, engine)
    db.query("SELECT 1", max_rows=1)  # the worker has started: its start-up is not timed
    start = time.monotonic()
    result = db.query("SELECT count(*) FROM chain17", max_rows=1)
    assert time.monotonic() - start < DEADLINE + 1.5, result
    assert not result.ok
    assert db.query("SELECT name FROM features", max_rows=5).rows == (("a",),)


def test_schema_kept_per_database_is_bounded(tmp_path: Path) -> None:
    """Past schema_chars, columns are left out with a note per table and one warning."""
    columns = ", ".join(f"c{i:03d}_{'n' * 200}" for i in range(100))
    script = "".join(f"CREATE TABLE t{t} ({columns});" for t in range(5))
    path = build_db(tmp_path / "wide.sqlite", script)
    eng = WorkerPool(WorkerLimits(schema_chars=50_000))
    try:
        schema = Database.unruled(path, eng).schema()
    finally:
        eng.close()
    kept = sum(len(t.columns) for t in schema.tables)
    assert sum(len(c.name) for t in schema.tables for c in t.columns) <= 50_000
    assert 0 < kept < 500
    assert schema.find("t0").note is None
    assert schema.find("t4").note == (
        "only the first 0 of 100 columns are listed: the schema is larger than the server keeps"
    )
    assert schema.warnings == (
        "the schema is larger than the 50,000 characters of names kept per database: 0 tables and "
        f"{500 - kept:,} columns are not listed (queries can still use them)",
    )


# Issue 10, section 1: results that must be cut in the worker, never shipped whole.
BALLOON_SQL = (
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r WHERE x<50), "
    "t(a) AS (SELECT printf('%.4500c','x')) SELECT " + ",".join(["a"] * 2000) + " FROM t, r"
)
SIZE_BOMBS = {
    "2,000 columns x 4,500 chars x 50 rows": (BALLOON_SQL, 50, ResultCut(262_144, 2000, 0, 100, True), 1),
    "1,100 rows x 1.5 MB": (
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r WHERE x<1100) "
        "SELECT x, printf('%.1500000c','y') FROM r",
        1100,
        ResultCut(262_144, 2, 0, None, True),
        26,
    ),
    "28 rows x 16 MB": (
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r WHERE x<28) "
        "SELECT printf('%.16000000c','z') FROM r",
        28,
        ResultCut(262_144, 1, 0, None, True),
        26,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SIZE_BOMBS))
def test_size_bomb_is_cut_in_the_worker(name: str, shop: Path) -> None:
    """Rows, cells and columns are cut to the byte budget before leaving the worker; the count
    pass holds one row at a time, so it finishes where the first rows fit."""
    sql, total, cut, kept = SIZE_BOMBS[name]
    eng = WorkerPool(WorkerLimits(query_timeout=30))
    try:
        result = Database.unruled(shop, eng).query(sql, max_rows=50, cell_limit=10_000, byte_budget=262_144)
    finally:
        eng.close()
    assert (result.status, result.total_rows, result.cut, len(result.rows)) == (
        QueryStatus.OK,
        total,
        cut,
        kept,
    )
    assert len(pickle.dumps(result)) < 300_000


def test_tool_budget_cuts_columns_and_says_how_many(shop: Path) -> None:
    """With short cells, columns past the budget are left out and counted."""
    eng = WorkerPool(WorkerLimits(query_timeout=30))
    try:
        result = Database.unruled(shop, eng).query(BALLOON_SQL, max_rows=50, cell_limit=100, byte_budget=65_536)
    finally:
        eng.close()
    assert result.cut == ResultCut(65_536, 2000, 1496, None, True)
    assert (len(result.columns), len(result.rows), result.total_rows) == (504, 1, 50)


def test_no_budget_keeps_every_row_and_column(shop: Path, engine: WorkerPool) -> None:
    """Without a byte budget only max_rows and cell_limit apply (evaluation compares whole rows)."""
    result = Database.unruled(shop, engine).query('SELECT id, note FROM "order" ORDER BY id', max_rows=5)
    assert (result.rows, result.cut) == (((1, "first"), (2, "second"), (3, "third")), None)


def test_a_pool_closed_while_a_thread_waits_on_its_worker_ends_cleanly_in_both(shop: Path) -> None:
    """Closing the pool while another thread's query runs (eval's engine, after a sample the vote
    no longer needs): the query comes back as a value, the close raises nothing, and the worker's
    pipes are closed once, whoever kills it first."""
    pool = WorkerPool(WorkerLimits(workers=1, query_timeout=5.0))
    db = Database.unruled(shop, pool)
    db.query("SELECT 1", max_rows=1)  # the worker has started
    results: list[object] = []
    running = threading.Thread(
        target=lambda: results.append(db.query(BOMBS["runaway recursive CTE"], max_rows=1))
    )
    running.start()
    time.sleep(0.3)  # the bomb is running
    pool.close()
    running.join(10)
    [result] = results
    assert (running.is_alive(), result) == (
        False,
        QueryResult(QueryStatus.KILLED, error=result.error, seconds=result.seconds),
    )

"""The owner's statements tried in the server's own process (agent/sqlite/_inline.py): a result
served from there is the one a worker gives, and whatever a bounded connection cannot bound, a
writer's lock, values bound from a question, a file swapped at the path, go to the worker."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent.sqlite import Database, HideRules, QueryResult, WorkerLimits, WorkerPool, _guard, create_database
from agent.sqlite._authorizer import AuthorizedReads
from agent.sqlite._inline import TIMEOUTS_SENT
from agent.sqlite._opening import GuardSettings
from tests.support.databases import BOMBS

SHOP = """
CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT, city TEXT, email TEXT);
CREATE TABLE "order" (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer(id), total REAL);
CREATE TABLE tagged (id INTEGER PRIMARY KEY, name TEXT, shout TEXT AS (upper(name)));
CREATE VIRTUAL TABLE note USING fts5(body);
CREATE VIEW big_orders AS SELECT * FROM "order" WHERE total > 100;
INSERT INTO customer VALUES (1, 'Ada', 'Oslo', 'a@x'), (2, 'Bo', 'Lima', 'b@x');
INSERT INTO "order" VALUES (1, 1, 50), (2, 1, 150), (3, 2, 200);
INSERT INTO tagged (id, name) VALUES (1, 'ada');
INSERT INTO note VALUES ('first note'), ('second note');
CREATE TABLE attachment (id INTEGER PRIMARY KEY, body TEXT);
INSERT INTO attachment VALUES (1, printf('%.*c', 1500000, 'x'));
"""
# Statements a bounded connection answers, as a worker does: joins (USING: reads from the program),
# aggregates, a view, windows, a result cut to the byte budget.
ANSWERED_HERE = [
    'SELECT c.name, count(*) AS orders, sum(o.total) FROM customer c JOIN "order" o '
    "ON o.customer_id = c.id GROUP BY c.id ORDER BY orders DESC",
    'SELECT name, total FROM customer JOIN "order" USING (id)',
    "SELECT * FROM big_orders",
    "SELECT name, row_number() OVER (ORDER BY name DESC), upper(substr(city, 1, 2)) FROM customer",
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 300) "
    "SELECT x, 'row ' || x FROM r",
]
# What a bounded connection leaves to a worker: one step of unbounded work (BOMBS), a function
# outside BOUNDED_FUNCTIONS, a virtual table, a generated column, a pragma, a value over a megabyte.
LEFT_TO_A_WORKER = {
    **BOMBS,
    "like": "SELECT name FROM customer WHERE name LIKE 'A%'",
    "instr": "SELECT instr(email, '@') FROM customer",
    "fts5": "SELECT body FROM note WHERE note MATCH 'second'",
    "eponymous table": "SELECT key, value FROM json_each('[1, 2]')",
    "generated column": "SELECT shout FROM tagged",
    "pragma table": "SELECT name FROM pragma_table_info('customer')",
    "pragma": "PRAGMA table_info(customer)",
    "long value": "SELECT substr(body, 1, 5) FROM attachment",
}


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return create_database(tmp_path / "shop.sqlite", SHOP)


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    """A pool of its own, so that `starts` counts this test's workers; a short deadline for the bombs."""
    workers = WorkerPool(WorkerLimits(workers=1, query_timeout=1.0, busy_timeout_ms=200))
    yield workers
    workers.close()


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements run on a guarded connection of the test's own process (workers are others)."""
    ran: list[str] = []
    original = _guard.GuardedConnection.run

    def counted(self: _guard.GuardedConnection, sql: str, **kwargs: Any) -> QueryResult:
        ran.append(sql)
        return original(self, sql, **kwargs)

    monkeypatch.setattr(_guard.GuardedConnection, "run", counted)
    return ran


async def _owner_and_worker(db: Database, sql: str, **kwargs: Any) -> tuple[QueryResult, QueryResult]:
    """The statement as the owner's, then as anybody's (always a worker's), with no time in them."""
    options: dict[str, Any] = {"max_rows": 50, "byte_budget": 2_000, **kwargs}
    owner = await db.aquery(sql, owner_sql=True, **options)
    worker = await db.aquery(sql, **options)
    return replace(owner, seconds=0.0), replace(worker, seconds=0.0)


@pytest.mark.anyio
@pytest.mark.parametrize("sql", ANSWERED_HERE)
async def test_an_owners_statement_answers_in_process_as_a_worker_would(
    sql: str, shop: Path, pool: WorkerPool, in_process: list[str]
) -> None:
    """An owner's statement a bounded connection can run is answered in this process, with no worker
    started, and its result (rows, cuts, what it read) is the worker's."""
    with Database(shop, pool, hide=HideRules()) as db:
        owner = await db.aquery(sql, max_rows=50, byte_budget=2_000, owner_sql=True)
        started = pool.starts
        worker = await db.aquery(sql, max_rows=50, byte_budget=2_000)
    assert (started, in_process, replace(owner, seconds=0.0)) == (0, [sql], replace(worker, seconds=0.0))


@pytest.mark.slow  # a bomb runs to the worker's deadline
@pytest.mark.anyio
@pytest.mark.parametrize("name", LEFT_TO_A_WORKER)
async def test_what_a_bounded_connection_cannot_bound_runs_in_a_worker(
    name: str, shop: Path, pool: WorkerPool, in_process: list[str], tmp_path: Path
) -> None:
    """A statement whose one step may do unbounded work is refused, stopped or cut short in process
    and run again in a worker: the result served is a worker's (here a fresh one's). It goes to a
    worker at once from then on: after the first refusal, after TIMEOUTS_SENT deadlines met."""
    sql = LEFT_TO_A_WORKER[name]
    reference = create_database(tmp_path / "reference.sqlite", SHOP)
    options: dict[str, Any] = {"max_rows": 50, "byte_budget": 2_000}
    with Database(shop, pool, hide=HideRules()) as db, Database(reference, pool, hide=HideRules()) as other:
        owner = await db.aquery(sql, owner_sql=True, **options)
        again = [await db.aquery(sql, owner_sql=True, **options) for _ in range(TIMEOUTS_SENT)]
        worker = await other.aquery(sql, **options)
    tries = TIMEOUTS_SENT if name in ("runaway recursive CTE", "cartesian join") else 1
    assert (replace(owner, seconds=0.0), in_process) == (replace(worker, seconds=0.0), [sql] * tries)
    assert [(a.status, a.rows) for a in again] == [(worker.status, worker.rows)] * TIMEOUTS_SENT


@pytest.mark.anyio
async def test_an_owners_statement_with_values_bound_runs_in_a_worker(
    shop: Path, pool: WorkerPool, in_process: list[str]
) -> None:
    """Values bound from a question (a template's) never run in the server's process."""
    sql = "SELECT name FROM customer WHERE city = :city"
    with Database(shop, pool, hide=HideRules()) as db:
        owner, worker = await _owner_and_worker(db, sql, params={"city": "Oslo"})
    assert (owner.rows, owner, in_process) == ((("Ada",),), worker, [])


@pytest.mark.anyio
async def test_hide_rules_hold_in_process(shop: Path, pool: WorkerPool, in_process: list[str]) -> None:
    """Under hide rules an owner's statement reads in process only what a worker lets it read: a
    hidden column is refused as the worker refuses it, a visible one answered as the worker answers."""
    hidden, visible = "SELECT name, email FROM customer", "SELECT name, city FROM customer"
    with Database(shop, pool, hide=HideRules.parse(["customer.email"])) as db:
        refused = await _owner_and_worker(db, hidden)
        answered = await _owner_and_worker(db, visible)
    assert (refused[0], refused[0].ok, answered[0], in_process) == (
        refused[1],
        False,
        answered[1],
        [hidden, visible],
    )


# Another process holds the file as a writer does (in this process, closing any descriptor of the
# file, as the check of a file opened here does, would drop its POSIX locks).
WRITER = """\
import sqlite3, sys
writer = sqlite3.connect(sys.argv[1], isolation_level=None)
writer.execute("BEGIN EXCLUSIVE")
print("holding", flush=True)
sys.stdin.readline()
"""


@pytest.mark.anyio
async def test_a_writers_lock_sends_the_statement_to_a_worker_once(
    shop: Path, pool: WorkerPool, in_process: list[str]
) -> None:
    """A writer holding the file: the statement is not waited for in process but run by a worker,
    which says the file is busy; once the writer is done it runs in process again."""
    sql = "SELECT name FROM customer ORDER BY id"
    with Database(shop, pool, hide=HideRules()) as db:
        await db.aquery(sql, max_rows=5, owner_sql=True)  # both connections open before the writer
        await db.aquery(sql, max_rows=5)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(shop)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None and writer.stdout.readline() == "holding\n"
        busy = await db.aquery(sql, max_rows=5, owner_sql=True)
        writer.communicate("done\n", timeout=30)
        free = await db.aquery(sql, max_rows=5, owner_sql=True)
    assert (busy.status.value, free.rows, in_process) == ("busy", (("Ada",), ("Bo",)), [sql, sql, sql])


@pytest.mark.anyio
async def test_a_file_swapped_at_the_path_is_read_anew_in_process(
    shop: Path, pool: WorkerPool, in_process: list[str], tmp_path: Path
) -> None:
    """Another file renamed over the path is what the next owner's statement reads, in process."""
    sql = "SELECT name FROM customer ORDER BY id"
    with Database(shop, pool, hide=HideRules()) as db:
        before = await db.aquery(sql, max_rows=5, owner_sql=True)
        swapped = create_database(
            tmp_path / "new.sqlite", "CREATE TABLE customer (id, name); INSERT INTO customer VALUES (1, 'Cy');"
        )
        os.replace(swapped, shop)
        after = await db.aquery(sql, max_rows=5, owner_sql=True)
    assert (before.rows, after.rows, in_process, pool.starts) == (
        (("Ada",), ("Bo",)),
        (("Cy",),),
        [sql, sql],
        0,
    )


@pytest.mark.anyio
async def test_a_virtual_table_added_later_is_left_to_a_worker(
    shop: Path, pool: WorkerPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtual table another program adds to a file being served is known at the next statement:
    reading it is refused in process (and answered by a worker)."""
    statuses: list[str] = []
    original = _guard.GuardedConnection.run

    def recorded(self: _guard.GuardedConnection, sql: str, **kwargs: Any) -> QueryResult:
        result = original(self, sql, **kwargs)
        statuses.append(result.status.value)
        return result

    monkeypatch.setattr(_guard.GuardedConnection, "run", recorded)
    with Database(shop, pool, hide=HideRules()) as db:
        first = await db.aquery("SELECT name FROM customer WHERE id = 1", max_rows=5, owner_sql=True)
        writer = sqlite3.connect(shop)
        writer.executescript("CREATE VIRTUAL TABLE later USING fts5(body); INSERT INTO later VALUES ('hello');")
        writer.close()
        later = await db.aquery("SELECT body FROM later", max_rows=5, owner_sql=True)
    assert (first.rows, later.rows, statuses) == ((("Ada",),), (("hello",),), ["ok", "denied"])


# Statements kept prepared in process (GuardSettings.reuse_statements): SQLite authorizes one only
# when it prepares it, and prepares it again when the schema changes.


@pytest.mark.anyio
async def test_a_kept_statement_reads_the_same_on_every_run(
    shop: Path, pool: WorkerPool, in_process: list[str]
) -> None:
    """A statement run again from its kept preparation says it read what it read when prepared: the
    view it names, which only the authorizer sees, on every run, as a worker says."""
    sql = "SELECT * FROM big_orders"
    with Database(shop, pool, hide=HideRules()) as db:
        runs = [replace(await db.aquery(sql, max_rows=50, owner_sql=True), seconds=0.0) for _ in range(3)]
        worker = replace(await db.aquery(sql, max_rows=50), seconds=0.0)
    assert (runs, in_process, "big_orders" in worker.tables_read) == ([worker] * 3, [sql] * 3, True)


@pytest.mark.anyio
async def test_a_kept_statement_is_authorized_again_when_the_schema_changes(
    shop: Path, pool: WorkerPool, tmp_path: Path
) -> None:
    """Another program changes the schema under kept statements: it adds a column a rule hides and
    redefines a view to read it. The next run in process is authorized again under
    the rules: it serves what a worker serves on the changed file, and no hidden value."""
    rules = HideRules.parse(["customer.secret*"])
    star, view = "SELECT * FROM customer ORDER BY id", "SELECT * FROM names ORDER BY 1"
    create = "CREATE VIEW names AS SELECT name FROM customer;"
    change = (
        "ALTER TABLE customer ADD COLUMN secret_code TEXT; UPDATE customer SET secret_code = 'sesame';"
        "DROP VIEW names; CREATE VIEW names AS SELECT secret_code AS name FROM customer;"
    )
    reference = create_database(tmp_path / "reference.sqlite", SHOP + create + change)
    writer = sqlite3.connect(shop)
    writer.executescript(create)
    with Database(shop, pool, hide=rules) as db, Database(reference, pool, hide=rules) as changed:
        before = [await db.aquery(sql, max_rows=5, owner_sql=True) for sql in (star, star, view, view)]
        writer.executescript(change)
        writer.close()
        after = [replace(await db.aquery(sql, max_rows=5, owner_sql=True), seconds=0.0) for sql in (star, view)]
        workers = [replace(await changed.aquery(sql, max_rows=5), seconds=0.0) for sql in (star, view)]
    assert [r.rows for r in before] == [((1, "Ada", "Oslo", "a@x"), (2, "Bo", "Lima", "b@x"))] * 2 + [
        (("Ada",), ("Bo",))
    ] * 2
    assert (after, [r.status.value for r in after], "sesame" in repr(after)) == (
        workers,
        ["hidden", "sql_error"],
        False,
    )


@pytest.mark.anyio
async def test_a_kept_statements_forgotten_reads_are_read_again(
    shop: Path, pool: WorkerPool, in_process: list[str]
) -> None:
    """Should what a kept statement read be forgotten, SQLite is made to prepare it again, so the
    authorizer sees it whole: the result is the same as before."""
    sql = "SELECT * FROM big_orders"
    with Database(shop, pool, hide=HideRules()) as db:
        first = replace(await db.aquery(sql, max_rows=50, owner_sql=True), seconds=0.0)
        for guarded in db._inline._connections.values():
            guarded._authorized = AuthorizedReads(keeps=True)  # as if its memory had run out
        again = replace(await db.aquery(sql, max_rows=50, owner_sql=True), seconds=0.0)
    assert (again, in_process, "big_orders" in again.tables_read) == (first, [sql, sql], True)


def test_a_connection_that_keeps_statements_serves_one_rule_set(shop: Path) -> None:
    """A connection that keeps its statements never runs one under another rule set than its first
    (no rules, however given, are one set): asked to, it fails as our bug does."""
    settings = GuardSettings(bounded=True, reuse_statements=True)
    guarded = _guard.GuardedConnection(shop, settings, SimpleNamespace(value=False))
    options: dict[str, Any] = {"max_rows": 5, "count_cap": 100, "cell_limit": None, "timeout": 1.0}
    try:
        first = guarded.run("SELECT name FROM customer ORDER BY id", hide=HideRules(), **options)
        second = guarded.run("SELECT name FROM customer ORDER BY id", hide=None, **options)
        with pytest.raises(RuntimeError, match="serves one rule set"):
            guarded.run("SELECT name FROM customer", hide=HideRules.parse(["customer.email"]), **options)
    finally:
        guarded.close()
    assert (first.rows, second.rows) == ((("Ada",), ("Bo",)), (("Ada",), ("Bo",)))


@pytest.mark.slow  # the bomb runs to the in-process deadline twice
@pytest.mark.anyio
async def test_a_kept_statement_stopped_by_its_deadline_holds_no_lock(shop: Path, pool: WorkerPool) -> None:
    """A kept statement stopped mid-run goes back to SQLite's keeping reset: no read is left open, so a
    writer that waits for nobody commits at once."""
    sql = BOMBS["runaway recursive CTE"]
    with Database(shop, pool, hide=HideRules()) as db:
        stopped = [await db.aquery(sql, max_rows=5, owner_sql=True) for _ in range(TIMEOUTS_SENT)]
        writer = sqlite3.connect(shop, timeout=0)
        try:
            writer.execute("INSERT INTO customer (name) VALUES ('Cy')")
            writer.commit()
        finally:
            writer.close()
        after = await db.aquery("SELECT count(*) FROM customer", max_rows=5, owner_sql=True)
    assert ([s.status.value for s in stopped], after.rows) == (["timeout"] * TIMEOUTS_SENT, ((3,),))

"""What the SQLite layer remembers between calls, and what makes it forget: the schema a
`Database` hands the event loop, and the program reads a guarded connection keeps per statement."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent.sqlite import Database, HideRules, WorkerLimits, WorkerPool, _guard, _opening, create_database

SHOP = """
CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT, city TEXT, email TEXT);
CREATE TABLE invoice (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer(id), total REAL);
CREATE INDEX invoice_customer ON invoice (customer_id);
INSERT INTO customer VALUES (1, 'Ada', 'Oslo', 'a@x'), (2, 'Bo', 'Lima', 'b@x');
INSERT INTO invoice VALUES (1, 1, 50), (2, 1, 150), (3, 2, 200);
"""
JOIN = "SELECT c.name, c.email, sum(i.total) FROM customer c JOIN invoice i USING (id) GROUP BY c.name"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return create_database(tmp_path / "shop.sqlite", SHOP)


@pytest.fixture
def engine() -> Iterator[WorkerPool]:
    """One worker, so that every Database of a test shares its guarded connection and memory."""
    pool = WorkerPool(WorkerLimits(workers=1))
    yield pool
    pool.close()


def _write(path: Path, sql: str) -> None:
    """Change the file as another program would (our own SQL, never the model's)."""
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(sql)
        conn.commit()


def _reads(db: Database, sql: str, **params: Any) -> tuple[set[str], set[tuple[str, str]]]:
    result = db.query(sql, max_rows=10, params=params or None)
    assert result.ok, result.error
    return set(result.tables_read), set(result.columns_read)


@pytest.mark.anyio
async def test_aschema_rereads_a_changed_file_at_once(shop: Path, engine: WorkerPool) -> None:
    """The schema answered on the event loop is the file's current one: a new table, then a new
    file renamed over the path, show in the very next call."""
    db = Database.unruled(shop, engine)
    assert [t.name for t in (await db.aschema()).tables] == ["customer", "invoice"]
    _write(shop, "CREATE TABLE refund (id INTEGER PRIMARY KEY, amount REAL)")
    assert [t.name for t in (await db.aschema()).tables] == ["customer", "invoice", "refund"]
    replacement = create_database(shop.with_name("new.sqlite"), "CREATE TABLE planet (name TEXT)")
    os.replace(replacement, shop)
    assert [t.name for t in (await db.aschema()).tables] == ["planet"]
    assert [t.name for t in db.schema().tables] == ["planet"]


def test_remembered_reads_are_each_statements_own(shop: Path, engine: WorkerPool) -> None:
    """Statements run in turn, each twice, report their own reads every time, never another's."""
    db = Database.unruled(shop, engine)
    statements = {
        JOIN: (
            {"customer", "invoice"},
            {
                ("customer", "id"),
                ("customer", "name"),
                ("customer", "email"),
                ("invoice", "id"),
                ("invoice", "total"),
            },
        ),
        "SELECT city FROM customer": ({"customer"}, {("customer", "city")}),
        "SELECT city FROM customer ": ({"customer"}, {("customer", "city")}),
        "SELECT total FROM invoice": ({"invoice"}, {("invoice", "total")}),
    }
    for _ in range(2):
        for sql, expected in statements.items():
            assert _reads(db, sql) == expected, sql


def test_remembered_reads_never_cross_rule_sets(shop: Path, engine: WorkerPool) -> None:
    """The same SQL on the same file under other hide rules reports what those rules let it see,
    whichever ran first and however often."""
    open_db = Database.unruled(shop, engine)
    no_email = Database(shop, engine, hide=HideRules.parse(["customer.email"]))
    no_invoice_total = Database(shop, engine, hide=HideRules.parse(["invoice.total"]))
    sql = "SELECT c.name, i.customer_id FROM customer c JOIN invoice i ON i.customer_id = c.id"
    everything = (
        {"customer", "invoice"},
        {("customer", "id"), ("customer", "name"), ("invoice", "customer_id")},
    )
    for _ in range(2):
        for db in (open_db, no_email, no_invoice_total, no_email, open_db):
            assert _reads(db, sql) == everything
    # A statement that reads a hidden column is refused under that rule, remembered or not.
    wide = "SELECT c.email, i.total FROM customer c JOIN invoice i ON i.customer_id = c.id"
    assert _reads(open_db, wide)[1] >= {("customer", "email"), ("invoice", "total")}
    for db in (no_email, no_invoice_total):
        result = db.query(wide, max_rows=10)
        assert not result.ok and result.columns_read == frozenset()
    assert _reads(open_db, wide)[1] >= {("customer", "email"), ("invoice", "total")}


def test_remembered_reads_follow_a_schema_change_and_a_new_file(shop: Path, engine: WorkerPool) -> None:
    """`SELECT *` after the table gains a column, and after another file is renamed over the
    path, reports the columns it reads now."""
    db = Database.unruled(shop, engine)
    star = "SELECT * FROM invoice"
    assert _reads(db, star) == (
        {"invoice"},
        {("invoice", "id"), ("invoice", "customer_id"), ("invoice", "total")},
    )
    _write(shop, "ALTER TABLE invoice ADD COLUMN due TEXT")
    assert _reads(db, star) == (
        {"invoice"},
        {("invoice", "id"), ("invoice", "customer_id"), ("invoice", "total"), ("invoice", "due")},
    )
    replacement = create_database(
        shop.with_name("new.sqlite"), "CREATE TABLE invoice (code TEXT, paid INTEGER)"
    )
    os.replace(replacement, shop)
    assert _reads(db, star) == ({"invoice"}, {("invoice", "code"), ("invoice", "paid")})


def test_bound_values_are_part_of_what_is_remembered(shop: Path, engine: WorkerPool) -> None:
    """A parameterized statement reports the same reads whatever is bound, run after run."""
    db = Database.unruled(shop, engine)
    sql = "SELECT name FROM customer WHERE id = :id"
    expected = ({"customer"}, {("customer", "id"), ("customer", "name")})
    for value in (1, 1.0, "1", 2, 1):
        assert _reads(db, sql, id=value) == expected


class _CountingReads:
    """Wraps `statement_reads` to count the programs actually read (EXPLAIN run and walked)."""

    def __init__(self) -> None:
        self.calls = 0
        self._real = _guard.statement_reads

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self._real(*args)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> _CountingReads:
    counter = _CountingReads()
    monkeypatch.setattr(_guard, "statement_reads", counter)
    return counter


@pytest.fixture
def guarded(shop: Path) -> Iterator[_guard.GuardedConnection]:
    """A guarded connection in this process (no worker), so that its program reads can be counted."""
    conn = _guard.GuardedConnection(shop, _opening.GuardSettings(), SimpleNamespace(value=False))
    try:
        yield conn
    finally:
        conn.close()


def _run(conn: _guard.GuardedConnection, sql: str, **kwargs: Any) -> None:
    result = conn.run(sql, max_rows=10, count_cap=1000, cell_limit=None, timeout=5.0, **kwargs)
    assert result.ok, result.error


def test_a_program_is_read_again_after_any_change_to_the_file(
    shop: Path, guarded: _guard.GuardedConnection, counted: _CountingReads
) -> None:
    """The EXPLAIN is skipped only for the same statement on an unchanged file: ANALYZE (the first
    one changes the schema; later ones only the statistics a plan is chosen by), a data commit
    and a schema change each make it read the program again."""
    _run(guarded, JOIN)
    _run(guarded, JOIN)
    assert counted.calls == 1
    changes = [
        "ANALYZE",
        "ANALYZE",
        "INSERT INTO invoice VALUES (4, 2, 10)",
        "CREATE TABLE refund (id INTEGER PRIMARY KEY)",
    ]
    for number, change in enumerate(changes, start=2):
        _write(shop, change)
        _run(guarded, JOIN)
        _run(guarded, JOIN)
        assert counted.calls == number, change


def test_a_program_is_read_per_rule_set_values_and_connection(
    guarded: _guard.GuardedConnection, counted: _CountingReads
) -> None:
    """Other rules, other bound values (1 and 1.0 included) and the twin with checked formats
    each read the program for themselves; the same ones again do not."""
    sql = "SELECT name FROM customer WHERE id = :id"
    hide = HideRules.parse(["customer.email"])
    for _ in range(2):
        _run(guarded, sql, params={"id": 1})
        _run(guarded, sql, params={"id": 1.0})
        _run(guarded, sql, params={"id": 2})
        _run(guarded, sql, params={"id": 1}, hide=hide)
    assert counted.calls == 4
    formats = "SELECT printf('%s', name) FROM customer"
    _run(guarded, formats)
    _run(guarded, formats)
    assert counted.calls == 5

"""The read-only SQLite layer: path validation, schema, queries, errors, worker start-up."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.errors import DatabasePathError, DatabaseWorkerError
from agent.sqlite import (
    BlobRef,
    ClippedText,
    Column,
    Database,
    ForeignKey,
    QueryStatus,
    WorkerLimits,
    WorkerPool,
    validate_database_path,
)
from tests.support.console import console_script, shadowing_folder


@pytest.fixture
def engine(deadline_engine: WorkerPool) -> WorkerPool:
    """A fresh pool with a short deadline (overrides the module-wide pool of conftest)."""
    return deadline_engine


def test_validate_rejects_missing_directory_and_non_sqlite(tmp_path: Path) -> None:
    """A bad path is a DatabasePathError naming the file and what is wrong."""
    with pytest.raises(DatabasePathError, match="no such file"):
        validate_database_path(tmp_path / "nope.db")
    with pytest.raises(DatabasePathError, match="not a regular file"):
        validate_database_path(tmp_path)
    text = tmp_path / "notes.db"
    text.write_text("hello")
    with pytest.raises(DatabasePathError, match="not an SQLite 3 database"):
        validate_database_path(text)


def test_schema_reads_columns_keys_and_views(shop: Path, engine: WorkerPool) -> None:
    """Schema lists tables and views with columns, PKs, defaults and resolved FKs."""
    schema = Database.unruled(shop, engine).schema()
    assert schema.names == ("big_orders", "customer", "order")
    customer = schema.find("CUSTOMER")
    assert customer is not None and customer.kind == "table"
    assert customer.columns == (
        Column("id", "INTEGER", False, None, 1),
        Column("name", "TEXT", True, "'x'", 0),
    )
    order = schema.find("order")
    assert order is not None
    assert order.foreign_keys == (ForeignKey("order", ("customer_id",), "customer", ("id",)),)
    assert schema.find("big_orders").kind == "view"  # type: ignore[union-attr]
    assert schema.incoming("customer") == order.foreign_keys


def test_query_returns_rows_counts_and_clips(shop: Path, engine: WorkerPool) -> None:
    """Rows up to the cap, the total counted, blobs and long text replaced when clipping."""
    db = Database.unruled(shop, engine)
    result = db.query('SELECT id, photo, note FROM "order" ORDER BY id', max_rows=2, cell_limit=3)
    assert result.status is QueryStatus.OK
    assert result.columns == ("id", "photo", "note")
    assert result.rows == ((1, BlobRef(2), ClippedText("fir", 5)), (2, None, ClippedText("sec", 6)))
    assert (result.total_rows, result.truncated) == (3, True)
    assert result.tables_read == frozenset({"order"})


def test_sql_errors_are_values(shop: Path, engine: WorkerPool) -> None:
    """SQLite's own message comes back as an error value, never an exception."""
    result = Database.unruled(shop, engine).query("SELECT nme FROM customer", max_rows=5)
    assert (result.status, result.error) == (QueryStatus.SQL_ERROR, "no such column: nme")


def test_parameters_are_bound_by_sqlite_never_spliced_into_the_text(shop: Path, engine: WorkerPool) -> None:
    """Named parameters take the values given (quotes and SQL in them stay data); what the statement
    read is known with them bound; a parameter left unbound or bound by position is an SQL error value."""
    db = Database.unruled(shop, engine)
    sql = "SELECT name, :said AS said FROM customer WHERE name = :name OR id = :id"
    hostile = "x' OR 1=1; DROP TABLE customer; --"
    result = db.query(sql, max_rows=5, params={"name": hostile, "id": 1, "said": "it's"})
    assert (result.status, result.rows, result.tables_read, result.columns_read) == (
        QueryStatus.OK,
        (("Ann", "it's"),),
        frozenset({"customer"}),
        frozenset({("customer", "name"), ("customer", "id")}),
    )
    unbound = db.query("SELECT name FROM customer WHERE id = :id", max_rows=5)
    positional = db.query("SELECT name FROM customer WHERE id = ?", max_rows=5, params={"id": 1})
    assert [(r.status, r.error) for r in (unbound, positional)] == [
        (
            QueryStatus.SQL_ERROR,
            "Incorrect number of bindings supplied. The current statement uses 1, and there are 0 supplied.",
        ),
        (QueryStatus.SQL_ERROR, "Binding 1 has no name, but you supplied a dictionary (which has only names)."),
    ]


def test_repeated_statement_still_reports_tables_read(shop: Path, engine: WorkerPool) -> None:
    """The same SQL run twice reports the tables it reads both times (no statement cache)."""
    db = Database.unruled(shop, engine)
    sql = 'SELECT c.name FROM customer c JOIN "order" o ON o.customer_id = c.id'
    first = db.query(sql, max_rows=5)
    second = db.query(sql, max_rows=5)
    assert first.tables_read == second.tables_read == frozenset({"customer", "order"})


def test_schema_degrades_per_object(geo: Path, engine: WorkerPool) -> None:
    """R*Tree, FTS5 and plain tables read; a dbstat view, a doubling chain and a table of a
    missing module (SpatiaLite's spatial index) get a note."""
    schema = Database.unruled(geo, engine).schema()
    notes = {t.name: t.note for t in schema.tables if t.note is not None}
    assert notes == {
        "pages": 'cannot be read: unsafe use of virtual table "dbstat"',
        "SpatialIndex": "cannot be read: no such module: VirtualSpatialIndex",
        **{
            f"chain{i}": "cannot be read: the view expands to more than 10,000 table references"
            for i in range(13, 18)
        },
    }
    assert [c.name for c in schema.find("rt").columns] == ["id", "minx", "maxx", "miny", "maxy"]
    assert schema.find("docs").columns[0].name == "body"
    assert schema.find("pages").unreadable and not schema.find("features").unreadable


def test_worker_ignores_a_workspace_with_its_own_agent_package(shop: Path, tmp_path: Path) -> None:
    """Run from a workspace holding unrelated `agent/` and `mcp_server/` packages, queries still work."""
    workspace = shadowing_folder(tmp_path / "workspace")
    done = subprocess.run(
        [console_script("sqale-agent"), "tool", "--db", str(shop), "list_tables", "{}"],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        'customer, "order", big_orders (2 tables and 1 view)\n',
        "",
    )


def test_a_worker_that_dies_before_answering_raises_with_its_stderr(shop: Path, monkeypatch) -> None:
    """A worker that cannot even start Python is an error naming the exit status and its stderr."""
    monkeypatch.setenv("PYTHONHOME", str(shop.parent / "no-such-python-home"))
    engine = WorkerPool(WorkerLimits(query_timeout=5))
    try:
        with pytest.raises(DatabaseWorkerError) as info:
            Database.unruled(shop, engine).schema()
    finally:
        engine.close()
    message = str(info.value)
    assert message.startswith("the SQLite worker process (")
    assert "exited with status 1 before answering" in message
    assert "its stderr: " in message and "No module named 'encodings'" in message

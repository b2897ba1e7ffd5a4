"""The read-only SQLite layer: path validation, guards, attacks, bombs, schema cache, WAL."""

from __future__ import annotations

import hashlib
import os
import pickle
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agent.errors import DatabasePathError
from agent.sqlite import (
    BlobRef,
    CancelToken,
    ClippedText,
    Column,
    Database,
    EngineLimits,
    ForeignKey,
    QueryEngine,
    QueryStatus,
    ResultCut,
    create_database,
    validate_database_path,
)
from tests.support.databases import BOMBS, SHOP_SQL

DEADLINE = 1.0


def build_db(path: Path, sql: str) -> Path:
    """Create a database file from a script."""
    return create_database(path, sql)


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return build_db(tmp_path / "shop.sqlite", SHOP_SQL)


@pytest.fixture
def engine():
    """A fresh pool with a short deadline (overrides the module-wide pool of conftest)."""
    eng = QueryEngine(EngineLimits(query_timeout=DEADLINE, kill_grace=0.3))
    yield eng
    eng.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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


def test_schema_reads_columns_keys_and_views(shop: Path, engine: QueryEngine) -> None:
    """Schema lists tables and views with columns, PKs, defaults and resolved FKs."""
    schema = Database(shop, engine).schema()
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


def test_query_returns_rows_counts_and_clips(shop: Path, engine: QueryEngine) -> None:
    """Rows up to the cap, the total counted, blobs and long text replaced when clipping."""
    db = Database(shop, engine)
    result = db.query('SELECT id, photo, note FROM "order" ORDER BY id', max_rows=2, cell_limit=3)
    assert result.status is QueryStatus.OK
    assert result.columns == ("id", "photo", "note")
    assert result.rows == ((1, BlobRef(2), ClippedText("fir", 5)), (2, None, ClippedText("sec", 6)))
    assert (result.total_rows, result.truncated) == (3, True)
    assert result.tables_read == frozenset({"order"})


def test_sql_errors_are_values(shop: Path, engine: QueryEngine) -> None:
    """SQLite's own message comes back as an error value, never an exception."""
    result = Database(shop, engine).query("SELECT nme FROM customer", max_rows=5)
    assert (result.status, result.error) == (QueryStatus.SQL_ERROR, "no such column: nme")


def test_schema_cache_refreshes_when_file_changes(shop: Path, engine: QueryEngine) -> None:
    """A table added to the file shows up in the next schema() call."""
    db = Database(shop, engine)
    assert "extra" not in db.schema().names
    conn = sqlite3.connect(shop)
    conn.execute("CREATE TABLE extra (x)")
    conn.commit()
    conn.close()
    assert "extra" in db.schema().names


ATTACKS = [
    "INSERT INTO customer VALUES (3, 'Eve')",
    "UPDATE customer SET name = 'Eve'",
    "DELETE FROM customer",
    "DROP TABLE customer",
    "DROP VIEW big_orders",
    "CREATE TABLE evil (x)",
    "CREATE INDEX evil ON customer(name)",
    "CREATE TRIGGER evil AFTER INSERT ON customer BEGIN SELECT 1; END",
    "CREATE VIEW evil AS SELECT 1",
    "CREATE TEMP TABLE evil (x)",
    "CREATE TEMP VIEW evil AS SELECT 1",
    "CREATE VIRTUAL TABLE evil USING fts5(x)",
    "ALTER TABLE customer ADD COLUMN evil",
    "ALTER TABLE customer RENAME TO evil",
    "REPLACE INTO customer VALUES (1, 'Eve')",
    "INSERT INTO customer SELECT 9, 'Eve'",
    "WITH x AS (SELECT 1) DELETE FROM customer",
    "WITH x AS (SELECT 1) INSERT INTO customer SELECT 9, 'e' FROM x",
    "ATTACH DATABASE '{dir}/evil.db' AS evil",
    "ATTACH ':memory:' AS evil",
    "DETACH DATABASE main",
    "VACUUM",
    "VACUUM INTO '{dir}/copy.db'",
    "REINDEX",
    "ANALYZE",
    "BEGIN IMMEDIATE",
    "SAVEPOINT s",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA journal_mode = WAL",
    "PRAGMA writable_schema = ON",
    "PRAGMA query_only = OFF",
    "PRAGMA user_version = 7",
    "PRAGMA wal_checkpoint(TRUNCATE)",
    "PRAGMA optimize",
    "PRAGMA incremental_vacuum",
    "PRAGMA temp_store_directory = '{dir}'",
    "SELECT load_extension('{dir}/evil.so')",
    "SELECT fts3_tokenizer('simple', x'0000000000000000')",
    "SELECT 1; DELETE FROM customer",
    "SELECT 1; ATTACH '{dir}/evil2.db' AS e",
    "SELECT writefile('{dir}/evil.txt', 'x')",
    "SELECT * FROM sqlite_dbpage",
    # issue 10: model output that used to crash the worker instead of failing as a value
    "SELECT '\ud800' FROM customer",
    "SELECT name FROM \"customer\ud800\"",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_changes_nothing_and_returns_an_error(attack: str, shop: Path,
                                                     engine: QueryEngine) -> None:
    """Every write/attach/vacuum/pragma/multi-statement trick leaves the file byte-identical."""
    before = digest(shop)
    files_before = sorted(os.listdir(shop.parent))
    db = Database(shop, engine)
    result = db.query(attack.format(dir=shop.parent), max_rows=5)
    assert result.status in (QueryStatus.DENIED, QueryStatus.SQL_ERROR), result
    assert result.error
    assert digest(shop) == before
    assert sorted(os.listdir(shop.parent)) == files_before
    assert db.query("SELECT count(*) FROM customer", max_rows=1).rows == ((2,),)


def test_read_only_pragmas_and_table_valued_pragmas_work(shop: Path, engine: QueryEngine) -> None:
    """Reporting pragmas, as statements and as table-valued functions, are allowed."""
    db = Database(shop, engine)
    assert db.query("PRAGMA table_info(customer)", max_rows=5).ok
    assert db.query("SELECT name FROM pragma_table_info('customer')", max_rows=5).rows == (
        ("id",), ("name",))
    assert db.query("PRAGMA user_version", max_rows=1).rows == ((0,),)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BOMBS))
def test_bomb_returns_within_deadline_and_next_query_works(name: str, shop: Path,
                                                           engine: QueryEngine) -> None:
    """Each bomb releases the caller within the deadline plus 1 s; the next query works."""
    db = Database(shop, engine)
    db.query("SELECT 1", max_rows=1)  # the worker has started: its start-up is not timed
    start = time.monotonic()
    result = db.query(BOMBS[name], max_rows=5)
    held = time.monotonic() - start
    assert held < DEADLINE + 1.0, (name, held, result)
    assert not result.ok, result
    assert db.query("SELECT name FROM customer ORDER BY id", max_rows=5).rows == (("Ann",), ("Bob",))


def test_cancel_token_interrupts_a_running_query(shop: Path) -> None:
    """Cancelling from another thread stops a long query well before its deadline."""
    eng = QueryEngine(EngineLimits(query_timeout=30))
    try:
        db = Database(shop, eng)
        token = CancelToken()
        threading.Timer(0.3, token.cancel).start()
        start = time.monotonic()
        result = db.query(BOMBS["runaway recursive CTE"], max_rows=1, cancel=token)
        assert result.status is QueryStatus.CANCELLED
        assert time.monotonic() - start < 2.0
        assert db.query("SELECT count(*) FROM customer", max_rows=1).rows == ((2,),)
    finally:
        eng.close()


def test_async_query_cancelled_by_caller_interrupts_worker(shop: Path) -> None:
    """Cancelling the awaiting task interrupts the query; the engine serves the next one."""
    import anyio

    eng = QueryEngine(EngineLimits(query_timeout=30))
    db = Database(shop, eng)

    async def scenario() -> tuple[float, QueryStatus]:
        start = time.monotonic()
        with anyio.move_on_after(0.3):
            await db.aquery(BOMBS["runaway recursive CTE"], max_rows=1)
        nxt = await db.aquery("SELECT count(*) FROM customer", max_rows=1)
        return time.monotonic() - start, nxt.status

    try:
        total, status = anyio.run(scenario)
        assert status is QueryStatus.OK
        assert total < 2.0
    finally:
        eng.close()


def _mount_read_only(target: Path) -> bool:
    """Bind-mount `target` read-only over itself (root only); False when not possible."""
    if os.geteuid() != 0:
        return False
    if subprocess.run(["mount", "--bind", str(target), str(target)],
                      capture_output=True).returncode != 0:
        return False
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(target)],
                      capture_output=True).returncode != 0:
        subprocess.run(["umount", str(target)], capture_output=True)
        return False
    return True


def _wal_database(folder: Path, keep_shm: bool) -> Path:
    """A WAL database whose last commit is still only in the -wal file."""
    path = folder / "wal.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (x)")
    writer.execute("INSERT INTO t VALUES (1)")
    writer.commit()
    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    writer.execute("INSERT INTO t VALUES (2)")
    writer.commit()
    # Copy the files while the writer holds them, so the -wal survives closing.
    copy = folder / "ro"
    copy.mkdir()
    for name in os.listdir(folder):
        if name.startswith("wal.sqlite") and (keep_shm or not name.endswith("-shm")):
            (copy / name).write_bytes((folder / name).read_bytes())
    writer.close()
    return copy / "wal.sqlite"


@pytest.mark.parametrize("keep_shm", [True, False])
def test_wal_database_in_read_only_folder(tmp_path: Path, keep_shm: bool) -> None:
    """WAL in a read-only folder is readable; without -shm it is an announced snapshot."""
    path = _wal_database(tmp_path, keep_shm)
    if not _mount_read_only(path.parent):
        pytest.skip("needs root and bind mounts to make a read-only folder")
    try:
        with Database(path) as db:
            rows = db.query("SELECT x FROM t ORDER BY x", max_rows=5).rows
            warnings = db.schema().warnings
        if keep_shm:
            assert (rows, warnings) == (((1,), (2,)), ())
        else:
            assert rows == ((1,),)
            assert len(warnings) == 1 and "immutable snapshot" in warnings[0]
    finally:
        subprocess.run(["umount", str(path.parent)], capture_output=True)


def test_wal_database_in_writable_folder_sees_every_commit(tmp_path: Path) -> None:
    """An ordinary WAL database shows commits still in its -wal file."""
    path = _wal_database(tmp_path, keep_shm=False)
    with Database(path) as db:
        assert db.query("SELECT x FROM t ORDER BY x", max_rows=5).rows == ((1,), (2,))


def test_repeated_statement_still_reports_tables_read(shop: Path, engine: QueryEngine) -> None:
    """The same SQL run twice reports the tables it reads both times (no statement cache)."""
    db = Database(shop, engine)
    sql = 'SELECT c.name FROM customer c JOIN "order" o ON o.customer_id = c.id'
    first = db.query(sql, max_rows=5)
    second = db.query(sql, max_rows=5)
    assert first.tables_read == second.tables_read == frozenset({"customer", "order"})


def test_damaged_file_is_a_path_error(tmp_path: Path, engine: QueryEngine) -> None:
    """A file with the SQLite header but damaged contents is a DatabasePathError, not a crash."""
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\xff" * 2000)
    db = Database(bad, engine)
    with pytest.raises(DatabasePathError, match="cannot be read as an SQLite database"):
        db.schema()
    with pytest.raises(DatabasePathError, match="check the file is not damaged"):
        db.query("SELECT 1", max_rows=1)


def test_a_file_replaced_at_the_same_path_is_read_afresh(tmp_path: Path, engine: QueryEngine) -> None:
    """After os.replace swaps the file, queries and schema see the new file, not the old one."""
    path = build_db(tmp_path / "live.sqlite", "CREATE TABLE old (x); INSERT INTO old VALUES (1);")
    db = Database(path, engine)
    assert db.query("SELECT x FROM old", max_rows=5).rows == ((1,),)
    fresh = build_db(tmp_path / "fresh.sqlite", "CREATE TABLE new (y); INSERT INTO new VALUES (2);")
    os.replace(fresh, path)
    assert db.schema().names == ("new",)
    assert db.query("SELECT y FROM new", max_rows=5).rows == ((2,),)


GEO_SQL = """
    CREATE TABLE features (fid INTEGER PRIMARY KEY, name TEXT);
    CREATE VIRTUAL TABLE rt USING rtree(id, minx, maxx, miny, maxy);
    CREATE VIRTUAL TABLE docs USING fts5(body);
    CREATE VIEW pages AS SELECT * FROM dbstat;
    INSERT INTO features VALUES (1, 'a');
    INSERT INTO rt VALUES (1, 0, 1, 0, 1);
    INSERT INTO docs VALUES ('hello');
    CREATE VIEW chain0 AS SELECT 1 AS x;
    -- SpatiaLite's spatial index module is not loaded here: its table cannot be described.
    PRAGMA writable_schema = ON;
    INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES ('table',
        'SpatialIndex', 'SpatialIndex', 0, 'CREATE VIRTUAL TABLE SpatialIndex USING VirtualSpatialIndex()');
    PRAGMA writable_schema = OFF;
""" + "".join(f"CREATE VIEW chain{i} AS SELECT a.x FROM chain{i - 1} a, chain{i - 1} b;\n"
              for i in range(1, 18))


@pytest.fixture
def geo(tmp_path: Path) -> Path:
    return build_db(tmp_path / "geo.gpkg", GEO_SQL)


RTREE_ATTACKS = [
    "INSERT INTO rt VALUES (2, 0, 1, 0, 1)",
    "DELETE FROM rt",
    "UPDATE rt SET minx = 5",
    "INSERT INTO rt_node VALUES (9, x'00')",
    "DELETE FROM rt_node",
    "UPDATE rt_rowid SET nodeno = 7",
    "WITH x AS (SELECT 1) DELETE FROM rt_node",
    "WITH x AS (SELECT 1) INSERT INTO rt_parent SELECT 1, 1 FROM x",
    "WITH x AS (SELECT 1) UPDATE rt_rowid SET nodeno = 3",
    "SELECT * FROM rt; DELETE FROM rt_node",
    "INSERT INTO docs VALUES ('evil')",
    "INSERT INTO docs(docs) VALUES ('delete-all')",
    "DELETE FROM docs_data",
    "SELECT fts5(1)",
]


@pytest.mark.parametrize("attack", RTREE_ATTACKS)
def test_rtree_and_fts5_attacks_change_nothing(attack: str, geo: Path, engine: QueryEngine) -> None:
    """Reading R*Tree tables is allowed; every write to them or their shadow tables is refused."""
    before = digest(geo)
    files_before = sorted(os.listdir(geo.parent))
    db = Database(geo, engine)
    result = db.query(attack, max_rows=5)
    assert result.status in (QueryStatus.DENIED, QueryStatus.SQL_ERROR), result
    assert digest(geo) == before
    assert sorted(os.listdir(geo.parent)) == files_before
    assert db.query("SELECT id, minx FROM rt", max_rows=5).rows == ((1, 0.0),)


def test_schema_degrades_per_object(geo: Path, engine: QueryEngine) -> None:
    """R*Tree, FTS5 and plain tables read; a dbstat view, a doubling chain and a table of a
    missing module (SpatiaLite's spatial index) get a note."""
    schema = Database(geo, engine).schema()
    notes = {t.name: t.note for t in schema.tables if t.note is not None}
    assert notes == {
        "pages": 'cannot be read: unsafe use of virtual table "dbstat"',
        "SpatialIndex": "cannot be read: no such module: VirtualSpatialIndex",
        **{f"chain{i}": "cannot be read: the view expands to more than 10,000 table references"
           for i in range(13, 18)},
    }
    assert [c.name for c in schema.find("rt").columns] == ["id", "minx", "maxx", "miny", "maxy"]
    assert schema.find("docs").columns[0].name == "body"
    assert schema.find("pages").unreadable and not schema.find("features").unreadable


@pytest.mark.slow
def test_view_chain_bomb_returns_within_deadline(geo: Path, engine: QueryEngine) -> None:
    """Querying a view that doubles 17 times fails within the deadline; the next query works."""
    db = Database(geo, engine)
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
    eng = QueryEngine(EngineLimits(schema_chars=50_000))
    try:
        schema = Database(path, eng).schema()
    finally:
        eng.close()
    kept = sum(len(t.columns) for t in schema.tables)
    assert sum(len(c.name) for t in schema.tables for c in t.columns) <= 50_000
    assert 0 < kept < 500
    assert schema.find("t0").note is None
    assert schema.find("t4").note == ("only the first 0 of 100 columns are listed: the schema is "
                                      "larger than the server keeps")
    assert schema.warnings == (
        "the schema is larger than the 50,000 characters of names kept per database: 0 tables and "
        f"{500 - kept:,} columns are not listed (queries can still use them)",)


# Issue 10, section 1: results that must be cut in the worker, never shipped whole.
BALLOON_SQL = ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r WHERE x<50), "
               "t(a) AS (SELECT printf('%.4500c','x')) SELECT " + ",".join(["a"] * 2000) + " FROM t, r")
SIZE_BOMBS = {
    "2,000 columns x 4,500 chars x 50 rows":
        (BALLOON_SQL, 50, ResultCut(262_144, 2000, 0, 100, True), 1),
    "1,100 rows x 1.5 MB":
        ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r WHERE x<1100) "
         "SELECT x, printf('%.1500000c','y') FROM r", 1100, ResultCut(262_144, 2, 0, None, True), 26),
    "28 rows x 16 MB":
        ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r WHERE x<28) "
         "SELECT printf('%.16000000c','z') FROM r", 28, ResultCut(262_144, 1, 0, None, True), 26),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SIZE_BOMBS))
def test_size_bomb_is_cut_in_the_worker(name: str, shop: Path) -> None:
    """Rows, cells and columns are cut to the byte budget before leaving the worker; the count
    pass holds one row at a time, so it finishes where the first rows fit."""
    sql, total, cut, kept = SIZE_BOMBS[name]
    eng = QueryEngine(EngineLimits(query_timeout=30))
    try:
        result = Database(shop, eng).query(sql, max_rows=50, cell_limit=10_000, byte_budget=262_144)
    finally:
        eng.close()
    assert (result.status, result.total_rows, result.cut, len(result.rows)) == (
        QueryStatus.OK, total, cut, kept)
    assert len(pickle.dumps(result)) < 300_000


def test_tool_budget_cuts_columns_and_says_how_many(shop: Path) -> None:
    """With short cells, columns past the budget are left out and counted."""
    eng = QueryEngine(EngineLimits(query_timeout=30))
    try:
        result = Database(shop, eng).query(BALLOON_SQL, max_rows=50, cell_limit=100,
                                           byte_budget=65_536)
    finally:
        eng.close()
    assert result.cut == ResultCut(65_536, 2000, 1496, None, True)
    assert (len(result.columns), len(result.rows), result.total_rows) == (504, 1, 50)


def test_no_budget_keeps_every_row_and_column(shop: Path, engine: QueryEngine) -> None:
    """Without a byte budget only max_rows and cell_limit apply (evaluation compares whole rows)."""
    result = Database(shop, engine).query("SELECT id, note FROM \"order\" ORDER BY id", max_rows=5)
    assert (result.rows, result.cut) == (((1, "first"), (2, "second"), (3, "third")), None)


# Issue 10, section 5: the file at the configured path changes after start.
def _swap(path: Path, make: object) -> None:
    os.replace(path, path.with_name("moved-away.sqlite"))
    make()  # type: ignore[operator]


@pytest.mark.parametrize(("swap", "reason"), [
    ("symlink to another database", "now resolves to"),
    ("symlink to /dev/zero", "now resolves to /dev/zero"),
    ("fifo", "not a regular file"),
    ("text file", "not an SQLite 3 database"),
    ("removed", "no such file"),
])
def test_a_changed_file_is_refused_when_the_worker_reopens_it(
        swap: str, reason: str, tmp_path: Path, engine: QueryEngine) -> None:
    """After a swap the worker re-validates: a clear DatabasePathError, quickly, no rows."""
    path = build_db(tmp_path / "served.sqlite", "CREATE TABLE t (x); INSERT INTO t VALUES (1);")
    other = build_db(tmp_path / "outside" / "secret.sqlite",
                     "CREATE TABLE t (x); INSERT INTO t VALUES (42);")
    db = Database(path, engine)
    assert db.query("SELECT x FROM t", max_rows=1).rows == ((1,),)
    makers = {
        "symlink to another database": lambda: path.symlink_to(other),
        "symlink to /dev/zero": lambda: path.symlink_to("/dev/zero"),
        "fifo": lambda: os.mkfifo(path),
        "text file": lambda: path.write_text("hello"),
        "removed": lambda: None,
    }
    _swap(path, makers[swap])
    start = time.monotonic()
    with pytest.raises(DatabasePathError, match=reason):
        db.query("SELECT x FROM t", max_rows=1)
    with pytest.raises(DatabasePathError, match=reason):
        db.schema()
    assert time.monotonic() - start < 1.0


def test_dev_zero_and_a_fifo_are_refused_at_start(tmp_path: Path) -> None:
    """/dev/zero and a FIFO are not database files, and checking them does not block."""
    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    for bad in (Path("/dev/zero"), fifo):
        with pytest.raises(DatabasePathError, match="not a regular file"):
            validate_database_path(bad)


def test_wal_files_created_beside_a_database_are_stated(tmp_path: Path) -> None:
    """A WAL database without -wal/-shm gets both created by SQLite's reader (the database file
    stays byte-identical); the schema warning names them, as doctor and the server log show."""
    path = tmp_path / "w.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("CREATE TABLE t (x)")
    writer.execute("INSERT INTO t VALUES (1)")
    writer.commit()
    writer.close()
    assert os.listdir(tmp_path) == ["w.sqlite"]
    before = digest(path)
    with Database(path) as db:
        assert db.query("SELECT x FROM t", max_rows=5).rows == ((1,),)
        warnings = db.schema().warnings
    assert sorted(os.listdir(tmp_path)) == ["w.sqlite", "w.sqlite-shm", "w.sqlite-wal"]
    assert digest(path) == before
    assert warnings == (
        "the database is in WAL mode and opening it created w.sqlite-wal and w.sqlite-shm beside "
        "it: SQLite's readers need them (they hold no data of ours, the database file itself is "
        "never written) and may leave them there; to avoid them, switch the database to rollback "
        "mode once with `PRAGMA journal_mode=DELETE` or serve it from a read-only folder",)
    with Database(path) as db:  # present already: nothing new is created, nothing to say
        assert db.schema().warnings == ()

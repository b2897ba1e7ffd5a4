"""agent.sqlite and the file on disk: WAL, damaged, replaced and swapped files, schema refresh."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from agent.errors import DatabasePathError
from agent.sqlite import Database, WorkerPool, validate_database_path
from tests.support.databases import digest, mount_read_only, wal_database
from tests.support.sqlite_files import build_db


@pytest.fixture
def engine(deadline_engine: WorkerPool) -> WorkerPool:
    """A fresh pool with a short deadline (overrides the module-wide pool of conftest)."""
    return deadline_engine


def test_schema_cache_refreshes_when_file_changes(shop: Path, engine: WorkerPool) -> None:
    """A table added to the file shows up in the next schema() call."""
    db = Database.unruled(shop, engine)
    assert "extra" not in db.schema().names
    conn = sqlite3.connect(shop)
    conn.execute("CREATE TABLE extra (x)")
    conn.commit()
    conn.close()
    assert "extra" in db.schema().names


@pytest.mark.parametrize("keep_shm", [True, False])
def test_wal_database_in_read_only_folder(tmp_path: Path, keep_shm: bool) -> None:
    """WAL in a read-only folder is readable; without -shm it is an announced snapshot."""
    path = wal_database(tmp_path, keep_shm)
    if not mount_read_only(path.parent):
        pytest.skip("needs root and bind mounts to make a read-only folder")
    try:
        with Database.unruled(path) as db:
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
    path = wal_database(tmp_path, keep_shm=False)
    with Database.unruled(path) as db:
        assert db.query("SELECT x FROM t ORDER BY x", max_rows=5).rows == ((1,), (2,))


def test_damaged_file_is_a_path_error(tmp_path: Path, engine: WorkerPool) -> None:
    """A file with the SQLite header but damaged contents is a DatabasePathError, not a crash."""
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\xff" * 2000)
    db = Database.unruled(bad, engine)
    with pytest.raises(DatabasePathError, match="cannot be read as an SQLite database"):
        db.schema()
    with pytest.raises(DatabasePathError, match="check the file is not damaged"):
        db.query("SELECT 1", max_rows=1)


def test_a_file_replaced_at_the_same_path_is_read_afresh(tmp_path: Path, engine: WorkerPool) -> None:
    """After os.replace swaps the file, queries and schema see the new file, not the old one."""
    path = build_db(tmp_path / "live.sqlite", "CREATE TABLE old (x); INSERT INTO old VALUES (1);")
    db = Database.unruled(path, engine)
    assert db.query("SELECT x FROM old", max_rows=5).rows == ((1,),)
    fresh = build_db(tmp_path / "fresh.sqlite", "CREATE TABLE new (y); INSERT INTO new VALUES (2);")
    os.replace(fresh, path)
    assert db.schema().names == ("new",)
    assert db.query("SELECT y FROM new", max_rows=5).rows == ((2,),)


# Issue 10, section 5: the file at the configured path changes after start.
def _swap(path: Path, make: object) -> None:
    os.replace(path, path.with_name("moved-away.sqlite"))
    make()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("swap", "reason"),
    [
        ("symlink to another database", "now resolves to"),
        ("symlink to /dev/zero", "now resolves to /dev/zero"),
        ("fifo", "not a regular file"),
        ("text file", "not an SQLite 3 database"),
        ("removed", "no such file"),
    ],
)
def test_a_changed_file_is_refused_when_the_worker_reopens_it(
    swap: str, reason: str, tmp_path: Path, engine: WorkerPool
) -> None:
    """After a swap the worker re-validates: a clear DatabasePathError, quickly, no rows."""
    path = build_db(tmp_path / "served.sqlite", "CREATE TABLE t (x); INSERT INTO t VALUES (1);")
    other = build_db(tmp_path / "outside" / "secret.sqlite", "CREATE TABLE t (x); INSERT INTO t VALUES (42);")
    db = Database.unruled(path, engine)
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
    with Database.unruled(path) as db:
        assert db.query("SELECT x FROM t", max_rows=5).rows == ((1,),)
        warnings = db.schema().warnings
    assert sorted(os.listdir(tmp_path)) == ["w.sqlite", "w.sqlite-shm", "w.sqlite-wal"]
    assert digest(path) == before
    assert warnings == (
        "the database is in WAL mode and opening it created w.sqlite-wal and w.sqlite-shm beside "
        "it: SQLite's readers need them (they hold no data of ours, the database file itself is "
        "never written) and may leave them there; to avoid them, switch the database to rollback "
        "mode once with `PRAGMA journal_mode=DELETE` or serve it from a read-only folder",
    )
    with Database.unruled(path) as db:  # present already: nothing new is created, nothing to say
        assert db.schema().warnings == ()

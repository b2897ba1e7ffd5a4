"""Databases, statements and file helpers the tests and the benchmarks share."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
from pathlib import Path

# Customers in three cities and their orders: the database of the evaluation tests' questions.
CUSTOMER_ORDERS_SQL = """
    CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
    CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer(id), amount REAL);
    INSERT INTO customer VALUES (1, 'Ann', 'Oslo'), (2, 'Bob', 'Rome'), (3, 'Cy', 'Oslo');
    INSERT INTO orders VALUES (1, 1, 10.0), (2, 1, 5.5), (3, 2, 7.0);
"""

# A customer/order shop: a view, a foreign key, a blob, and a table name that is a keyword.
SHOP_SQL = """
        CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT 'x');
        CREATE TABLE "order" (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer,
                              note TEXT, photo BLOB);
        CREATE VIEW big_orders AS SELECT * FROM "order" WHERE id > 1;
        INSERT INTO customer VALUES (1, 'Ann'), (2, 'Bob');
        INSERT INTO "order" VALUES (1, 1, 'first', x'00ff'), (2, 1, 'second', NULL),
                                   (3, 2, 'third', NULL);
    """

# Statements that would run for minutes or take gigabytes: each must be stopped at the deadline.
BOMBS = {
    "runaway recursive CTE": (
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
    ),
    "instr on megabyte strings": "WITH s(a) AS (SELECT printf('%.*c', 3000000, 'a')) "
    "SELECT instr(a || 'b', substr(a, 1, 1500000) || 'b') FROM s",
    "replace on megabyte strings": "WITH s(a) AS (SELECT printf('%.*c', 4000000, 'a')) "
    "SELECT length(replace(a, substr(a, 1, 1000000) || 'b', 'x')) FROM s",
    "printf width": "SELECT printf('%.*c', 2000000000, 'x')",
    "randomblob": "SELECT randomblob(2000000000)",
    "cartesian join": 'SELECT count(*) FROM "order" a, "order" b, "order" c, "order" d, "order" e, "order" f, '
    "customer g, customer h, (WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r "
    "WHERE x < 100000) SELECT x FROM r)",
}


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes (a database left byte-identical keeps its digest)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mount_read_only(target: Path) -> bool:
    """Bind-mount `target` read-only over itself (root only); False when not possible."""
    if os.geteuid() != 0:
        return False
    if subprocess.run(["mount", "--bind", str(target), str(target)], capture_output=True).returncode != 0:
        return False
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], capture_output=True).returncode != 0:
        subprocess.run(["umount", str(target)], capture_output=True)
        return False
    return True


def wal_database(folder: Path, keep_shm: bool) -> Path:
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

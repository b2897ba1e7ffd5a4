"""agent.sqlite refuses every way of writing: statements, pragmas, attaches, virtual tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.sqlite import Database, QueryStatus, WorkerPool
from tests.support.databases import digest


@pytest.fixture
def engine(deadline_engine: WorkerPool) -> WorkerPool:
    """A fresh pool with a short deadline (overrides the module-wide pool of conftest)."""
    return deadline_engine


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
    'SELECT name FROM "customer\ud800"',
    # issue 31: a value past the length cap fails (printf returned NULL with status OK)
    "SELECT name FROM customer WHERE printf('%.*c', 17000000, 'x') IS NULL",
    "SELECT length(format('%s%s', printf('%.*c', 9000000, 'a'), printf('%.*c', 9000000, 'b')))",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_changes_nothing_and_returns_an_error(attack: str, shop: Path, engine: WorkerPool) -> None:
    """Every write/attach/vacuum/pragma/multi-statement trick leaves the file byte-identical."""
    before = digest(shop)
    files_before = sorted(os.listdir(shop.parent))
    db = Database.unruled(shop, engine)
    result = db.query(attack.format(dir=shop.parent), max_rows=5)
    assert result.status in (QueryStatus.DENIED, QueryStatus.SQL_ERROR), result
    assert result.error
    assert digest(shop) == before
    assert sorted(os.listdir(shop.parent)) == files_before
    assert db.query("SELECT count(*) FROM customer", max_rows=1).rows == ((2,),)


def test_read_only_pragmas_and_table_valued_pragmas_work(shop: Path, engine: WorkerPool) -> None:
    """Reporting pragmas, as statements and as table-valued functions, are allowed."""
    db = Database.unruled(shop, engine)
    assert db.query("PRAGMA table_info(customer)", max_rows=5).ok
    assert db.query("SELECT name FROM pragma_table_info('customer')", max_rows=5).rows == (("id",), ("name",))
    assert db.query("PRAGMA user_version", max_rows=1).rows == ((0,),)


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
def test_rtree_and_fts5_attacks_change_nothing(attack: str, geo: Path, engine: WorkerPool) -> None:
    """Reading R*Tree tables is allowed; every write to them or their shadow tables is refused."""
    before = digest(geo)
    files_before = sorted(os.listdir(geo.parent))
    db = Database.unruled(geo, engine)
    result = db.query(attack, max_rows=5)
    assert result.status in (QueryStatus.DENIED, QueryStatus.SQL_ERROR), result
    assert digest(geo) == before
    assert sorted(os.listdir(geo.parent)) == files_before
    assert db.query("SELECT id, minx FROM rt", max_rows=5).rows == ((1, 0.0),)

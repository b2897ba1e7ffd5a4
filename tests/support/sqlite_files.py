"""SQLite files for the tests of agent.sqlite, and a fresh pool with a short deadline (a pytest plugin)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.sqlite import WorkerLimits, WorkerPool, create_database
from tests.support.databases import SHOP_SQL

DEADLINE = 1.0  # the short deadline of deadline_engine, in seconds

# R*Tree, FTS5, a view over dbstat, a table of a module that is not loaded, and a view chain
# that doubles 17 times.
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
""" + "".join(
    f"CREATE VIEW chain{i} AS SELECT a.x FROM chain{i - 1} a, chain{i - 1} b;\n" for i in range(1, 18)
)


def build_db(path: Path, sql: str) -> Path:
    """Create a database file from a script."""
    return create_database(path, sql)


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """The SHOP_SQL database in tmp_path (a module may define its own `shop` instead)."""
    return build_db(tmp_path / "shop.sqlite", SHOP_SQL)


@pytest.fixture
def geo(tmp_path: Path) -> Path:
    """The GEO_SQL database in tmp_path, named like a GeoPackage."""
    return build_db(tmp_path / "geo.gpkg", GEO_SQL)


@pytest.fixture
def deadline_engine() -> Iterator[WorkerPool]:
    """A fresh pool with a DEADLINE-second query limit: a fresh worker for every test."""
    eng = WorkerPool(WorkerLimits(query_timeout=DEADLINE, kill_grace=0.3))
    yield eng
    eng.close()

"""The tools' rich texts over a database of awkward names: `weird`, run_tool, outcome (a pytest plugin)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from agent import tools
from agent.sqlite import Database, WorkerPool, create_database
from agent.tools import Environment, ToolOutcome

# These goldens are the rich environment's texts; the trained ones are in test_trained_text.py.
run_tool = partial(tools.run_tool, environment=Environment.RICH)
arun_tool = partial(tools.arun_tool, environment=Environment.RICH)


WEIRD_SQL = '''
CREATE TABLE "order" (id INTEGER PRIMARY KEY, "select" TEXT NOT NULL DEFAULT 'x',
                      [bracket col] TEXT, note TEXT, picture BLOB);
CREATE TABLE "Order Details" ("Order ID" INTEGER NOT NULL REFERENCES "order"(id),
                              "Product ID" INTEGER NOT NULL, "Unit ""Price""" REAL,
                              PRIMARY KEY ("Order ID", "Product ID"));
CREATE TABLE shipments (id INTEGER PRIMARY KEY, order_id INTEGER, product_id INTEGER,
                        FOREIGN KEY (order_id, product_id)
                        REFERENCES "Order Details"("Order ID", "Product ID"));
CREATE TABLE "Straße" (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE "STRASSE" (id INTEGER PRIMARY KEY, "straße_id" INTEGER REFERENCES "Straße"(id));
CREATE TABLE lonely (x);
CREATE TABLE colours (name TEXT);
CREATE VIEW "big orders" AS SELECT id, "select" FROM "order" WHERE id > 1;
INSERT INTO "order" VALUES (1, 'it''s', 'a|b', 'line1
line2', x'00010203'), (2, 'x', NULL, '', NULL), (3, 'x', 'y', NULL, NULL);
INSERT INTO "Order Details" VALUES (1, 10, 2.5), (1, 11, 3.0), (2, 10, 1e20);
INSERT INTO lonely VALUES (printf('%.345c', 'z'));
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30)
INSERT INTO colours SELECT 'c' || (i % 7) FROM n;
'''


def build(path: Path, sql: str) -> Path:
    """Write a database from SQL (agent.sqlite.create_database, not through the tools)."""
    return create_database(path, sql)


@pytest.fixture(scope="module")
def weird(tmp_path_factory: pytest.TempPathFactory, engine: WorkerPool) -> Iterator[Database]:
    """Names with spaces, quotes, brackets, unicode, keywords, case twins; composite keys; a view."""
    path = build(tmp_path_factory.mktemp("weird") / "weird.sqlite", WEIRD_SQL)
    with Database.unruled(path, engine) as db:
        yield db


def outcome(text: str, tables: tuple[str, ...] = (), ok: bool = True) -> ToolOutcome:
    """The outcome a tool gives (without its raw query result)."""
    return ToolOutcome(text, ok, frozenset(tables))


def without_query(result: ToolOutcome) -> ToolOutcome:
    """The outcome without its raw query result, to compare with outcome(...)."""
    return ToolOutcome(result.text, result.ok, result.tables)

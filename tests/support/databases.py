"""Databases and statements the tests and the benchmarks share."""

from __future__ import annotations

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
    "runaway recursive CTE":
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
    "instr on megabyte strings":
        "WITH s(a) AS (SELECT printf('%.*c', 3000000, 'a')) "
        "SELECT instr(a || 'b', substr(a, 1, 1500000) || 'b') FROM s",
    "replace on megabyte strings":
        "WITH s(a) AS (SELECT printf('%.*c', 4000000, 'a')) "
        "SELECT length(replace(a, substr(a, 1, 1000000) || 'b', 'x')) FROM s",
    "printf width":
        "SELECT printf('%.*c', 2000000000, 'x')",
    "randomblob":
        "SELECT randomblob(2000000000)",
    "cartesian join":
        'SELECT count(*) FROM "order" a, "order" b, "order" c, "order" d, "order" e, "order" f, '
        'customer g, customer h, (WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r '
        'WHERE x < 100000) SELECT x FROM r)',
}

"""What the final SQL read: tables and columns (the authorizer's, completed from the statement's
program), in the answer and its text."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from mcp import Client

from agent.evaluation.datasets import load_dataset, select_examples
from agent.loop import run_episode
from agent.sqlite import Database, HideRules, QueryResult, WorkerPool, create_database
from mcp_server.answer.answer_text import tables_line
from mcp_server.answer.output import AnswerOutput
from mcp_server.app import build_server
from mcp_server.config.command_line import parse_settings
from tests.conftest import SHARED_DATA
from tests.support.mcp import TOOL
from tests.support.policies import PolicyBackend, ScriptPolicy, assistant_reply, tool_call

SHOP = """
CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE invoice (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer(id),
                      total REAL, paid INTEGER);
CREATE VIEW big_invoice AS SELECT id, customer_id FROM invoice WHERE total > 100;
INSERT INTO customer VALUES (1, 'Ada', 'Oslo'), (2, 'Bo', 'Lima');
INSERT INTO invoice VALUES (1, 1, 50, 1), (2, 1, 150, 0), (3, 2, 200, 1);
"""
JOIN = "SELECT c.name, sum(i.total) FROM Customer c JOIN invoice i ON i.customer_id = c.id GROUP BY c.name"
SUBQUERY = "SELECT name FROM customer WHERE id IN (SELECT customer_id FROM invoice WHERE paid = 0)"
CTE = (
    "WITH spend(cid, amount) AS (SELECT customer_id, sum(total) FROM invoice GROUP BY customer_id) "
    "SELECT count(*) FROM spend"
)
VIEW = "SELECT count(*) FROM big_invoice"
COUNT = "SELECT count(*) FROM customer"


# Tables joined by USING and NATURAL: SQLite matches their join columns without telling the
# authorizer, so a table joined only through them went unreported.
STORE = """
CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers,
                     day TEXT);
CREATE TABLE order_items (order_id INTEGER REFERENCES orders, sku TEXT, quantity INTEGER);
CREATE TABLE products (sku TEXT, title TEXT, secret TEXT);
CREATE INDEX products_sku ON products (sku);
CREATE TABLE regions (city TEXT PRIMARY KEY, region TEXT, note TEXT) WITHOUT ROWID;
CREATE VIEW order_cities AS SELECT o.order_id, c.city FROM orders o JOIN customers c USING (customer_id);
INSERT INTO customers VALUES (1, 'Ada', 'Oslo'), (2, 'Bo', 'Lima');
INSERT INTO orders VALUES (10, 1, 'mon'), (11, 2, 'tue'), (12, 1, 'wed');
INSERT INTO order_items VALUES (10, 'p1', 2), (11, 'p2', 5), (12, 'p1', 1);
INSERT INTO products VALUES ('p1', 'Pen', 'x'), ('p2', 'Ink', 'y');
INSERT INTO regions VALUES ('Oslo', 'North', 'a'), ('Lima', 'South', 'b');
"""
THREE_USING = (
    "SELECT c.city, sum(i.quantity) FROM customers c JOIN orders o USING (customer_id) "
    "JOIN order_items i USING (order_id) GROUP BY c.city"
)
THREE_USING_READ = (
    {"customers", "orders", "order_items"},
    {
        ("customers", "city"),
        ("customers", "customer_id"),
        ("orders", "customer_id"),
        ("orders", "order_id"),
        ("order_items", "order_id"),
        ("order_items", "quantity"),
    },
)
COVERING = "SELECT i.quantity FROM order_items i JOIN products USING (sku)"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return create_database(tmp_path / "shop.sqlite", SHOP)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return create_database(tmp_path / "store.sqlite", STORE)


def _read(database: Path, sql: str) -> tuple[set[str], set[tuple[str, str]]]:
    """The tables and columns `sql` read on `database` (which it must run without error)."""
    with Database.unruled(database) as db:
        result = db.query(sql, max_rows=10)
    assert result.ok, result.error
    return set(result.tables_read), set(result.columns_read)


@pytest.mark.parametrize(
    ("sql", "tables", "columns"),
    [
        (
            JOIN,
            {"customer", "invoice"},
            {("customer", "name"), ("customer", "id"), ("invoice", "total"), ("invoice", "customer_id")},
        ),
        (
            SUBQUERY,
            {"customer", "invoice"},
            {("customer", "name"), ("customer", "id"), ("invoice", "customer_id"), ("invoice", "paid")},
        ),
        (CTE, {"invoice"}, {("invoice", "customer_id"), ("invoice", "total")}),
        (VIEW, {"invoice"}, {("invoice", "id"), ("invoice", "customer_id"), ("invoice", "total")}),
        (COUNT, {"customer"}, set()),
    ],
)
def test_query_reports_the_tables_and_columns_it_read(
    shop: Path, sql: str, tables: set[str], columns: set[tuple[str, str]]
) -> None:
    """The authorizer's reads: schema spelling; a CTE's tables, not the CTE; a view flattened away."""
    assert _read(shop, sql) == (tables, columns)


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        # SQLite tells the authorizer a CTE only counted is a table read, under its own name.
        ("WITH a AS (SELECT 1 AS x) SELECT count(*) FROM a, customer", {"customer"}),
        ("WITH customer AS (SELECT 1 AS x) SELECT count(*) FROM customer", set()),  # it shadows a table
        ("WITH Customer AS (SELECT 1 AS x UNION SELECT 2) SELECT count(*) FROM customer", set()),
        (
            "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3) "
            "SELECT count(*) FROM c",
            set(),
        ),
        (
            "WITH paid AS (SELECT * FROM invoice WHERE paid) SELECT count(*) FROM paid JOIN customer "
            "ON customer.id = paid.customer_id",
            {"invoice", "customer"},
        ),
        # What no CTE is stays: eponymous virtual tables and the schema table, counted.
        ("SELECT count(*) FROM json_each('[1, 2]')", {"json_each"}),
        ("SELECT count(*) FROM pragma_table_info('customer')", {"pragma_table_info"}),
        ("SELECT count(*) FROM sqlite_master", {"sqlite_master"}),
        ("SELECT count(*) FROM CUSTOMER WHERE 0", {"customer"}),
    ],
)
def test_a_cte_only_counted_is_no_table_read(shop: Path, sql: str, tables: set[str]) -> None:
    """A counted name whose b-tree the program never opens, or that names nothing stored, is a CTE."""
    assert _read(shop, sql)[0] == tables


@pytest.mark.parametrize(
    ("sql", "tables", "columns"),
    [
        (THREE_USING, *THREE_USING_READ),
        # The joined table's only columns are its join keys (here its rowid alias).
        (
            "SELECT o.day FROM orders o JOIN customers USING (customer_id)",
            {"orders", "customers"},
            {("orders", "day"), ("orders", "customer_id"), ("customers", "customer_id")},
        ),
        # Each name once, as the schema spells it (the authorizer spells a table only counted as
        # the SQL does).
        (
            "SELECT count(*) FROM CUSTOMERS JOIN Orders USING (customer_id)",
            {"customers", "orders"},
            {("customers", "customer_id"), ("orders", "customer_id")},
        ),
        # A rowid alias compared by a seek on the rowid, never read as a column.
        (
            "SELECT count(*) FROM order_items JOIN orders USING (order_id)",
            {"order_items", "orders"},
            {("order_items", "order_id"), ("orders", "order_id")},
        ),
        # NATURAL joins on the common column (city, a WITHOUT ROWID table's key).
        (
            "SELECT count(*) FROM customers NATURAL JOIN regions",
            {"customers", "regions"},
            {("customers", "city"), ("regions", "city")},
        ),
        # products is read only through its covering index: its table is never opened.
        (
            COVERING,
            {"order_items", "products"},
            {("order_items", "quantity"), ("order_items", "sku"), ("products", "sku")},
        ),
        # A view as the authorizer reports it (with every column of its own select list, read when
        # SQLite flattens it into the query), its tables' join columns completed.
        (
            "SELECT city FROM order_cities",
            {"order_cities", "orders", "customers"},
            {
                ("order_cities", "city"),
                ("customers", "city"),
                ("customers", "customer_id"),
                ("orders", "customer_id"),
                ("orders", "order_id"),
            },
        ),
        # Subqueries, correlated or not, compound SELECTs, CTEs and window functions.
        (
            "SELECT name FROM customers WHERE customer_id IN "
            "(SELECT customer_id FROM orders JOIN order_items USING (order_id))",
            {"customers", "orders", "order_items"},
            {
                ("customers", "customer_id"),
                ("customers", "name"),
                ("orders", "customer_id"),
                ("orders", "order_id"),
                ("order_items", "order_id"),
            },
        ),
        (
            "SELECT name FROM customers c WHERE EXISTS (SELECT 1 FROM orders NATURAL JOIN order_items "
            "WHERE orders.customer_id = c.customer_id)",
            {"customers", "orders", "order_items"},
            {
                ("customers", "customer_id"),
                ("customers", "name"),
                ("orders", "customer_id"),
                ("orders", "order_id"),
                ("order_items", "order_id"),
            },
        ),
        (
            "SELECT city FROM customers UNION SELECT day FROM orders JOIN order_items USING (order_id)",
            {"customers", "orders", "order_items"},
            {("customers", "city"), ("orders", "day"), ("orders", "order_id"), ("order_items", "order_id")},
        ),
        (
            "WITH n AS (SELECT count(*) AS k FROM orders JOIN customers USING (customer_id)) SELECT k FROM n",
            {"orders", "customers"},
            {("orders", "customer_id"), ("customers", "customer_id")},
        ),
        (
            "SELECT name, row_number() OVER (PARTITION BY city) FROM customers JOIN orders USING (customer_id)",
            {"customers", "orders"},
            {
                ("customers", "city"),
                ("customers", "customer_id"),
                ("customers", "name"),
                ("orders", "customer_id"),
            },
        ),
    ],
)
def test_query_reports_what_using_and_natural_joins_read(
    store: Path, sql: str, tables: set[str], columns: set[tuple[str, str]]
) -> None:
    """Every table and join column, whatever the join syntax: the program names what SQLite reads."""
    assert _read(store, sql) == (tables, columns)


def test_the_covering_index_case_never_opens_the_table(store: Path) -> None:
    """The premise of the covering-index case: SQLite reads products through its index alone."""
    conn = sqlite3.connect(store)
    try:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {COVERING}")]
    finally:
        conn.close()
    assert plan == ["SCAN i", "SEARCH products USING COVERING INDEX products_sku (sku=?)"]


def test_reads_false_leaves_the_authorizers_reads(store: Path) -> None:
    """Without `reads` no program is read: what the authorizer saw, which misses USING's tables."""
    with Database.unruled(store) as db:
        result = db.query(THREE_USING, max_rows=10, reads=False)
    assert (result.tables_read, result.columns_read) == (
        frozenset({"customers", "order_items"}),
        frozenset({("customers", "city"), ("order_items", "quantity")}),
    )


def test_reads_follow_a_schema_change(tmp_path: Path) -> None:
    """Root pages are resolved again when the schema changes (a table dropped and made anew)."""
    path = create_database(tmp_path / "s.sqlite", "CREATE TABLE a (id, x); CREATE TABLE b (id, y);")
    sql = "SELECT count(*) FROM a JOIN b USING (id)"
    with Database.unruled(path) as db:
        before = db.query(sql, max_rows=1)
        conn = sqlite3.connect(path)
        conn.executescript("DROP TABLE b; CREATE TABLE c (z); CREATE TABLE b (y, id);")
        conn.close()
        after = db.query(sql, max_rows=1)
    assert (before.columns_read, after.columns_read) == (
        frozenset({("a", "id"), ("b", "id")}),
        frozenset({("a", "id"), ("b", "id")}),
    )
    assert after.tables_read == frozenset({"a", "b"})


def test_a_virtual_tables_storage_is_no_read_of_its_statement(tmp_path: Path) -> None:
    """A statement reads the same tables on every run: a virtual table's module reading its shadow
    tables (on the connection's first run only) is not reported; a shadow table read by name is."""
    path = create_database(
        tmp_path / "fts.sqlite",
        "CREATE VIRTUAL TABLE docs USING fts5(body); INSERT INTO docs VALUES ('hello world'), ('bye');"
        "CREATE TABLE docs_notes (note); INSERT INTO docs_notes VALUES ('n');",
    )
    match = "SELECT body FROM docs WHERE docs MATCH 'hello'"
    by_name = "SELECT count(*) FROM docs, docs_content, docs_notes WHERE docs MATCH 'hello'"
    with Database.unruled(path) as db:
        runs = [db.query(sql, max_rows=10) for sql in (match, match, by_name, by_name)]
    assert [(r.rows, r.tables_read, r.columns_read) for r in runs] == [
        ((("hello world",),), frozenset({"docs"}), frozenset({("docs", "body"), ("docs", "docs")})),
        ((("hello world",),), frozenset({"docs"}), frozenset({("docs", "body"), ("docs", "docs")})),
    ] + [
        (((2,),), frozenset({"docs", "docs_content", "docs_notes"}), frozenset({("docs", "docs")})),
    ] * 2


def test_reads_under_hide_rules_name_nothing_hidden(store: Path) -> None:
    """Under rules the program is read within them: hidden names never appear, reads still do."""
    rules = HideRules.parse(["products.secret", "regions.note"])
    sqls = {
        "SELECT i.quantity, p.title FROM order_items i JOIN products p ON p.sku = i.sku": (
            {"order_items", "products"},
            {("order_items", "quantity"), ("order_items", "sku"), ("products", "sku"), ("products", "title")},
        ),
        "SELECT c.name, r.region FROM customers c JOIN regions r ON r.city = c.city": (
            {"customers", "regions"},
            {("customers", "name"), ("customers", "city"), ("regions", "city"), ("regions", "region")},
        ),
        "SELECT o.day FROM orders o JOIN customers USING (customer_id)": (
            {"orders", "customers"},
            {("orders", "day"), ("orders", "customer_id"), ("customers", "customer_id")},
        ),
        "SELECT count(*) FROM order_items JOIN products USING (sku)": (  # sku is visible
            {"order_items", "products"},
            {("order_items", "sku"), ("products", "sku")},
        ),
    }
    with Database(store, hide=rules) as db:
        results = {sql: db.query(sql, max_rows=10) for sql in sqls}
        refused = db.query("SELECT count(*) FROM order_items NATURAL JOIN products", max_rows=1)
    assert {sql: (r.status.value, set(r.tables_read), set(r.columns_read)) for sql, r in results.items()} == {
        sql: ("ok", *read) for sql, read in sqls.items()
    }
    assert (refused.status.value, refused.tables_read, refused.columns_read) == (
        "hidden",
        frozenset(),
        frozenset(),
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("sql", "tables", "columns"),
    [
        (
            JOIN,
            ("customer", "invoice"),
            (("customer", "id"), ("customer", "name"), ("invoice", "customer_id"), ("invoice", "total")),
        ),
        (
            SUBQUERY,
            ("customer", "invoice"),
            (("customer", "id"), ("customer", "name"), ("invoice", "customer_id"), ("invoice", "paid")),
        ),
        (CTE, ("invoice",), (("invoice", "customer_id"), ("invoice", "total"))),
        (VIEW, ("invoice",), (("invoice", "customer_id"), ("invoice", "id"), ("invoice", "total"))),
        (COUNT, ("customer",), ()),
    ],
)
async def test_episode_result_names_the_schema_tables_its_sql_read(
    shop: Path, sql: str, tables: tuple[str, ...], columns: tuple[tuple[str, str], ...]
) -> None:
    """The episode keeps only schema names (no CTE), in name order, for the answer it settled on."""
    policy = ScriptPolicy([assistant_reply("answer", tool_call("submit_sql", sql=sql))])
    with Database.unruled(shop) as db:
        result = await run_episode("Which?", db, PolicyBackend(policy))
    assert (result.sql, result.tables_read, result.columns_read) == (sql, tables, columns)


def test_tables_line_lists_each_table_with_its_columns() -> None:
    """One line: tables in name order, each with the columns read, none for a count(*)."""
    assert tables_line(
        ["invoice", "customer", "orders"], {"customer": ["name", "id"], "invoice": ["total"]}
    ) == ("Tables read: customer (id, name), invoice (total), orders.")
    assert tables_line([], {}) is None


async def _answer(tmp_path: Path, database: Path, sql: str) -> tuple[AnswerOutput, list[str]]:
    """The MCP tool's answer when the model submits `sql` at once: structured, and text paragraphs."""
    policy = ScriptPolicy([assistant_reply("answer", tool_call("submit_sql", sql=sql))])
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    server = build_server(
        parse_settings(["--db", f"db={database}"], environ),
        environ=environ,
        backend_factory=lambda _: PolicyBackend(policy),
    )
    async with Client(server) as client:
        result = await client.call_tool(TOOL, {"question": "Which?"})
    return AnswerOutput.model_validate(result.structured_content), result.content[0].text.split("\n\n")


@pytest.mark.anyio
async def test_answer_carries_the_tables_its_sql_read(tmp_path: Path, shop: Path) -> None:
    """Through the MCP tool: `tables`, `columns_read` and the text line follow the final SQL."""
    answer, paragraphs = await _answer(tmp_path, shop, JOIN)
    assert (answer.tables, answer.columns_read) == (
        ["customer", "invoice"],
        {"customer": ["id", "name"], "invoice": ["customer_id", "total"]},
    )
    assert "Tables read: customer (id, name), invoice (customer_id, total)." in paragraphs


@pytest.mark.anyio
async def test_answer_names_every_table_a_using_join_read(tmp_path: Path, store: Path) -> None:
    """Through the MCP tool: a table joined only by USING is in `tables`, `columns_read` and the line."""
    answer, paragraphs = await _answer(tmp_path, store, THREE_USING)
    assert (answer.tables, answer.columns_read) == (
        ["customers", "order_items", "orders"],
        {
            "customers": ["city", "customer_id"],
            "order_items": ["order_id", "quantity"],
            "orders": ["customer_id", "order_id"],
        },
    )
    assert (
        "Tables read: customers (city, customer_id), order_items (order_id, quantity), "
        "orders (customer_id, order_id)."
    ) in paragraphs


# `JOIN t AS b ON b.c = a.c` (the same column on both sides): what USING (c) says in other words.
_SAME_COLUMN_JOIN = re.compile(
    r"JOIN\s+(\w+)\s+(?:AS\s+)?(\w+)\s+ON\s+\w+\.(\w+)\s*=\s*\w+\.(\w+)", re.IGNORECASE
)


def _folded(result: QueryResult) -> tuple[set[str], set[tuple[str, str]]]:
    """What a result read, names casefolded (the authorizer names a table only counted as the SQL spells it)."""
    return (
        {t.casefold() for t in result.tables_read},
        {(t.casefold(), c.casefold()) for t, c in result.columns_read},
    )


def _with_using(sql: str) -> str:
    return _SAME_COLUMN_JOIN.sub(
        lambda m: f"JOIN {m[1]} AS {m[2]} USING ({m[3]})" if m[3].casefold() == m[4].casefold() else m[0], sql
    )


@pytest.mark.needs_shared("spider_dev/dev.json", "bird_minidev/mini_dev_sqlite.json")
def test_gold_sql_reads_the_same_whatever_the_join_syntax(engine: WorkerPool) -> None:
    """Spider dev and BIRD mini-dev gold SQL: the program adds nothing to what the authorizer
    reports of ON joins (but its spelling), and each join rewritten with USING reports exactly what
    its ON form does."""
    bird = SHARED_DATA / "bird_minidev"
    datasets = [
        load_dataset(SHARED_DATA / "spider_dev"),
        load_dataset(bird / "mini_dev_sqlite.json", db_root=bird / "schema_only_stubs"),
    ]
    added, differ, rewritten = [], [], 0
    for dataset in datasets:
        for example in select_examples(dataset).examples:
            db = Database.unruled(dataset.database_path(example.db_id), engine)
            read = {
                reads: db.query(example.gold_sql, max_rows=1, count_cap=1, reads=reads)
                for reads in (False, True)
            }
            if not read[True].ok:
                continue
            if _folded(read[True]) != _folded(read[False]):
                added.append(example.gold_sql)
            using = _with_using(example.gold_sql)
            if using != example.gold_sql:
                other = db.query(using, max_rows=1, count_cap=1)
                rewritten += other.ok
                if other.ok and (other.tables_read, other.columns_read) != (
                    read[True].tables_read,
                    read[True].columns_read,
                ):
                    differ.append(using)
    assert (added, differ) == ([], [])
    assert rewritten > 400  # the rewrite reached most joins (458 on this data)

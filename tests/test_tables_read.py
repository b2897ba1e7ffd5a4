"""What the final SQL read: tables and columns from the authorizer, in the answer and its text."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from agent.loop import run_episode
from agent.sqlite import Database, create_database
from mcp_server.answer.output import AnswerOutput, tables_line
from mcp_server.app import build_server
from mcp_server.config.command_line import parse_settings
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
CTE = ("WITH spend(cid, amount) AS (SELECT customer_id, sum(total) FROM invoice GROUP BY customer_id) "
       "SELECT count(*) FROM spend")
VIEW = "SELECT count(*) FROM big_invoice"
COUNT = "SELECT count(*) FROM customer"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return create_database(tmp_path / "shop.sqlite", SHOP)


@pytest.mark.parametrize(("sql", "tables", "columns"), [
    (JOIN, {"customer", "invoice"},
     {("customer", "name"), ("customer", "id"), ("invoice", "total"), ("invoice", "customer_id")}),
    (SUBQUERY, {"customer", "invoice"},
     {("customer", "name"), ("customer", "id"), ("invoice", "customer_id"), ("invoice", "paid")}),
    (CTE, {"invoice", "spend"}, {("invoice", "customer_id"), ("invoice", "total")}),
    (VIEW, {"invoice"}, {("invoice", "id"), ("invoice", "customer_id"), ("invoice", "total")}),
    (COUNT, {"customer"}, set()),
])
def test_query_reports_the_tables_and_columns_it_read(shop: Path, sql: str, tables: set[str],
                                                      columns: set[tuple[str, str]]) -> None:
    """The authorizer's reads: schema spelling; a CTE under its own name; a view flattened away."""
    with Database(shop) as db:
        result = db.query(sql, max_rows=10)
    assert result.ok, result.error
    assert (result.tables_read, result.columns_read) == (frozenset(tables), frozenset(columns))


@pytest.mark.anyio
@pytest.mark.parametrize(("sql", "tables", "columns"), [
    (JOIN, ("customer", "invoice"),
     (("customer", "id"), ("customer", "name"), ("invoice", "customer_id"), ("invoice", "total"))),
    (SUBQUERY, ("customer", "invoice"),
     (("customer", "id"), ("customer", "name"), ("invoice", "customer_id"), ("invoice", "paid"))),
    (CTE, ("invoice",), (("invoice", "customer_id"), ("invoice", "total"))),
    (VIEW, ("invoice",), (("invoice", "customer_id"), ("invoice", "id"), ("invoice", "total"))),
    (COUNT, ("customer",), ()),
])
async def test_episode_result_names_the_schema_tables_its_sql_read(
        shop: Path, sql: str, tables: tuple[str, ...], columns: tuple[tuple[str, str], ...]) -> None:
    """The episode keeps only schema names (no CTE), in name order, for the answer it settled on."""
    policy = ScriptPolicy([assistant_reply("answer", tool_call("submit_sql", sql=sql))])
    with Database(shop) as db:
        result = await run_episode("Which?", db, PolicyBackend(policy))
    assert (result.sql, result.tables_read, result.columns_read) == (sql, tables, columns)


def test_tables_line_lists_each_table_with_its_columns() -> None:
    """One line: tables in name order, each with the columns read, none for a count(*)."""
    assert tables_line(["invoice", "customer", "orders"],
                       {"customer": ["name", "id"], "invoice": ["total"]}) == (
        "Tables read: customer (id, name), invoice (total), orders.")
    assert tables_line([], {}) is None


@pytest.mark.anyio
async def test_answer_carries_the_tables_its_sql_read(tmp_path: Path, shop: Path) -> None:
    """Through the MCP tool: `tables`, `columns_read` and the text line follow the final SQL."""
    policy = ScriptPolicy([assistant_reply("answer", tool_call("submit_sql", sql=JOIN))])
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    server = build_server(parse_settings(["--db", f"shop={shop}"], environ), environ=environ,
                          backend_factory=lambda _: PolicyBackend(policy))
    async with Client(server) as client:
        result = await client.call_tool(TOOL, {"question": "Spend per customer?"})
    answer = AnswerOutput.model_validate(result.structured_content)
    assert (answer.tables, answer.columns_read) == (
        ["customer", "invoice"], {"customer": ["id", "name"], "invoice": ["customer_id", "total"]})
    assert "Tables read: customer (id, name), invoice (customer_id, total)." in (
        result.content[0].text.split("\n\n"))

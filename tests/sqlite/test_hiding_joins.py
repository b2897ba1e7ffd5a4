"""Under hide rules, refuse only what could read hidden data: a USING or NATURAL join is refused
only when its own FROM clause names a table with hidden columns and the join could compare one,
and counting a CTE is allowed (issue 31, §5). Nothing refused before that reads hidden data runs now."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.sqlite import Database, HideRules, QueryStatus, create_database
from agent.sqlite.hiding import JOIN_HINT

SCHEMA = """
CREATE TABLE Suppliers (SupplierID INTEGER PRIMARY KEY, Name TEXT);
CREATE TABLE Products (ProductID INTEGER PRIMARY KEY, SupplierID INTEGER, Name TEXT, Cost REAL);
CREATE TABLE Shippers (ShipperID INTEGER PRIMARY KEY, Company TEXT);
CREATE TABLE Orders (OrderID INTEGER PRIMARY KEY, ShipperID INTEGER, CustomerID INTEGER);
CREATE TABLE Customers (CustomerID INTEGER PRIMARY KEY, Email TEXT, City TEXT);
CREATE VIEW SupplierProducts AS SELECT Suppliers.Name AS supplier, Products.Name AS product
    FROM Products JOIN Suppliers USING (SupplierID);
CREATE VIEW ProductCosts AS SELECT Name FROM Products NATURAL JOIN (SELECT 1 AS Cost);
INSERT INTO Suppliers VALUES (1, 'Acme'), (2, 'Bolt');
INSERT INTO Products VALUES (10, 1, 'anvil', 99.5), (11, 2, 'nut', 0.25);
INSERT INTO Shippers VALUES (1, 'Speedy');
INSERT INTO Customers VALUES (5, 'SECRET-MAIL@x.org', 'Oslo');
INSERT INTO Orders VALUES (100, 1, 5);
"""
RULES = ["Products.ProductID", "Products.Cost", "Customers.Email"]
NOW_ANSWERED = {
    "SELECT p.Name, s.Name FROM Products p JOIN Suppliers s USING (SupplierID) ORDER BY 1": [
        ("anvil", "Acme"),
        ("nut", "Bolt"),
    ],
    "SELECT count(*) FROM main.Products AS p JOIN Suppliers USING (supplierid)": [(2,)],
    "SELECT Company FROM Orders JOIN Shippers USING (ShipperID) "
    "WHERE CustomerID IN (SELECT CustomerID FROM Customers WHERE City = 'Oslo')": [("Speedy",)],
    "WITH o AS (SELECT * FROM Orders NATURAL JOIN Shippers) "
    "SELECT c.City, o.Company FROM o JOIN Customers c ON c.CustomerID = o.CustomerID": [("Oslo", "Speedy")],
    "SELECT supplier, product FROM SupplierProducts ORDER BY 2": [("Acme", "anvil"), ("Bolt", "nut")],
}
# Joins that could compare a hidden column, and joins that cannot be told apart from one by what
# the model may know: each gets the same refusal, whether the column exists, is hidden or not.
REFUSED = [
    "SELECT Name FROM Products JOIN (SELECT 99.5 AS Cost) USING (Cost)",
    "SELECT Name FROM Products JOIN (SELECT 99.5 AS Guess) USING (Guess)",
    "SELECT Name FROM Products JOIN (SELECT 10 AS ProductID) USING (ProductID)",
    "SELECT Name FROM Products NATURAL JOIN Suppliers",
    "SELECT City FROM Customers NATURAL JOIN (SELECT 'SECRET-MAIL@x.org' AS Email)",
    "SELECT 1 FROM Orders JOIN (SELECT * FROM Customers c JOIN Orders USING (CustomerID, Email))",
    "SELECT Name FROM Products JOIN Suppliers USING (SupplierID, Cost)",
]
CTE_COUNTS = {
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 5) SELECT count(*) FROM r": [
        (5,)
    ],
    "WITH cheap AS (SELECT Name FROM Products WHERE Name < 'o') SELECT count(*) FROM cheap": [(2,)],
    "SELECT (WITH s(n) AS (SELECT Name FROM Suppliers) SELECT count(*) FROM s)": [(2,)],
    "WITH one AS MATERIALIZED (SELECT 1) SELECT 'yes' FROM one": [("yes",)],
}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Database:
    path = create_database(tmp_path_factory.mktemp("joins") / "shop.db", SCHEMA)
    with Database(path, hide=HideRules.parse(RULES)) as opened:
        yield opened


@pytest.mark.parametrize("sql", NOW_ANSWERED)
def test_a_join_that_cannot_compare_a_hidden_column_runs(db: Database, sql: str) -> None:
    """USING on visible columns of the tables with hidden ones, and USING or NATURAL joins whose
    own FROM clause names none (the hidden table read elsewhere, with ON), answer; so does a
    view built on such a join."""
    result = db.query(sql, max_rows=10)
    assert (result.status, list(result.rows)) == (QueryStatus.OK, NOW_ANSWERED[sql]), result.error


@pytest.mark.parametrize("sql", REFUSED)
def test_a_join_that_could_compare_a_hidden_column_is_refused_alike(db: Database, sql: str) -> None:
    """USING a column the model cannot see in a table of the join, or NATURAL with one, is
    refused with the same text for a hidden, a missing and an unknown column."""
    result = db.query(sql, max_rows=10)
    assert (result.status, result.error, result.rows) == (QueryStatus.HIDDEN, f"not available: {JOIN_HINT}", ())


def test_a_view_whose_join_could_compare_a_hidden_column_stays_hidden(db: Database) -> None:
    """The view over a NATURAL join with the table that hides Cost is hidden; the one on USING
    (SupplierID) is listed."""
    names = db.schema().names
    assert "SupplierProducts" in names and "ProductCosts" not in names


@pytest.mark.parametrize("sql", CTE_COUNTS)
def test_counting_a_cte_is_allowed(db: Database, sql: str) -> None:
    """count(*) (or a constant) over a CTE, recursive or not, in a subquery too, answers."""
    result = db.query(sql, max_rows=10)
    assert (result.status, list(result.rows)) == (QueryStatus.OK, CTE_COUNTS[sql]), result.error


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM sqlite_stmt",
        "WITH sqlite_stmt AS (SELECT 1) SELECT (SELECT count(*) FROM sqlite_stmt)",
        "SELECT (WITH dbstat AS (SELECT 1) SELECT 1), (SELECT count(*) FROM dbstat)",
        "SELECT (WITH sqlite_stmt AS (SELECT 1) SELECT 1), (SELECT count(*) FROM sqlite_stmt)",
    ],
)
def test_a_cte_named_like_a_virtual_table_opens_nothing(db: Database, sql: str) -> None:
    """A CTE that shares an eponymous virtual table's name does not make the table readable."""
    result = db.query(sql, max_rows=10)
    assert result.status is QueryStatus.HIDDEN and "cannot be read on this database" in (result.error or "")


def test_without_rules_the_same_joins_answer(tmp_path: Path) -> None:
    """Nothing of this applies without rules (the refused joins are valid SQL)."""
    with Database.unruled(create_database(tmp_path / "plain.db", SCHEMA)) as plain:
        assert plain.query(REFUSED[3], max_rows=5).status is QueryStatus.OK

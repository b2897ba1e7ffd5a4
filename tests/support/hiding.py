"""A database with secrets and hide rules, and every read of hidden data we know of.

Shared by the hiding tests of the SQLite layer and of the MCP server.
"""

from __future__ import annotations

SECRETS = ("SECRET-MAIL-7f3a", "SECRET-BIRTH-1970", "SECRET-PW-x9", "4242.42", "SECRET-NOTE")
RULES = ("Customer.Email", "Invoice", "*.password*", "employee.BIRTHDATE", "Nothing.here")
SCHEMA_SQL = """
CREATE TABLE Employee (EmployeeId INTEGER PRIMARY KEY, LastName TEXT, BirthDate TEXT,
                       PasswordHash TEXT);
CREATE TABLE Customer (CustomerId INTEGER PRIMARY KEY, FirstName TEXT, Email TEXT,
                       SupportRepId INTEGER REFERENCES Employee (EmployeeId),
                       MailDomain TEXT GENERATED ALWAYS AS (substr(Email, 8)) VIRTUAL);
CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY AUTOINCREMENT,
                      CustomerId INTEGER REFERENCES Customer (CustomerId), Total REAL,
                      Note TEXT);
CREATE INDEX CustomerEmail ON Customer (Email);
CREATE VIEW CustomerContacts AS SELECT FirstName, Email FROM Customer;
CREATE VIEW CustomerNames AS SELECT CustomerId, FirstName FROM Customer;
CREATE VIEW InvoiceTotals AS SELECT CustomerId, sum(Total) AS total FROM Invoice GROUP BY 1;
CREATE VIEW Spenders AS SELECT FirstName FROM Customer JOIN Invoice USING (CustomerId);
CREATE VIEW NamesOfNames AS SELECT FirstName FROM CustomerContacts;
INSERT INTO Employee VALUES (1, 'Adams', 'SECRET-BIRTH-1970', 'SECRET-PW-x9');
INSERT INTO Customer (CustomerId, FirstName, Email, SupportRepId)
  VALUES (1, 'Ann', 'SECRET-MAIL-7f3a@example.com', 1), (2, 'Bo', 'SECRET-MAIL-7f3a@b.org', 1);
INSERT INTO Invoice VALUES (1, 1, 4242.42, 'SECRET-NOTE');
ANALYZE;
"""
# Every way to read hidden data we know of; each must fail without showing a secret.
ATTACKS = (
    "SELECT Email FROM Customer",
    "SELECT * FROM Customer",
    "SELECT c.* FROM Customer AS c",
    "SELECT FirstName FROM Customer WHERE Email LIKE 'SECRET%'",
    "SELECT FirstName FROM Customer ORDER BY Email",
    "SELECT FirstName FROM Customer GROUP BY Email",
    "SELECT count(DISTINCT Email) FROM Customer",
    "SELECT (SELECT max(Email) FROM Customer)",
    "SELECT FirstName FROM Customer WHERE EXISTS (SELECT 1 FROM Invoice)",
    "WITH c AS (SELECT Email FROM Customer) SELECT count(*) FROM c",
    "WITH c AS (SELECT * FROM Customer) SELECT FirstName FROM c",
    "SELECT * FROM (SELECT * FROM Customer)",
    "SELECT MailDomain FROM Customer",
    "SELECT * FROM CustomerContacts",
    "SELECT FirstName FROM CustomerContacts",
    "SELECT * FROM NamesOfNames",
    "SELECT count(*) FROM Invoice",
    "SELECT * FROM Invoice",
    "SELECT * FROM InvoiceTotals",
    "SELECT * FROM Spenders",
    "SELECT FirstName FROM Customer JOIN Invoice USING (CustomerId)",
    "SELECT FirstName FROM Customer NATURAL JOIN (SELECT 'x' AS Email)",
    "SELECT c.FirstName FROM Customer c JOIN (SELECT 'SECRET-MAIL-7f3a@b.org' AS Email) USING (Email)",
    "SELECT BirthDate FROM Employee",
    'SELECT "PASSWORDHASH" FROM employee',
    "SELECT * FROM Employee",
    "SELECT sql FROM sqlite_master",
    "SELECT * FROM sqlite_schema",
    "SELECT name FROM sqlite_master WHERE type = 'table'",
    "SELECT * FROM pragma_table_info('Customer')",
    "SELECT * FROM pragma_table_xinfo('Invoice')",
    "SELECT name FROM pragma_table_list",
    "SELECT * FROM pragma_index_list('Customer')",
    "PRAGMA table_info(Customer)",
    "PRAGMA index_info(CustomerEmail)",
    "PRAGMA foreign_key_list(Invoice)",
    "EXPLAIN SELECT Email FROM Customer",
    "SELECT * FROM sqlite_stat1",
    "SELECT name FROM dbstat",
    "SELECT name, seq FROM sqlite_sequence",
    "SELECT sql FROM sqlite_stmt",
    "EXPLAIN QUERY PLAN SELECT CustomerId FROM Customer",
    "SELECT FirstName FROM Customer INDEXED BY CustomerEmail",
    "SELECT 1 FROM main.Invoice NATURAL JOIN Employee",
)

# Conditions on hidden data as pairs of statements, the first true and the second false on
# SCHEMA_SQL's rows; each fails only when SQLite evaluates its error (an integer overflow, or
# malformed JSON). Run without the rules, the two of a pair would end differently: a save that
# did so told one bit of a hidden value per call (issue 31). Under the rules both are refused
# before they run, alike.
OVERFLOW, BAD_JSON = "abs(-9223372036854775808)", "json_extract('{', '$')"


def _pair(statement: str, true: str, false: str) -> tuple[str, str]:
    """`statement` with its `{}` filled so that its condition is true, then false."""
    return statement.replace("{}", true, 1), statement.replace("{}", false, 1)


def _case(condition: str, error: str = OVERFLOW) -> str:
    return f"SELECT CASE WHEN {condition} THEN 1 ELSE {error} END"


CONDITION_PROBES: tuple[tuple[str, str], ...] = (
    _pair(_case("(SELECT Email FROM Customer WHERE CustomerId = 1) LIKE '{}'"), "SECRET%", "x%"),
    _pair(_case("(SELECT Email FROM Customer WHERE CustomerId = 1) LIKE '{}'", BAD_JSON), "SECRET%", "x%"),
    _pair(_case("(SELECT Total FROM Invoice) {}"), "> 4000", "< 0"),
    _pair(_case("(SELECT \"PASSWORDHASH\" FROM employee) = '{}'"), "SECRET-PW-x9", "x"),
    _pair(_case("EXISTS (SELECT 1 FROM Employee WHERE BirthDate = '{}')"), "SECRET-BIRTH-1970", "x"),
    _pair(_case("(SELECT Email FROM CustomerContacts LIMIT 1) LIKE '{}'"), "SECRET%", "x%"),
    _pair(_case("(SELECT total FROM InvoiceTotals) {}"), "> 4000", "< 0"),
    _pair(_case("(SELECT MailDomain FROM Customer WHERE CustomerId = 1) LIKE '{}'"), "MAIL%", "x%"),
    _pair(
        "WITH c AS (SELECT Email AS e FROM Customer) " + _case("(SELECT e FROM c LIMIT 1) LIKE '{}'"),
        "SECRET%",
        "x%",
    ),
    _pair(
        "SELECT FirstName FROM Customer ORDER BY (" + _case("Email LIKE '{}'").replace(" END", " END)"),
        "SECRET%",
        "x%",
    ),
    _pair(
        "SELECT FirstName FROM Customer c WHERE (SELECT CASE WHEN i.Note = '{}' THEN 1 ELSE "
        f"{BAD_JSON} END FROM Invoice i WHERE i.CustomerId = c.CustomerId)",
        "SECRET-NOTE",
        "x",
    ),
)
# A hidden name and a missing one like it: a refusal must say the same of both (but the name).
HIDDEN_AND_MISSING = (
    ("SELECT count(*) FROM Invoice", "Invoice", "Invoize"),
    ("SELECT Email FROM Customer", "Email", "Emial"),
    ("SELECT c.Email FROM Customer AS c WHERE c.CustomerId = 1", "Email", "Emial"),
    ("SELECT * FROM CustomerContacts", "CustomerContacts", "CustomerContactz"),
    ("SELECT total FROM InvoiceTotals", "InvoiceTotals", "InvoiceTotalz"),
    ("SELECT FirstName FROM Customer INDEXED BY CustomerEmail", "CustomerEmail", "CustomerEmale"),
    ("SELECT 1 FROM main.Invoice", "Invoice", "Invoize"),
)

"""Hiding holds where SQLite itself looks past the authorizer: virtual tables, SQLite's own tables,
EXPLAIN and INDEXED BY, schemas past the size cap, connections shared by two rule sets, and the
words of a refusal (a hidden name answers like a missing one)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from agent.sqlite import Database, HideRules, QueryStatus, WorkerLimits, WorkerPool, create_database
from agent.sqlite._authorizer import StatementGuard
from agent.sqlite.hiding import Withheld
from agent.tools import run_tool
from tests.support.mcp import TOOL
from tests.support.mcp_in_process import build
from tests.support.policies import PolicyBackend, ScriptedReply, ScriptPolicy, assistant_reply, tool_call

SECRETS = ("987654", "SECRET-MAIL", "SECRET-OWNER", "SECRET-PIN")
RULES = ("Customer.Email", "docs.secret", "d4.secret", "geo.owner", "Vault")
SCHEMA_SQL = """
CREATE TABLE Customer (CustomerId INTEGER PRIMARY KEY, FirstName TEXT, Email TEXT UNIQUE);
CREATE INDEX CustomerEmail ON Customer (Email);
CREATE INDEX CustomerDomain ON Customer (substr(Email, 8));
CREATE INDEX CustomerName ON Customer (FirstName);
INSERT INTO Customer VALUES (1, 'Zoe', 'aSECRET-MAIL@a.org'), (2, 'Ann', 'zSECRET-MAIL@z.org'),
                            (3, 'Max', 'mSECRET-MAIL@m.org');
CREATE VIRTUAL TABLE docs USING fts5(title, secret);
INSERT INTO docs VALUES ('hello world', '987654 codes');
CREATE VIRTUAL TABLE docs_v USING fts5vocab('docs', 'row');
CREATE VIRTUAL TABLE d4 USING fts4(title, secret);
INSERT INTO d4 VALUES ('hello world', '987654 codes');
CREATE VIRTUAL TABLE d4_terms USING fts4aux(d4);
CREATE VIRTUAL TABLE cust_fts USING fts5(FirstName, Email, content='Customer',
                                         content_rowid='CustomerId');
INSERT INTO cust_fts (cust_fts) VALUES ('rebuild');
CREATE VIRTUAL TABLE geo USING rtree(id, minx, maxx, +owner);
INSERT INTO geo VALUES (1, 0, 1, 'SECRET-OWNER');
CREATE VIRTUAL TABLE pub USING fts5(body);
INSERT INTO pub VALUES ('apple pie'), ('plum jam');
CREATE TABLE Vault (VaultId INTEGER PRIMARY KEY AUTOINCREMENT, pin TEXT);
INSERT INTO Vault (pin) VALUES ('SECRET-PIN');
ANALYZE;
"""
# Each reads a hidden column through a virtual table, its storage or SQLite's own tables.
VIRTUAL_TABLE_ATTACKS = (
    "SELECT rowid FROM docs('secret:987*')",
    "SELECT count(*) FROM docs('secret : 987*')",
    "SELECT rowid FROM main.docs('{title secret}: 987*')",
    "SELECT rowid FROM \"DOCS\"('- title: 987*')",
    "SELECT rowid FROM docs WHERE docs MATCH 'secret:987*'",
    "SELECT rowid FROM docs WHERE docs MATCH 'NEAR(987654 codes)'",
    "SELECT rowid FROM docs WHERE docs = 'secret:987*'",
    "SELECT rowid FROM docs WHERE title MATCH 'hello'",
    "SELECT title FROM docs",
    "SELECT highlight(docs, 1, '', '') FROM docs WHERE docs MATCH 'hello'",
    "SELECT snippet(docs, -1, '', '', '', 8) FROM docs WHERE docs MATCH 'hello'",
    "SELECT title FROM docs WHERE title MATCH 'hello' ORDER BY rank",
    "WITH x AS (SELECT rowid AS r FROM docs('secret:9*')) SELECT count(*) FROM x",
    "SELECT (SELECT count(*) FROM docs('secret:9*'))",
    "SELECT term FROM docs_v",
    "SELECT c1 FROM docs_content",
    "SELECT block FROM docs_data",
    "SELECT title FROM d4 WHERE title MATCH 'secret:987*'",
    "SELECT offsets(d4) FROM d4 WHERE d4 MATCH 'hello'",
    "SELECT term FROM d4_terms",
    "SELECT * FROM d4_content",
    "SELECT Email FROM cust_fts",
    "SELECT highlight(cust_fts, 1, '', '') FROM cust_fts WHERE cust_fts MATCH 'Ann'",
    "SELECT rowid FROM cust_fts('Email:aSECRET*')",
    "SELECT * FROM geo",
    "SELECT * FROM geo_rowid",
    "SELECT * FROM sqlite_sequence",
    "SELECT name, seq FROM main.sqlite_sequence",
    'SELECT * FROM "SQLITE_SEQUENCE"',
    "SELECT * FROM sqlite_stat1",
    "SELECT sql FROM sqlite_stmt",
    "SELECT name FROM dbstat",
    "SELECT * FROM temp.sqlite_master",
    "SELECT * FROM pragma_index_info('CustomerEmail')",
    "SELECT * FROM pragma_index_xinfo('CustomerDomain')",
    "PRAGMA index_list(Customer)",
    "PRAGMA main.index_info(CustomerEmail)",
    "EXPLAIN QUERY PLAN SELECT CustomerId FROM Customer",
    "explain query plan select FirstName from Customer where FirstName > ''",
    "/* plan */ EXPLAIN SELECT CustomerId FROM Customer",
    "  EXPLAIN\nSELECT 1",
    "SELECT FirstName FROM Customer INDEXED BY CustomerEmail",
    'SELECT FirstName FROM Customer INDEXED BY "customerdomain"',
    "SELECT FirstName FROM Customer INDEXED/**/BY sqlite_autoindex_Customer_1",
    "SELECT x.FirstName FROM (SELECT FirstName FROM main.Customer INDEXED BY CustomerEmail) AS x",
)


@pytest.fixture(scope="module")
def leak_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create_database(tmp_path_factory.mktemp("leaks") / "shop.sqlite", SCHEMA_SQL)


@pytest.fixture(scope="module")
def leak_db(leak_path: Path, engine: WorkerPool) -> Database:
    return Database(leak_path, engine, hide=HideRules.parse(RULES))


def assert_no_secret(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"leaked {leaked} in {text!r}"


@pytest.mark.parametrize("sql", VIRTUAL_TABLE_ATTACKS)
def test_virtual_tables_sqlite_tables_explain_and_indexes_do_not_leak(leak_db: Database, sql: str) -> None:
    """Each read fails without rows, and neither its text nor run_query's names a hidden thing."""
    result = leak_db.query(sql, max_rows=10)
    assert (result.ok, result.rows) == (False, ()), (sql, result)
    text = run_tool(leak_db, "run_query", {"sql": sql}).text
    assert_no_secret(text)
    for name in ("CustomerEmail", "CustomerDomain", "autoindex", "secret", "owner"):
        assert name.casefold() not in text.casefold() or name.casefold() in sql.casefold(), text


def test_visible_virtual_tables_and_indexes_still_work(leak_db: Database) -> None:
    """A full-text table without hidden columns answers MATCH and its table-valued form; NOT
    INDEXED and INDEXED BY a visible index run."""
    for sql, rows in {
        "SELECT body FROM pub WHERE pub MATCH 'apple'": [("apple pie",)],
        "SELECT body FROM pub('plum')": [("plum jam",)],
        "SELECT FirstName FROM Customer NOT INDEXED ORDER BY CustomerId": [("Zoe",), ("Ann",), ("Max",)],
        "SELECT FirstName FROM Customer INDEXED BY CustomerName WHERE FirstName > 'B'": [("Max",), ("Zoe",)],
    }.items():
        result = leak_db.query(sql, max_rows=10)
        assert (result.status, list(result.rows)) == (QueryStatus.OK, rows), (sql, result.error)


def test_virtual_tables_and_their_storage_are_hidden_whole(leak_db: Database) -> None:
    """A virtual table with a hidden column goes whole, with its shadow tables and the tables
    built over it; the report says so; indexes over hidden columns are reported."""
    schema = leak_db.schema()
    assert schema.names == (
        "Customer",
        "pub",
        "pub_config",
        "pub_content",
        "pub_data",
        "pub_docsize",
        "pub_idx",
    )
    assert schema.hiding is not None and all(names for _, names in schema.hiding.matches)
    assert sorted(schema.hiding.derived) == sorted(
        [
            "cust_fts",
            "cust_fts_config",
            "cust_fts_data",
            "cust_fts_docsize",
            "cust_fts_idx",
            "d4",
            "d4_content",
            "d4_docsize",
            "d4_segdir",
            "d4_segments",
            "d4_stat",
            "d4_terms",
            "docs",
            "docs_config",
            "docs_content",
            "docs_data",
            "docs_docsize",
            "docs_idx",
            "docs_v",
            "geo",
            "geo_node",
            "geo_parent",
            "geo_rowid",
        ]
    )
    assert schema.hiding.indexes == ("CustomerDomain", "CustomerEmail", "sqlite_autoindex_Customer_1")


def test_a_hidden_name_answers_like_a_missing_one(tmp_path: Path, engine: WorkerPool) -> None:
    """run_query on a database with rules says, word for word, what it says on the same database
    without the hidden things: SQLite's `no such table/column/index`, with the same hints."""
    visible = (
        "CREATE TABLE Customer (CustomerId INTEGER PRIMARY KEY, FirstName TEXT, Mail TEXT);"
        "CREATE TABLE Track (TrackId INTEGER PRIMARY KEY, Name TEXT);"
        "CREATE INDEX CustomerName ON Customer (FirstName);"
    )
    hidden = (
        "CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY, CustomerId INTEGER);"
        "ALTER TABLE Customer ADD COLUMN Email TEXT;"
        "CREATE INDEX CustomerEmail ON Customer (Email);"
        "CREATE VIEW Spend AS SELECT CustomerId, count(*) AS n FROM Invoice GROUP BY 1;"
        "CREATE VIEW Spend2 AS SELECT * FROM Spend;"
    )
    plain = Database.unruled(create_database(tmp_path / "plain.db", visible), engine)
    ruled = Database(
        create_database(tmp_path / "ruled.db", visible + hidden),
        engine,
        hide=HideRules.parse(["Customer.Email", "Invoice"]),
    )
    probes = (
        "SELECT Email FROM Customer",
        "SELECT c.email FROM Customer AS c",
        'SELECT "customer"."EMAIL" FROM main.Customer',
        "SELECT FirstName FROM Customer ORDER BY Email",
        "SELECT count(*) FROM Invoice",
        "SELECT * FROM main.Invoice",
        'SELECT * FROM "invoice"',
        "SELECT i.InvoiceId FROM Invoice i JOIN Customer c ON c.CustomerId = i.CustomerId",
        "WITH x AS (SELECT Email FROM Customer) SELECT * FROM x",
        "SELECT * FROM Spend",
        "SELECT n FROM Spend2",
        "SELECT 1 FROM Invoice JOIN Track USING (TrackId)",
        "SELECT FirstName FROM Customer INDEXED BY CustomerEmail",
        "SELECT Invoice.InvoiceId FROM Customer",
    )
    for sql in probes:
        expected = run_tool(plain, "run_query", {"sql": sql}).text
        assert expected.startswith(("Error: no such", "SQL error: no such")), (sql, expected)
        assert run_tool(ruled, "run_query", {"sql": sql}).text == expected, sql
    assert [t.name for t in ruled.schema().tables] == [t.name for t in plain.schema().tables]


def test_rules_apply_past_the_schema_size_cap(tmp_path: Path) -> None:
    """A table or column past schema_chars stays hidden, and no rule is reported as matching nothing."""
    filler = "".join(f"CREATE TABLE t{i:03} (a_long_column_name_{i} TEXT);" for i in range(60))
    path = create_database(
        tmp_path / "big.db",
        filler
        + (
            "CREATE TABLE Zsecret (pin TEXT); INSERT INTO Zsecret VALUES ('SECRET-PIN');"
            "CREATE TABLE Zwide (id INTEGER PRIMARY KEY, Email TEXT);"
            "INSERT INTO Zwide VALUES (1, 'SECRET-MAIL');"
            "CREATE VIEW Zview AS SELECT Email FROM Zwide;"
        ),
    )
    engine = WorkerPool(WorkerLimits(workers=1, schema_chars=400))
    try:
        db = Database(path, engine, hide=HideRules.parse(["Zsecret", "Zwide.Email"]))
        schema = db.schema()
        assert "Zsecret" not in schema.names and schema.warnings  # past the cap, as intended
        assert schema.hiding is not None and dict(schema.hiding.matches) == {
            "Zsecret": ("Zsecret",),
            "Zwide.Email": ("Zwide.Email",),
        }
        assert schema.hiding.derived == ("Zview",)
        for sql in (
            "SELECT * FROM Zsecret",
            "SELECT Email FROM Zwide",
            "SELECT * FROM Zview",
            "SELECT * FROM Zwide",
        ):
            result = db.query(sql, max_rows=5)
            assert (result.ok, result.rows) == (False, ()), (sql, result)
        assert db.query("SELECT id FROM Zwide", max_rows=5).rows == ((1,),)
    finally:
        engine.close()


def test_rules_name_views_and_names_with_spaces(tmp_path: Path, engine: WorkerPool) -> None:
    """A rule naming a view hides it; one naming a view's column hides the view whole; a table
    built over a hidden one is found however its definition quotes the name."""
    path = create_database(
        tmp_path / "views.db",
        """
        CREATE TABLE Staff (id INTEGER PRIMARY KEY, name TEXT, pay INT);
        INSERT INTO Staff VALUES (1, 'Ann', 987654);
        CREATE VIEW Payroll AS SELECT name, pay * 12 AS yearly FROM Staff;
        CREATE VIEW Names AS SELECT id, name FROM Staff;
        CREATE VIEW Stats AS SELECT * FROM dbstat;
        CREATE VIRTUAL TABLE "my notes" USING fts5(body, pin);
        INSERT INTO "my notes" VALUES ('hello', 'SECRET-PIN');
        CREATE VIRTUAL TABLE terms USING fts5vocab('my notes', 'instance');
    """,
    )
    db = Database(path, engine, hide=HideRules.parse(["Payroll.yearly", "Names", "my notes.pin"]))
    schema = db.schema()
    assert schema.names == ("Staff", "Stats")  # a view over dbstat is listed, but never reads it
    assert schema.hiding is not None and dict(schema.hiding.matches) == {
        "Payroll.yearly": ("Payroll.yearly",),
        "Names": ("Names",),
        "my notes.pin": ("my notes.pin",),
    }
    for sql in (
        "SELECT * FROM Payroll",
        "SELECT name FROM Names",
        "SELECT term FROM terms",
        'SELECT * FROM "my notes"',
        "SELECT * FROM Stats",
    ):
        result = db.query(sql, max_rows=5)
        assert (result.ok, result.rows) == (False, ()), (sql, result)
    assert db.query("SELECT pay FROM Staff", max_rows=5).rows == ((987654,),)  # not a rule's


def test_a_table_sqlite_cannot_describe_is_hidden_when_a_rule_may_name_its_columns(
    tmp_path: Path, engine: WorkerPool
) -> None:
    """A virtual table whose module this SQLite lacks has no column list to match a rule
    against: a rule whose table part matches it hides it whole, and says so."""
    path = create_database(
        tmp_path / "module.db",
        """
        CREATE VIRTUAL TABLE Lost USING fts5(pin); CREATE VIRTUAL TABLE Kept USING fts5(body);
        CREATE TABLE Other (x);
        PRAGMA writable_schema = ON;
        UPDATE sqlite_master SET sql = replace(sql, 'fts5', 'nosuchmodule')
          WHERE name IN ('Lost', 'Kept');
    """,
    )
    db = Database(path, engine, hide=HideRules.parse(["Lost.pin", "Other"]))
    schema = db.schema()
    assert "Lost" not in schema.names and "Kept" in schema.names
    assert schema.hiding is not None and dict(schema.hiding.matches) == {
        "Lost.pin": ("Lost",),
        "Other": ("Other",),
    }


def test_sqlite_offset_is_refused_under_rules() -> None:
    """sqlite_offset() (in builds with OFFSET_SQL_FUNC) would show a hidden column's size as the
    gap between its neighbours' offsets: refused while rules apply, allowed without."""
    guard = StatementGuard(cancel_flag=None)
    guard.reset(float("inf"), Withheld(columns=frozenset({("t", "secret")})), "SELECT 1")
    assert guard.authorize(sqlite3.SQLITE_FUNCTION, None, "sqlite_offset", None, None) == sqlite3.SQLITE_DENY
    assert guard.denied == "function sqlite_offset() is not available on this database"
    guard.reset(float("inf"))
    assert guard.authorize(sqlite3.SQLITE_FUNCTION, None, "sqlite_offset", None, None) == sqlite3.SQLITE_OK


def _sqlite_modules() -> set[str]:
    """The virtual-table modules this Python's SQLite has (its connection closed: 3.13 warns)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        return {row[0] for row in conn.execute("PRAGMA module_list")}


@pytest.mark.skipif(
    "sqlite_stmt" not in _sqlite_modules(), reason="this SQLite is built without sqlite_stmt (ENABLE_STMTVTAB)"
)
def test_two_rule_sets_on_one_file_never_share_a_connection(leak_path: Path) -> None:
    """What one rule set's statements leave on a connection (FTS5's prepared statements) is not
    visible to another: each (file, rules) pair has its own connection in the worker."""
    engine = WorkerPool(WorkerLimits(workers=1))
    try:
        full = Database.unruled(leak_path, engine)
        redacted = Database(leak_path, engine, hide=HideRules.parse(["Customer.Email"]))
        assert redacted.query("SELECT body FROM pub WHERE pub MATCH 'apple'", max_rows=5).ok
        seen = full.query("SELECT sql FROM sqlite_stmt WHERE sql LIKE '%pub%'", max_rows=50)
        assert seen.ok and seen.rows == (("SELECT sql FROM sqlite_stmt WHERE sql LIKE '%pub%'",),)
        assert redacted.query("SELECT sql FROM sqlite_stmt", max_rows=5).status is QueryStatus.HIDDEN
    finally:
        engine.close()


class SwitchPolicy:
    """The policy of the current call: one server answers two aliases with different scripts."""

    def __init__(self) -> None:
        self.current: ScriptPolicy | None = None

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        assert self.current is not None
        return self.current.reply(prompt, model)


def scripted(*sqls: str, submit: str) -> ScriptPolicy:
    calls = [tool_call("run_query", sql=sql) for sql in sqls]
    answer = assistant_reply("answer", tool_call("submit_sql", sql=submit))
    return ScriptPolicy([assistant_reply("look", *calls), answer], final=answer)


@pytest.mark.anyio
async def test_a_redacted_alias_never_reads_through_the_full_alias_on_one_file(
    tmp_path: Path, leak_path: Path
) -> None:
    """Two aliases on one file: after the full one ran full-text queries, the redacted one still
    cannot read the hidden column (through the FTS table, its statements or sqlite_stmt)."""
    log = tmp_path / "episodes.jsonl"
    policy = SwitchPolicy()
    server = build(
        tmp_path,
        [
            "--db",
            f"full={leak_path}",
            "--db",
            f"redacted={leak_path}",
            "--hide",
            "redacted=Customer.Email",
            "--episode-log",
            str(log),
        ],
        PolicyBackend(policy),
    )
    async with Client(server) as client:
        policy.current = scripted(
            "SELECT FirstName, Email FROM cust_fts WHERE cust_fts MATCH 'Ann'",
            "SELECT highlight(cust_fts, 1, '', '') FROM cust_fts WHERE cust_fts MATCH 'Ann'",
            submit="SELECT Email FROM cust_fts WHERE cust_fts MATCH 'Zoe'",
        )
        full = await client.call_tool(TOOL, {"question": "Mails?", "database": "full"})
        assert "aSECRET-MAIL" in json.dumps(full.structured_content)  # the full alias sees it
        policy.current = scripted(
            "SELECT Email FROM cust_fts WHERE cust_fts MATCH 'Ann'",
            "SELECT highlight(cust_fts, 1, '', '') FROM cust_fts WHERE cust_fts MATCH 'Ann'",
            "SELECT rowid FROM cust_fts('Email:aSECRET*')",
            "SELECT sql FROM sqlite_stmt",
            submit="SELECT FirstName, Email FROM cust_fts WHERE cust_fts MATCH 'Zoe'",
        )
        redacted = await client.call_tool(TOOL, {"question": "Mails?", "database": "redacted"})
    entry = json.loads(log.read_text().splitlines()[1])
    everything = json.dumps([redacted.structured_content, redacted.content[0].text, entry])
    assert [s for s in SECRETS if s in everything] == []
    assert redacted.structured_content["status"] == "failed"


@pytest.fixture(scope="module")
def engine() -> Iterator[WorkerPool]:
    """One worker, so the module's databases share one process (and could share connections)."""
    pool = WorkerPool(WorkerLimits(workers=1))
    yield pool
    pool.close()

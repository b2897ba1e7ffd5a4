"""Hidden tables and columns: enforced by the worker's authorizer, absent from every schema fact."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

from agent.commands.ask import result_as_json
from agent.errors import ConfigError
from agent.loop import run_episode
from agent.sqlite import Database, HideRules, QueryStatus, create_database
from agent.sqlite._sql_names import _WORD as NAME
from agent.sqlite._sql_names import sql_names, unchecked_joins
from agent.sqlite.hiding import parse_hide_rule
from agent.tools import TOOL_NAMES, run_tool
from agent.tools.environment import Environment
from tests.support.hiding import ATTACKS, RULES, SCHEMA_SQL, SECRETS
from tests.support.policies import PolicyBackend, ScriptPolicy, assistant_reply, tool_call

ALLOWED = {
    "SELECT FirstName FROM Customer ORDER BY CustomerId": [("Ann",), ("Bo",)],
    "SELECT count(*) FROM Customer": [(2,)],
    "SELECT * FROM CustomerNames ORDER BY 1": [(1, "Ann"), (2, "Bo")],
    "SELECT c.FirstName, e.LastName FROM Customer c JOIN Employee e "
    "ON e.EmployeeId = c.SupportRepId ORDER BY 1": [("Ann", "Adams"), ("Bo", "Adams")],
    "SELECT count(*) FROM pragma_function_list WHERE name = 'abs'": [(1,)],
    "SELECT 'using' AS word": [("using",)],
}


MISSING = ("no such table: ", "no such column: ", "no such index: ")


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create_database(tmp_path_factory.mktemp("hiding") / "shop.sqlite", SCHEMA_SQL)


@pytest.fixture(scope="module")
def hidden_db(db_path: Path) -> Database:
    with Database(db_path, hide=HideRules.parse(RULES)) as db:
        yield db


def assert_no_secret(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"leaked {leaked} in {text!r}"


def test_rules_parse_and_match_case_insensitively() -> None:
    """TABLE or TABLE.COLUMN globs, any case; malformed rules are config errors."""
    rules = HideRules.parse(["Customer.Email", "*.pass*", "INVOICE", "invoice"])
    assert rules.texts == ("Customer.Email", "*.pass*", "INVOICE")
    assert [
        rules.hides_column("customer", "EMAIL"),
        rules.hides_column("Emp", "PasswordHash"),
        rules.hides_table("Invoice"),
        rules.hides_table("Customer"),
        rules.hides_column("Customer", "FirstName"),
    ] == [True, True, True, False, False]
    for bad in ("", ".Email", "Customer.", "  "):
        with pytest.raises(ConfigError, match=r"is not a rule; write TABLE or TABLE\.COLUMN"):
            parse_hide_rule(bad)


def test_sql_scanning_skips_literals_and_comments() -> None:
    """USING/NATURAL count only as keywords; quoted identifiers are names; strings are not."""
    assert [
        bool(unchecked_joins(s))
        for s in (
            "SELECT 1 FROM a JOIN b USING (x)",
            "SELECT 'using' FROM a",
            'SELECT "using" FROM a',
            "SELECT 1 -- using\nFROM a",
            "SELECT 1 FROM a natural join b",
        )
    ] == [True, False, False, False, True]
    assert sql_names('SELECT "E""x", [Br], `c` FROM t WHERE a = \'Email\'') == frozenset(
        {"select", 'e"x', "br", "c", "from", "t", "where", "a"}
    )


def test_a_name_is_scanned_as_its_readable_class_says() -> None:
    """A name starts with a letter, _ or any non-ASCII character and goes on with those, digits
    and $: the scanner's fast-compiling pattern takes exactly these, for every code point."""
    readable = re.compile(r"[A-Za-z_\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*")
    every = [chr(code) for code in range(0x110000)]
    for written in (every, [f"a{c}" for c in every]):  # a name's first character, then the others
        assert [w for w in written if bool(NAME.fullmatch(w)) != bool(readable.fullmatch(w))] == []


def test_schema_facts_leave_hidden_things_out(hidden_db: Database) -> None:
    """Hidden tables, columns, derived views and generated columns are not in the schema."""
    schema = hidden_db.schema()
    assert schema.names == ("Customer", "CustomerNames", "Employee")
    columns = {t.name: [c.name for c in t.columns] for t in schema.tables}
    assert columns == {
        "Customer": ["CustomerId", "FirstName", "SupportRepId"],
        "CustomerNames": ["CustomerId", "FirstName"],
        "Employee": ["EmployeeId", "LastName"],
    }
    assert schema.incoming("Customer") == ()
    assert schema.hiding is not None and dict(schema.hiding.matches) == {
        "Customer.Email": ("Customer.Email",),
        "Invoice": ("Invoice",),
        "*.password*": ("Employee.PasswordHash",),
        "employee.BIRTHDATE": ("Employee.BirthDate",),
        "Nothing.here": (),
    }
    assert sorted(schema.hiding.derived) == [
        "Customer.MailDomain",
        "CustomerContacts",
        "InvoiceTotals",
        "NamesOfNames",
        "Spenders",
    ]


def test_without_rules_nothing_is_hidden(db_path: Path) -> None:
    """No rules: every table, view and column is there, and Email reads as before."""
    with Database.unruled(db_path) as db:
        assert len(db.schema().tables) == 8
        assert db.query("SELECT Email FROM Customer ORDER BY 1", max_rows=5).rows == (
            ("SECRET-MAIL-7f3a@b.org",),
            ("SECRET-MAIL-7f3a@example.com",),
        )


@pytest.mark.parametrize("sql", ATTACKS)
def test_every_read_of_hidden_data_is_refused(hidden_db: Database, sql: str) -> None:
    """Each attack fails as a refusal the model can read (or as SQLite's error for a missing
    name, when it names a hidden one), and no secret is in its text."""
    result = hidden_db.query(sql, max_rows=10)
    assert result.status is QueryStatus.HIDDEN or (
        result.status is QueryStatus.SQL_ERROR and (result.error or "").startswith(MISSING)
    ), (sql, result)
    assert result.rows == ()
    outcome = run_tool(hidden_db, "run_query", {"sql": sql})
    assert not outcome.ok
    assert_no_secret(outcome.text)


def test_allowed_reads_still_work(hidden_db: Database) -> None:
    """Visible tables, views and columns answer as usual, joins with ON included."""
    for sql, rows in ALLOWED.items():
        result = hidden_db.query(sql, max_rows=10)
        assert (result.status, list(result.rows)) == (QueryStatus.OK, rows), sql


def test_refusals_never_confirm_a_hidden_name(hidden_db: Database) -> None:
    """A hidden table, view or column fails as SQLite fails a missing one (with the same hints);
    SELECT * gets a hint to list columns; SQLite's own tables and USING joins say what to write."""
    texts = {
        sql: run_tool(hidden_db, "run_query", {"sql": sql}).text
        for sql in (
            "SELECT Email FROM Customer",
            "SELECT * FROM Customer",
            "SELECT * FROM CustomerContacts",
            "SELECT count(*) FROM Invoice",
            "SELECT sql FROM sqlite_master",
            "SELECT 1 FROM Customer JOIN Employee USING (EmployeeId)",
        )
    }
    assert texts == {
        "SELECT Email FROM Customer": "Error: no such column: Email\nhint: if Email is a text "
        "value, write it in single quotes: 'Email'",
        "SELECT * FROM Customer": "not available: Customer has columns hidden by the database's "
        "owner, so SELECT * cannot read it; name the columns you need "
        "(describe_table Customer lists them)",
        "SELECT * FROM CustomerContacts": "Error: no such table: CustomerContacts\nhint: did you "
        "mean CustomerNames or Customer?",
        "SELECT count(*) FROM Invoice": "Error: no such table: Invoice\nhint: the tables are: "
        "Customer, CustomerNames, Employee",
        "SELECT sql FROM sqlite_master": "not available: sqlite_master cannot be read on this "
        "database; use list_tables and describe_table to see "
        "the tables and columns you may use",
        "SELECT 1 FROM Customer JOIN Employee USING (EmployeeId)": (
            "not available: on this database joins must be written with ON, e.g. JOIN b ON "
            "b.id = a.b_id (not USING or NATURAL JOIN)"
        ),
    }
    assert "Email" not in texts["SELECT * FROM Customer"]


@pytest.mark.parametrize("environment", list(Environment))
@pytest.mark.parametrize(
    "tool,args",
    [
        ("list_tables", {}),
        ("list_tables", {"pattern": "Inv"}),
        ("describe_table", {"table_name": "Customer"}),
        ("describe_table", {"table_name": "Invoice"}),
        ("describe_table", {"table_name": "CustomerContacts"}),
        ("describe_table", {"table_name": "Employee"}),
        ("foreign_keys", {"table_name": "Customer"}),
        ("foreign_keys", {"table_name": "Employee"}),
        ("join_path", {"table_a": "Customer", "table_b": "Invoice"}),
        ("join_path", {"table_a": "Customer", "table_b": "Employee"}),
        ("sample_rows", {"table_name": "Customer"}),
        ("sample_rows", {"table_name": "Employee"}),
        ("sample_rows", {"table_name": "Invoice"}),
        ("sample_rows", {"table_name": "CustomerContacts"}),
        ("distinct_values", {"table_name": "Customer", "column_name": "Email"}),
        ("distinct_values", {"table_name": "Customer", "column_name": "FirstName"}),
        ("distinct_values", {"table_name": "Invoice", "column_name": "Note"}),
    ],
)
def test_no_tool_shows_a_hidden_name_or_value(
    hidden_db: Database, tool: str, args: dict[str, str], environment: Environment
) -> None:
    """In either environment's texts, no tool names a hidden table or column or shows its value."""
    assert tool in TOOL_NAMES
    text = run_tool(hidden_db, tool, args, environment=environment).text
    assert_no_secret(text)
    hidden_names = (
        "Email",
        "BirthDate",
        "PasswordHash",
        "Invoice",
        "MailDomain",
        "Contacts",
        "Spenders",
        "InvoiceTotals",
    )
    shown = [n for n in hidden_names if n in text and n not in str(args)]
    assert not shown, f"{tool}({args}) shows {shown}: {text!r}"


def test_sample_rows_of_a_table_with_hidden_columns_shows_the_rest(hidden_db: Database) -> None:
    """sample_rows selects the visible columns by name instead of SELECT * (both environments)."""
    rich = run_tool(hidden_db, "sample_rows", {"table_name": "Customer"}, environment=Environment.RICH)
    assert rich.text.splitlines()[1:3] == [
        "CustomerId | FirstName | SupportRepId",
        "-----------+-----------+-------------",
    ]
    trained = run_tool(hidden_db, "sample_rows", {"table_name": "Customer"})
    assert trained.ok and trained.text.splitlines()[0] == "CustomerId | FirstName | SupportRepId"


def test_trained_describe_table_never_shows_the_stored_statement(hidden_db: Database) -> None:
    """The trained describe_table (the CREATE statement) is rebuilt from the visible columns."""
    text = run_tool(hidden_db, "describe_table", {"table_name": "Customer"}).text
    assert text == (
        "CREATE TABLE Customer (CustomerId INTEGER PRIMARY KEY, FirstName TEXT, "
        "SupportRepId INTEGER, FOREIGN KEY (SupportRepId) REFERENCES "
        "Employee(EmployeeId))"
    )


def test_an_episode_never_sees_or_returns_hidden_values(hidden_db: Database) -> None:
    """A model that tries the attacks then submits SELECT * gets no hidden value anywhere."""
    calls = [tool_call("run_query", sql=sql) for sql in ATTACKS[:12]]
    turns = [assistant_reply("look", *calls[i : i + 3]) for i in range(0, 12, 3)]
    turns.append(assistant_reply("answer", tool_call("submit_sql", sql="SELECT * FROM Customer")))
    policy = ScriptPolicy(
        turns, final=assistant_reply("final", tool_call("submit_sql", sql="SELECT * FROM CustomerContacts"))
    )

    async def play() -> object:
        return await run_episode("Who are the customers?", hidden_db, PolicyBackend(policy))

    result = anyio.run(play)
    assert_no_secret(result.prompt)
    assert_no_secret(str(result_as_json(result)))
    assert (result.sql, result.rows) == (None, ()) or "Email" not in result.columns


def test_a_table_with_every_column_hidden_is_hidden_whole(db_path: Path) -> None:
    """`Employee.*` leaves nothing of Employee: the table goes, and reading it is refused."""
    with Database(db_path, hide=HideRules.parse(["Employee.*"])) as db:
        schema = db.schema()
        assert "Employee" not in schema.names
        assert schema.hiding is not None and "Employee" in schema.hiding.derived
        assert db.query("SELECT count(*) FROM Employee", max_rows=1).error == "no such table: Employee"
        assert run_tool(db, "sample_rows", {"table_name": "Employee"}).text.startswith("no table")

"""A hidden key that orders a table's own rows (its INTEGER PRIMARY KEY, a WITHOUT ROWID table's
primary key) is reported, and the start-up log and `doctor` warn about it (issue 31, §5)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agent.commands.cli import main
from agent.sqlite import Database, HideRules, WorkerLimits, create_database, hiding_findings
from mcp_server.config.catalog import load_catalog
from mcp_server.config.settings_parts import DatabaseSpec
from tests.support.policies import OraclePolicy

SCHEMA = """
CREATE TABLE Staff (id INTEGER PRIMARY KEY, name TEXT);
INSERT INTO Staff VALUES (30, 'Ann'), (10, 'Bo'), (20, 'Cy');
CREATE TABLE Badge (code INTEGER, holder TEXT, PRIMARY KEY (code));
CREATE TABLE Shift (day TEXT, slot INTEGER, who TEXT, PRIMARY KEY (day, slot)) WITHOUT ROWID;
CREATE TABLE Token (secret TEXT PRIMARY KEY, owner TEXT) WITHOUT ROWID;
CREATE TABLE Plain (ref INT PRIMARY KEY, note TEXT);
CREATE TABLE Backwards (n INTEGER PRIMARY KEY DESC, note TEXT);
CREATE TABLE Gone (id INTEGER PRIMARY KEY, x TEXT);
CREATE TABLE Keyless (a TEXT, b TEXT);
"""
RULES = [
    "Staff.id",
    "badge.CODE",
    "Shift.slot",
    "Token.secret",
    "Plain.ref",
    "Backwards.n",
    "Gone",
    "Keyless.a",
]
WARNING = (
    "hidden keys that order their tables' rows: Badge.code, Shift.slot, Staff.id, Token.secret "
    "(an INTEGER PRIMARY KEY, or a WITHOUT ROWID table's primary key); a query without ORDER BY "
    "returns those tables' rows in the order of the hidden values (and LIMIT picks by them): "
    "serve a copy that stores the rows in another order, or without that key, if that order "
    "is secret too"
)


@pytest.fixture
def keyed(tmp_path: Path) -> Path:
    return create_database(tmp_path / "keys.db", SCHEMA)


def test_hidden_row_order_keys_are_reported(keyed: Path) -> None:
    """The rowid alias (inline or as a table constraint) and any column of a WITHOUT ROWID key are
    hidden keys; a hidden INT or DESC primary key is an index over a hidden column instead, and a
    hidden table is neither."""
    with Database(keyed, hide=HideRules.parse(RULES)) as db:
        report = db.schema().hiding
        assert db.query("SELECT name FROM Staff LIMIT 1", max_rows=1).rows == (("Bo",),)  # id 10 first
    assert report is not None
    assert report.keys == ("Badge.code", "Shift.slot", "Staff.id", "Token.secret")
    assert report.indexes == ("sqlite_autoindex_Backwards_1", "sqlite_autoindex_Plain_1")
    assert [text for warning, text in hiding_findings(report) if warning][-1] == WARNING


def test_no_hidden_key_no_warning(keyed: Path) -> None:
    """Hiding other columns of the same tables reports no key."""
    with Database(keyed, hide=HideRules.parse(["Staff.name", "Shift.who", "Token.owner"])) as db:
        report = db.schema().hiding
    assert report is not None and report.keys == ()
    assert not any("hidden keys" in text for _, text in hiding_findings(report))


def test_the_start_up_log_warns_about_hidden_keys(keyed: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The server logs the warning for its database at start."""
    with caplog.at_level("INFO", logger="mcp_server"):
        load_catalog([DatabaseSpec(alias="k", path=keyed)], WorkerLimits(), {"k": HideRules.parse(RULES)})
    assert f"database 'k': {WARNING}" in [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_doctor_warns_about_hidden_keys(fake_ollama, tmp_path: Path, capsys) -> None:
    """doctor --hide prints the same warning."""
    db = tmp_path / "t.sqlite"
    sqlite3.connect(db).executescript(  # the connection closed, not only the cursor (3.13 warns)
        "CREATE TABLE Staff (id INTEGER PRIMARY KEY, name TEXT);"
    ).connection.close()
    server = fake_ollama(OraclePolicy({}))
    assert main(["doctor", "--ollama-host", server.url, "--db", str(db), "--hide", "Staff.id"]) == 0
    assert (
        "[warn] hidden keys that order their tables' rows: Staff.id (an INTEGER PRIMARY KEY, or a "
        "WITHOUT ROWID table's primary key)"
    ) in capsys.readouterr().out

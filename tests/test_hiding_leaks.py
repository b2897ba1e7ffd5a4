"""Hiding holds where SQLite itself looks past the authorizer."""

from __future__ import annotations

from pathlib import Path

from agent.sqlite import Database, EngineLimits, HideRules, QueryEngine, create_database

SCHEMA_SQL = """
CREATE TABLE Customer (CustomerId INTEGER PRIMARY KEY, FirstName TEXT, Email TEXT UNIQUE);
CREATE VIRTUAL TABLE pub USING fts5(body);
INSERT INTO pub VALUES ('apple pie'), ('plum jam');
"""


def test_two_rule_sets_on_one_file_never_share_a_connection(tmp_path: Path) -> None:
    """What one rule set's statements leave on a connection (FTS5's prepared statements) is not
    visible to another: each (file, rules) pair has its own connection in the worker."""
    leak_path = create_database(tmp_path / "shop.sqlite", SCHEMA_SQL)
    engine = QueryEngine(EngineLimits(workers=1))
    try:
        full = Database(leak_path, engine)
        redacted = Database(leak_path, engine, hide=HideRules.parse(["Customer.Email"]))
        assert redacted.query("SELECT body FROM pub WHERE pub MATCH 'apple'", max_rows=5).ok
        seen = full.query("SELECT sql FROM sqlite_stmt WHERE sql LIKE '%pub%'", max_rows=50)
        assert seen.ok and seen.rows == (("SELECT sql FROM sqlite_stmt WHERE sql LIKE '%pub%'",),)
    finally:
        engine.close()

"""Nearest-name suggestions and hints for SQLite error messages."""

from __future__ import annotations

from agent.sqlite.types import Column, Schema, Table
from agent.tools._hints import (
    find_column,
    nearest_names,
    sql_error_hint,
    unknown_column_text,
    unknown_table_text,
)


def cols(*names: str) -> tuple[Column, ...]:
    return tuple(Column(n, "TEXT", False, None, 0) for n in names)


SCHEMA = Schema(
    (
        Table("Album", "table", cols("AlbumId", "Title", "ArtistId"), ()),
        Table("Artist", "table", cols("ArtistId", "Name"), ()),
        Table("Order Details", "table", cols("OrderID", "Quantity"), ()),
        Table("STRASSE", "table", cols("id"), ()),
        Table("Straße", "table", cols("id"), ()),
        Table("Track", "table", cols("TrackId", "Name", "AlbumId"), ()),
    )
)


def test_nearest_names_case_insensitive_and_substrings() -> None:
    """Matching ignores case, finds a name inside a longer one, and ignores short substrings."""
    assert nearest_names("trak", SCHEMA.names) == ("Track",)
    assert nearest_names("ORDER", SCHEMA.names) == ("Order Details",)
    assert nearest_names("id", ["TrackId", "AlbumId"]) == ()
    assert nearest_names("", SCHEMA.names) == ()


def test_unknown_table_text_variants() -> None:
    """Unknown tables get the nearest names, a full list, or a pointer to list_tables."""
    assert unknown_table_text("trak", SCHEMA) == "no table 'trak'; did you mean Track?"
    assert unknown_table_text("order detail", SCHEMA) == (
        "no table 'order detail'; did you mean \"Order Details\"?"
    )
    assert unknown_table_text("zzz", SCHEMA) == (
        'no table \'zzz\'; the tables are: Album, Artist, "Order Details", STRASSE, "Straße", Track'
    )
    assert unknown_table_text("strasse", SCHEMA) == (
        "no table 'strasse'; several tables differ from it only in case: STRASSE or \"Straße\"; "
        "write the exact name"
    )
    many = Schema(tuple(Table(f"t{i:03d}", "table", cols("id"), ()) for i in range(40)))
    assert unknown_table_text("zzz", many) == "no table 'zzz'; call list_tables to see the table names"
    assert unknown_table_text("x", Schema(())) == "no table 'x'; the database has no tables"


def test_unknown_column_text_variants() -> None:
    """Unknown columns get the nearest columns of the table, else its column list."""
    track = SCHEMA.find("Track")
    assert track is not None
    assert unknown_column_text("nme", track) == "no column 'nme' in Track; did you mean Name?"
    assert unknown_column_text("zzz", track) == (
        "no column 'zzz' in Track; its columns are: TrackId, Name, AlbumId"
    )


def test_find_column_exact_then_case_insensitive() -> None:
    """find_column returns the real column name, matching case-insensitively when unique."""
    track = SCHEMA.find("Track")
    assert track is not None
    assert [find_column(track, n) for n in ("Name", "name", "NAME", "nope")] == ["Name", "Name", "Name", None]


def test_sql_error_hints() -> None:
    """Each SQLite error kind gets its pinned hint, names quoted where needed."""
    cases = {
        "no such table: Trak": "did you mean Track?",
        "no such table: main.Artst": "did you mean Artist?",
        "no such table: zzz": ('the tables are: Album, Artist, "Order Details", STRASSE, "Straße", Track'),
        "no such column: Nme": "did you mean Artist.Name or Track.Name?",
        "no such column: Track.Nme": "did you mean Track.Name?",
        "no such column: Track.zzz": "Track has the columns: TrackId, Name, AlbumId",
        "no such column: Quantity": (
            'Quantity is a column of "Order Details", not of the tables in '
            "FROM; JOIN the table that has it or fix the qualifier"
        ),
        "no such column: t.Title": (
            "Title is a column of Album, not of the table or alias before the "
            "dot; JOIN the table that has it or fix the qualifier"
        ),
        "no such column: USA": "if USA is a text value, write it in single quotes: 'USA'",
        "ambiguous column name: AlbumId": (
            "several tables in the query have this column; write it with its table, e.g. Album.AlbumId"
        ),
        "no such function: YEAR": "SQLite has no YEAR(); use strftime('%Y', col) (text; "
        "CAST(... AS INTEGER) for a number)",
        "no such function: frobnicate": "SQLite has no function frobnicate(); use SQLite's built-in functions",
        'near "FORM": syntax error': "did you mean FROM?",
        'near "Details": syntax error': (
            'names with spaces, symbols or SQL keywords need double quotes, e.g. "Order Details"'
        ),
        'near "WHERE": syntax error': 'check the SQL just before "WHERE"',
        "incomplete input": "the statement ends too early; finish it",
        "only one statement per call is allowed": (
            "send a single SELECT statement without a second statement after ';'"
        ),
    }
    assert {error: sql_error_hint(error, SCHEMA) for error in cases} == cases
    assert sql_error_hint("datatype mismatch", SCHEMA) is None

"""`sqale-agent tool`: prints what the model would see; exit codes for the user's own mistakes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.commands.cli import main
from agent.sqlite import create_database

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def music(tmp_path: Path) -> Path:
    """A two-table database with a foreign key and a name that needs quoting."""
    return create_database(
        tmp_path / "music.sqlite",
        """
        CREATE TABLE Artist (ArtistId INTEGER PRIMARY KEY, Name TEXT NOT NULL);
        CREATE TABLE "Album List" (AlbumId INTEGER PRIMARY KEY, Title TEXT,
                                   ArtistId INTEGER REFERENCES Artist(ArtistId));
        INSERT INTO Artist VALUES (1, 'AC/DC'), (2, 'Accept');
        INSERT INTO "Album List" VALUES (1, 'Let There Be Rock', 1);
    """,
    )


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_prints_the_tool_text(music: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The result text (the trained environment's by default) is printed exactly, with exit 0."""
    assert run(["tool", "--db", str(music), "describe_table", '{"table_name": "album list"}'], capsys) == (
        0,
        'CREATE TABLE "Album List" (AlbumId INTEGER PRIMARY KEY, Title TEXT, '
        "ArtistId INTEGER REFERENCES Artist(ArtistId))\n",
        "",
    )


def test_prints_the_rich_text_when_asked(music: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--environment rich prints our richer format instead."""
    argv = [
        "tool",
        "--db",
        str(music),
        "--environment",
        "rich",
        "describe_table",
        '{"table_name": "album list"}',
    ]
    assert run(argv, capsys) == (
        0,
        'table "Album List": 1 row, 3 columns\nAlbumId   INTEGER  PK\nTitle     TEXT\n'
        "ArtistId  INTEGER  -> Artist.ArtistId\n",
        "",
    )


def test_args_default_to_an_empty_object(music: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without ARGS the tool gets {}."""
    assert run(["tool", "--db", str(music), "list_tables"], capsys) == (
        0,
        '"Album List", Artist (2 tables)\n',
        "",
    )
    assert run(["tool", "--db", str(music), "--environment", "rich", "list_tables"], capsys) == (
        0,
        '2 tables:\n"Album List"\nArtist\n',
        "",
    )


@pytest.mark.parametrize(
    ("tool", "args", "text"),
    [
        ("describe_table", '{"table_name": "artsit"}', "no table 'artsit'; did you mean Artist?"),
        (
            "run_query",
            '{"sql": "SELECT Nme FROM Artist"}',
            "Error: no such column: Nme\nhint: did you mean Artist.Name?",
        ),
        (
            "describe_table",
            "{}",
            'describe_table needs "table_name" (a string); call it as '
            '{"tool": "describe_table", "args": {"table_name": "<table>"}}',
        ),
    ],
)
def test_model_error_texts_exit_zero(
    music: Path, capsys: pytest.CaptureFixture[str], tool: str, args: str, text: str
) -> None:
    """Errors the model could make print as the model would see them, with exit 0."""
    assert run(["tool", "--db", str(music), tool, args], capsys) == (0, text + "\n", "")


def test_unknown_tool_is_a_usage_error(music: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tool that does not exist: one stderr line naming the nearest and every tool, exit 2."""
    assert run(["tool", "--db", str(music), "frobnicate"], capsys) == (
        2,
        "",
        "sqale-agent tool: unknown tool 'frobnicate'; the tools are: list_tables, describe_table, "
        "foreign_keys, join_path, sample_rows, distinct_values, run_query and submit_sql\n",
    )
    misspelt = run(["tool", "--db", str(music), "describe_tabel", '{"table_name": "Artist"}'], capsys)
    assert misspelt[:2] == (2, "") and "did you mean describe_table?" in misspelt[2]


def test_alias_equals_path_gets_the_plain_path_hint(music: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--db music=PATH` (the server's form): one line saying tool takes a plain path, exit 1."""
    assert run(["tool", "--db", f"music={music}", "list_tables"], capsys) == (
        1,
        "",
        f"sqale-agent tool: --db 'music={music}': `sqale-agent tool` takes a plain path (--db {music}); "
        "ALIAS=PATH is how sqale-mcp names its databases\n",
    )


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            "{table_name: Artist}",
            "ARGS is not valid JSON (Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1))",
        ),
        ('["Artist"]', "ARGS must be a JSON object, not list"),
    ],
)
def test_bad_json_is_a_usage_error(
    music: Path, capsys: pytest.CaptureFixture[str], args: str, reason: str
) -> None:
    """ARGS that are not a JSON object: one line on stderr, nothing on stdout, exit 2."""
    assert run(["tool", "--db", str(music), "describe_table", args], capsys) == (
        2,
        "",
        f'sqale-agent tool: {reason}; give an object such as \'{{"table_name": "Track"}}\'\n',
    )


def test_bad_database_path_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file or a file that is not SQLite: the path error on one stderr line, exit 1."""
    missing = tmp_path / "nope.sqlite"
    assert run(["tool", "--db", str(missing), "list_tables"], capsys) == (
        1,
        "",
        f"sqale-agent tool: {missing}: no such file; check the path\n",
    )
    text_file = tmp_path / "notes.txt"
    text_file.write_text("hello")
    assert run(["tool", "--db", str(text_file), "list_tables"], capsys) == (
        1,
        "",
        f"sqale-agent tool: {text_file}: not an SQLite 3 database (the file does not start "
        "with the SQLite header)\n",
    )


def test_missing_db_option_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --db (or --demo) argparse stops with status 2."""
    with pytest.raises(SystemExit) as stop:
        main(["tool", "list_tables"])
    assert stop.value.code == 2
    assert "one of the arguments --db --demo is required" in capsys.readouterr().err


def test_module_entry_point_in_a_subprocess(music: Path) -> None:
    """`python -m agent.commands.cli tool` prints the same text as an installed sqale-agent would."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.commands.cli",
            "tool",
            "--db",
            str(music),
            "join_path",
            '{"table_a": "Album List", "table_b": "Artist"}',
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        'FROM "Album List"\nJOIN "Artist" ON "Album List"."ArtistId" = "Artist"."ArtistId"\n',
        "",
    )


def test_hide_leaves_tables_and_columns_out(music: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--hide applies to the tool's database: hidden names are not listed, reads fail as missing."""
    hide = ["--hide", "album list", "--hide", "Artist.Name"]
    assert run(["tool", "--db", str(music), *hide, "list_tables"], capsys) == (0, "Artist (1 table)\n", "")
    code, out, _ = run(
        ["tool", "--db", str(music), *hide, "run_query", '{"sql": "SELECT Name FROM Artist"}'], capsys
    )
    assert (code, out) == (
        0,
        "Error: no such column: Name\nhint: if Name is a text value, write it in single quotes: 'Name'\n",
    )
    assert run(["tool", "--db", str(music), "--hide", "Artist.", "list_tables"], capsys) == (
        1,
        "",
        "sqale-agent tool: hide rule: 'Artist.' is not a rule; write TABLE or TABLE.COLUMN, "
        'e.g. "Customer.Email", "Invoice" or "*.password*"\n',
    )


@pytest.mark.parametrize(
    ("tool", "args", "code", "expect"),
    [
        ("run_query", '{"sql": "SELECT \'\\ud800\'"}', 0, 'run_query got "sql" with an invalid character'),
        (
            "describe_table",
            '{"table_name": "Artist\\ud800"}',
            0,
            'describe_table got "table_name" with an invalid character',
        ),
        (
            "sample_rows",
            '{"table_name": "Artist", "limit": ' + "9" * 4400 + "}",
            2,
            "sqale-agent tool: ARGS is not valid JSON (Exceeds the limit (4300 digits)",
        ),
        # 20,000 levels: Python 3.13's json parses 3,000 (it stops near 10,000; 3.11 and 3.12 stop
        # sooner), and one command-line argument may hold 128 KiB.
        (
            "run_query",
            '{"sql": ' + "[" * 20_000 + "]" * 20_000 + "}",
            2,
            "sqale-agent tool: ARGS is not valid JSON (nested too deeply)",
        ),
    ],
)
def test_hostile_arguments_never_give_a_traceback(
    music: Path, tool: str, args: str, code: int, expect: str
) -> None:
    """Lone surrogates, 4,400-digit numbers and deep nesting: a message, never a traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "agent.commands.cli", "tool", "--db", str(music), tool, args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    assert expect in (done.stdout if code == 0 else done.stderr)
    assert "Traceback" not in done.stderr

"""--db-dir serves the regular files directly in its folder: a symlink out of the folder is
refused unless --db-dir-outside-links allows it, and every entry named like a database that is
not served is skipped with a warning saying why (issue 31, §5)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.sqlite import WorkerLimits
from mcp_server.config.catalog import collect_databases, load_catalog, scan_db_dir
from mcp_server.config.command_line import parse_settings
from tests.support.server_settings import make_db


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A --db-dir folder with one good file, a link to it, and an outside database."""
    inside = tmp_path / "dbs"
    make_db(inside / "good.db")
    (inside / "current.db").symlink_to("good.db")  # a link that stays in the folder is served
    make_db(tmp_path / "elsewhere" / "private.db")
    return inside


def test_a_link_out_of_the_folder_is_refused_with_a_warning(
    folder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A symlink to a database outside the folder (by a relative or an absolute target) is skipped,
    naming where it points and the flag; links within the folder are served."""
    (folder / "up.db").symlink_to("../elsewhere/private.db")
    (folder / "abs.sqlite").symlink_to(tmp_path / "elsewhere" / "private.db")
    (folder / "sub").mkdir()
    make_db(folder / "sub" / "deep.db")
    (folder / "deep.db").symlink_to("sub/deep.db")
    specs = scan_db_dir(folder)
    assert [s.alias for s in specs] == ["current", "deep", "good"]
    target = tmp_path / "elsewhere" / "private.db"
    assert warnings(caplog) == [
        f"--db-dir {folder}: skipped abs.sqlite: it is a symlink to {target}, outside the folder; serve "
        "it with --db ALIAS=PATH, or pass --db-dir-outside-links",
        f"--db-dir {folder}: skipped up.db: it is a symlink to {target}, outside the folder; serve it "
        "with --db ALIAS=PATH, or pass --db-dir-outside-links",
    ]


def test_the_flag_serves_links_out_of_the_folder(folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    """--db-dir-outside-links (db-dir-outside-links in the config file) serves them."""
    (folder / "up.db").symlink_to("../elsewhere/private.db")
    settings = parse_settings(["--db-dir", str(folder), "--db-dir-outside-links"], {})
    catalog = load_catalog(collect_databases(settings, {}), WorkerLimits())
    assert catalog.aliases == ("current", "good", "up")
    assert catalog.entry("up").path == (folder.parent / "elsewhere" / "private.db").resolve()
    assert warnings(caplog) == []


def test_every_entry_that_is_no_file_is_skipped_with_a_warning(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory, a FIFO, a socket, a broken link, a link loop and a device named *.db are each
    named with what they are; none is opened (the FIFO would block)."""
    (folder / "dir.db").mkdir()
    os.mkfifo(folder / "pipe.sqlite")
    (folder / "gone.db").symlink_to("nowhere.db")
    (folder / "loop.db").symlink_to("loop.db")
    (folder / "zero.sqlite3").symlink_to("/dev/zero")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(folder / "sock.db"))
        settings = parse_settings(["--db-dir", str(folder), "--db-dir-outside-links"], {})
        catalog = load_catalog(collect_databases(settings, {}), WorkerLimits())
    assert catalog.aliases == ("current", "good")
    skipped = f"--db-dir {folder}: skipped"
    assert warnings(caplog) == [
        f"{skipped} dir.db: it is a directory, not a database file",
        f"{skipped} gone.db: it is a symlink to nowhere.db, which does not exist",
        f"{skipped} loop.db: it is a symlink that loops (or runs through too many links)",
        f"{skipped} pipe.sqlite: it is a FIFO (named pipe), not a database file",
        f"{skipped} sock.db: it is a socket, not a database file",
        f"{skipped} zero.sqlite3: it is a character device, not a database file",
    ]


def test_a_folder_of_skipped_entries_names_them(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Nothing servable: start-up stops, listing what was skipped (the warnings say why)."""
    (tmp_path / "dir.db").mkdir()
    (tmp_path / "link.db").symlink_to("/dev/null")
    with pytest.raises(ConfigError) as info:
        scan_db_dir(tmp_path)
    assert str(info.value) == (
        f"--db-dir {tmp_path}: no usable *.sqlite, *.sqlite3 or *.db file in it "
        "(skipped: dir.db, link.db); check the folder"
    )
    assert len(warnings(caplog)) == 2

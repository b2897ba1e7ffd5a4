"""Opening a guarded connection: the limits it is opened with, the file's read-only URI and
identity, its WAL mode and -wal/-shm files, and what another program holding it locked means.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

IMMUTABLE_WARNING = (
    "opened as an immutable snapshot: the database is in WAL mode and its folder is read-only "
    "with no -shm file, so commits still in the -wal file are not visible; checkpoint the database "
    "(PRAGMA wal_checkpoint) or make its folder writable to see them"
)


def wal_files_note(names: list[str]) -> str:
    """The warning for -wal/-shm files SQLite created beside a WAL-mode database."""
    return (
        f"the database is in WAL mode and opening it created {' and '.join(names)} beside it: "
        "SQLite's readers need them (they hold no data of ours, the database file itself is "
        "never written) and may leave them there; to avoid them, switch the database to "
        "rollback mode once with `PRAGMA journal_mode=DELETE` or serve it from a read-only folder"
    )


def busy_error(exc: sqlite3.Error) -> bool:
    """True when SQLite failed because another connection holds the file locked (SQLITE_BUSY or
    SQLITE_LOCKED, extended codes included): a writer, not a damaged file nor a wrong query."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def busy_text(message: str, busy_timeout_ms: int) -> str:
    """What a statement that met a writer is told: SQLite's words first, then why and what to do."""
    return (
        f"{message}: another program is writing to the database and held it for more than "
        f"{busy_timeout_ms / 1000:g} s; the query itself is fine: run it again in a moment"
    )


@dataclass(frozen=True)
class GuardSettings:
    """Limits applied to every guarded connection."""

    max_sql_length: int = 100_000
    min_value_length: int = 16 * 1024 * 1024
    busy_timeout_ms: int = 500  # how long a statement waits for a writer to release the file
    progress_opcodes: int = 1000
    schema_chars: int = 2_000_000  # names, types and defaults kept per database schema
    # Statements held to bounded work per step of their program (authorizer.BOUNDED_FUNCTIONS, no
    # virtual tables nor pragmas, values up to BOUNDED_VALUE_BYTES): the deadline then bounds a
    # statement, with no kill needed; for connections in the server's own process (`_inline`).
    bounded: bool = False
    # Prepared statements kept by text (STATEMENTS_KEPT), for a connection whose hide rules never
    # change (`_inline`: one per rule set). SQLite authorizes a statement when it prepares it, and
    # prepares a kept one again (authorizing it again) whenever the schema changes; what a kept
    # one reads is what the authorizer saw then (`AuthorizedReads`). A worker's connection serves
    # every rule set, so each of its statements is prepared and authorized anew.
    reuse_statements: bool = False


def database_uri(path: Path, *, immutable: bool = False) -> str:
    """The read-only URI for a database file."""
    params = {"mode": "ro"}
    if immutable:
        params["immutable"] = "1"
    return path.as_uri() + "?" + urlencode(params)


def file_identity(path: Path) -> tuple[int, int]:
    """The file's device and inode numbers; (0, 0) when there is no file at the path."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, 0)
    return (st.st_dev, st.st_ino)


def wal_without_shm(path: Path) -> bool:
    """True for a WAL-mode file whose -shm is missing and cannot be created."""
    with path.open("rb") as fh:
        header = fh.read(20)
    wal_mode = len(header) == 20 and header[18] == 2 and header[19] == 2
    shm = path.with_name(path.name + "-shm")
    return wal_mode and not shm.exists()

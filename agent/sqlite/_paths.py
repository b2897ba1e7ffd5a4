"""Checking that a path names a regular SQLite file: at start, and again at every (re)open."""

from __future__ import annotations

import os
import stat
from pathlib import Path

SQLITE_HEADER = b"SQLite format 3\x00"


class NotADatabaseFile(Exception):
    """The path does not (or no longer) name a regular SQLite file; the message says why."""


def check_database_file(resolved: Path) -> None:
    """Raise NotADatabaseFile unless `resolved` is still a regular file with the SQLite header.

    `resolved` is the path as validated at start (symlinks already resolved): a path that now
    resolves elsewhere (a symlink swapped in), a FIFO, a device such as /dev/zero or a file
    without the header is refused, without blocking on a FIFO.
    """
    try:
        now = Path(os.path.realpath(resolved))
        if now != resolved:
            raise NotADatabaseFile(
                f"{resolved} now resolves to {now} (a symlink was put in its "
                "place); only the file configured at start is served"
            )
        info = os.stat(resolved, follow_symlinks=False)
    except FileNotFoundError as exc:
        raise NotADatabaseFile(f"{resolved}: no such file any more; check the path") from exc
    except OSError as exc:
        raise NotADatabaseFile(f"{resolved}: cannot be checked ({exc.strerror})") from exc
    if not stat.S_ISREG(info.st_mode):
        raise NotADatabaseFile(f"{resolved}: not a regular file (any more); give the path of a .sqlite file")
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        try:
            header = os.read(fd, len(SQLITE_HEADER))
        finally:
            os.close(fd)
    except OSError as exc:
        raise NotADatabaseFile(f"{resolved}: cannot be read ({exc.strerror}); check its permissions") from exc
    if header != SQLITE_HEADER:
        raise NotADatabaseFile(
            f"{resolved}: not an SQLite 3 database (the file does not start with the SQLite header)"
        )


def stat_signature(path: Path) -> tuple[int, ...]:
    """What changes when the database or its WAL changes."""
    sig: list[int] = []
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = os.stat(p)
            sig += [st.st_mtime_ns, st.st_size, st.st_ino]
        except FileNotFoundError:
            sig += [0, 0, 0]
    return tuple(sig)

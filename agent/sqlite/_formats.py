"""printf() and format() that fail past the value-length cap, as every other SQL function does.

SQLite builds printf's result in an accumulator bounded by SQLITE_LIMIT_LENGTH and, past it,
returns NULL instead of an error: `length(printf('%.*c', 17000000, 'x'))` is NULL with status
OK, and `WHERE printf(...) IS NULL` holds on every row, while `||`, replace(), hex(),
group_concat() and the rest fail with "string or blob too big". `CheckedFormats` is the
replacement a guarded connection installs for statements that name either function: it runs
SQLite's own printf on a private in-memory connection with the same cap (so every format
behaves exactly as SQLite's), and raises where that returns NULL for a non-NULL format, which
only an overflow makes it do.

Python cannot register a function as innocuous, so while trusted_schema is off the replacement
cannot run where the schema calls it (a view, a generated column): SQLite refuses such a
statement with "unsafe use of printf()" before it reads anything, and the caller runs it on a
connection with SQLite's own functions instead (`used_by_schema`).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable

from ._sql_names import sql_words

FORMAT_FUNCTIONS = ("printf", "format")
TOO_BIG = "string or blob too big"  # SQLite's own words for every other value past the cap
_UNSAFE_USE = re.compile(r"unsafe use of (?:printf|format)\(\)", re.IGNORECASE)


class ValueTooBig(Exception):
    """A format's result would pass the value-length cap (SQLite would have returned NULL)."""


def names_formats(sql: str) -> bool:
    """True when `sql` may call printf() or format() (the word anywhere in it)."""
    folded = sql.casefold()  # folding is per character: a word's folded text is in the whole's
    if not any(name in folded for name in FORMAT_FUNCTIONS):
        return False
    return not sql_words(sql).isdisjoint(FORMAT_FUNCTIONS)


def used_by_schema(error: sqlite3.Error) -> bool:
    """True when SQLite refused the replacement where the schema calls the function."""
    return _UNSAFE_USE.search(str(error)) is not None


class CheckedFormats:
    """SQLite's printf and format, run on a private connection, failing past `max_length` bytes."""

    def __init__(self, max_length: int) -> None:
        self._own = sqlite3.connect(":memory:", check_same_thread=False)
        self._own.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_length)
        self._statements: dict[tuple[str, int], str] = {}
        self.overflowed: str | None = None  # the function that passed the cap in this statement
        self.names = tuple(name for name in FORMAT_FUNCTIONS if self._known(name))

    def _known(self, name: str) -> bool:
        try:
            self._own.execute(f"SELECT {name}('')").fetchone()
        except sqlite3.OperationalError:  # format() is SQLite 3.38+
            return False
        return True

    def install(self, conn: sqlite3.Connection) -> None:
        """Replace printf and format on `conn` (for good: Python cannot remove a function)."""
        for name in self.names:
            conn.create_function(name, -1, self._function(name), deterministic=True)

    def _function(self, name: str) -> Callable[..., str | None]:
        def formatted(*args: object) -> str | None:
            if not args or args[0] is None:
                return None  # SQLite's printf() and printf(NULL) are NULL
            key = (name, len(args))
            sql = self._statements.get(key)
            if sql is None:
                sql = self._statements[key] = f"SELECT {name}({', '.join('?' * len(args))})"
            (value,) = self._own.execute(sql, args).fetchone()
            if value is None:
                self.overflowed = name
                raise ValueTooBig(name)
            return str(value)

        return formatted

    def close(self) -> None:
        self._own.close()

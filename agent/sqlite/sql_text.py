"""Scanning SQL text without parsing it: comments, quoted text, whitespace and the first keyword."""

from __future__ import annotations

import re


def skip_comment(sql: str, i: int) -> int:
    """The index just past the `--` or `/* */` comment that starts at `i`; `i` when none starts there.

    An unclosed comment runs to the end of the text, as SQLite reads it.
    """
    if sql.startswith("--", i):
        end = sql.find("\n", i)
        return len(sql) if end < 0 else end + 1
    if sql.startswith("/*", i):
        end = sql.find("*/", i + 2)
        return len(sql) if end < 0 else end + 2
    return i


def skip_quoted(sql: str, start: int, close: str) -> int:
    """The index just past the quoted text starting at `start` (doubled quotes stay inside)."""
    i = start + 1
    while i < len(sql):
        if sql[i] == close:
            if close != "]" and sql.startswith(close * 2, i):
                i += 2
                continue
            return i + 1
        i += 1
    return len(sql)


def skip_blanks(sql: str, i: int = 0, *, also: str = "") -> int:
    """The index of the first character from `i` on that is not whitespace, a comment or in `also`."""
    n = len(sql)
    while i < n:
        if sql[i].isspace() or sql[i] in also:
            i += 1
        elif (end := skip_comment(sql, i)) > i:
            i = end
        else:
            break
    return i


def first_keyword(sql: str) -> str:
    """The statement's first keyword, lower-cased, after whitespace, comments and '('."""
    i = j = skip_blanks(sql, also="(")
    while j < len(sql) and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    return sql[i:j].lower()


_QUOTE_CLOSE = {"'": "'", '"': '"', "`": "`", "[": "]"}
_OPENING = re.compile(r"--|/\*|['\"`\[]")  # where a comment or a quoted text may start


def quoted_and_comments(sql: str) -> list[tuple[str, str]]:
    """The comments and quoted texts of `sql`, in order, as (kind, text as written).

    kind is "comment" (`--` or `/* */`), "string" ('...') or "name" ("...", `...`, [...]); an
    unclosed one runs to the end of the text, as SQLite reads it.
    """
    found: list[tuple[str, str]] = []
    i = 0
    while (start := _OPENING.search(sql, i)) is not None:
        i = start.start()
        if (end := skip_comment(sql, i)) > i:
            found.append(("comment", sql[i:end]))
        else:
            close = _QUOTE_CLOSE[sql[i]]
            end = skip_quoted(sql, i, close)
            found.append(("string" if close == "'" else "name", sql[i:end]))
        i = end
    return found

"""Scanning SQL text without parsing it: comments, quoted text, whitespace, the first keyword, and
the tokens (strings, numbers, parameters, names) as SQLite's tokenizer tells them apart."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum


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


def quote_name(name: str) -> str:
    """`name` as a double-quoted SQL identifier (embedded double quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


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


class TokenKind(StrEnum):
    """What a token of SQL text is, as SQLite's tokenizer (tokenize.c) tells them apart."""

    STRING = "string"  # '...' (a doubled quote stays inside)
    BLOB = "blob"  # x'...'
    NUMBER = "number"  # 12, 1.5, .5, 1e3, 0x1F (digit separators `_` included)
    PARAMETER = "parameter"  # ?, ?NNN, :name, @name, $name (Tcl's `::` and `(...)` included)
    QUOTED_NAME = "quoted_name"  # "...", `...`, [...]: a name, or a string where no name fits
    WORD = "word"  # a keyword or a bare name
    SYMBOL = "symbol"  # an operator or punctuation, one character or a pair such as <=


@dataclass(frozen=True)
class Token:
    """One token: its kind and where it is in the text (`sql[start:end]`)."""

    kind: TokenKind
    start: int
    end: int


_PAIRS = ("||", "<=", ">=", "==", "!=", "<>", "<<", ">>", "->>", "->")


def _name_char(c: str) -> bool:
    """A character SQLite lets a bare name hold (IdChar): letters, digits, `_`, `$`, any non-ASCII."""
    return c.isalnum() or c in "_$" or ord(c) > 0x7F


def sql_tokens(sql: str) -> Iterator[Token]:
    """The tokens of `sql` in order, whitespace and comments left out (SQLite's tokenizer rules).

    An unclosed quote or comment runs to the end of the text, as SQLite reads it.
    """
    i, n = skip_blanks(sql), len(sql)
    while i < n:
        c = sql[i]
        if c == "'":
            kind, end = TokenKind.STRING, skip_quoted(sql, i, "'")
        elif c in "xX" and sql.startswith("'", i + 1):
            kind, end = TokenKind.BLOB, skip_quoted(sql, i + 1, "'")
        elif c in '"`[':
            kind, end = TokenKind.QUOTED_NAME, skip_quoted(sql, i, "]" if c == "[" else c)
        elif c.isdigit() or (c == "." and sql[i + 1 : i + 2].isdigit()):
            kind, end = TokenKind.NUMBER, _number_end(sql, i)
        elif c == "?":
            kind, end = TokenKind.PARAMETER, _run_end(sql, i + 1, str.isdigit)
        elif c in ":@#$" and i + 1 < n and _name_char(sql[i + 1]):
            kind, end = TokenKind.PARAMETER, _parameter_end(sql, i)
        elif _name_char(c):
            kind, end = TokenKind.WORD, _run_end(sql, i, _name_char)
        else:
            pair = next((p for p in _PAIRS if sql.startswith(p, i)), c)
            kind, end = TokenKind.SYMBOL, i + len(pair)
        yield Token(kind, i, end)
        i = skip_blanks(sql, end)


def parameter_names(sql: str) -> tuple[str, ...]:
    """The parameters `sql` binds, as written (`:month`, `?`, `?2`, `@x`), each once, in order."""
    return tuple(dict.fromkeys(sql[t.start : t.end] for t in sql_tokens(sql) if t.kind is TokenKind.PARAMETER))


def _run_end(sql: str, i: int, keep: Callable[[str], bool]) -> int:
    while i < len(sql) and keep(sql[i]):
        i += 1
    return i


def _number_end(sql: str, i: int) -> int:
    if sql[i] == "0" and sql[i + 1 : i + 2] in ("x", "X"):
        return _run_end(sql, i + 2, lambda c: c in "0123456789abcdefABCDEF_")
    i = _run_end(sql, i, lambda c: c.isdigit() or c == "_")
    if sql[i : i + 1] == ".":
        i = _run_end(sql, i + 1, lambda c: c.isdigit() or c == "_")
    if sql[i : i + 1] in ("e", "E"):
        j = i + 1 + (sql[i + 1 : i + 2] in ("+", "-"))
        if sql[j : j + 1].isdigit():
            i = _run_end(sql, j, str.isdigit)
    # SQLite refuses a number run on into a name (`12abc`); the name's characters stay with it.
    return _run_end(sql, i, _name_char)


def _parameter_end(sql: str, i: int) -> int:
    """The end of a `:name`, `@name`, `#name` or `$name` parameter (Tcl's `$a::b(c)` included)."""
    tcl = sql[i] == "$"
    j = i + 1
    while j < len(sql):
        if _name_char(sql[j]):
            j += 1
        elif tcl and sql.startswith("::", j):
            j += 2
        elif tcl and sql[j] == "(":
            close = sql.find(")", j)
            return len(sql) if close < 0 else close + 1
        else:
            break
    return j

"""The names an SQL text writes, found by scanning it (never parsing it): what hiding checks a
statement or a stored definition against, and how a refusal quotes a name as it was written."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .sql_text import skip_comment, skip_quoted

_WORD = re.compile(r"[A-Za-z_\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*")
_NUMBER = re.compile(r"0[xX][0-9A-Fa-f]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_LITERAL = re.compile(r"'(?:[^']|'')*'")
_QUOTES = {'"': '"', "`": "`", "[": "]"}
SCHEMA_NAMES = frozenset({"main", "temp"})


@dataclass(frozen=True)
class Token:
    """One identifier or keyword as written (quotes removed), or one punctuation character."""

    text: str
    quoted: bool = False
    name: bool = True  # False for punctuation

    @property
    def folded(self) -> str:
        return self.text.casefold()


def tokens(sql: str) -> Iterator[Token]:
    """The names and punctuation of `sql`, in order; string literals, numbers and comments skipped."""
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        # Comments only: SQLite reads whitespace outside ASCII as part of a name, as _WORD does.
        if (end := skip_comment(sql, i)) > i:
            i = end
        elif ch == "'":
            i = skip_quoted(sql, i, "'")
        elif ch in _QUOTES:
            close = _QUOTES[ch]
            end = skip_quoted(sql, i, close)
            text = sql[i + 1:end - 1]
            yield Token(text if close == "]" else text.replace(close * 2, close), quoted=True)
            i = end
        elif match := _WORD.match(sql, i):
            yield Token(match.group())
            i = match.end()
        elif match := _NUMBER.match(sql, i):
            yield Token(match.group(), name=False)
            i = match.end()
        elif ch.isspace():
            i += 1
        else:
            yield Token(ch, name=False)
            i += 1


def sql_names(sql: str) -> frozenset[str]:
    """Casefolded identifiers and keywords of `sql` (quoted ones unquoted)."""
    return frozenset(t.folded for t in tokens(sql) if t.name)


def sql_words(sql: str) -> frozenset[str]:
    """Casefolded words of `sql` including those inside string literals.

    A virtual table's arguments name other tables either way: `content=Customer`,
    `content='Customer'`, `fts5vocab('docs', 'row')`.
    """
    return frozenset(w.casefold() for w in _WORD.findall(sql))


def sql_mentions(sql: str) -> frozenset[str]:
    """Every name `sql` may refer to, casefolded: its words, its quoted names and the text of
    its string literals (`content='my table'` names a table with a space)."""
    literals = {sql[m.start() + 1:m.end() - 1].replace("''", "'").strip().casefold()
                for m in _LITERAL.finditer(sql)}
    return sql_words(sql) | sql_names(sql) | literals


def uses_unchecked_join(sql: str) -> bool:
    """True when `sql` joins with USING or NATURAL, whose columns SQLite never authorizes."""
    return any(t.name and not t.quoted and t.folded in ("using", "natural") for t in tokens(sql))


def name_chains(sql: str) -> Iterator[tuple[str, ...]]:
    """Each dotted name of `sql` as written, e.g. ("main", "Customer") or ("c", "Email")."""
    chain: list[str] = []
    after_dot = False
    for token in tokens(sql):
        if token.name and (after_dot or not chain):
            chain.append(token.text)
            after_dot = False
        elif not token.name and token.text == "." and chain and not after_dot:
            after_dot = True
        else:
            if chain:
                yield tuple(chain)
            chain = [token.text] if token.name else []
            after_dot = False
    if chain:
        yield tuple(chain)


def written_table(sql: str, folded_names: frozenset[str]) -> str | None:
    """The first table reference of `sql` (`T` or `main.T`) naming one of `folded_names`, as written."""
    for chain in name_chains(sql):
        last = chain[-1].casefold()
        if last in folded_names and (len(chain) == 1 or (len(chain) == 2 and
                                                         chain[0].casefold() in SCHEMA_NAMES)):
            return ".".join(chain)
    return None


def written_column(sql: str, column: str) -> str | None:
    """The first reference of `sql` to `column` (`c`, `t.c`, `main.t.c`), as written."""
    folded = column.casefold()
    for chain in name_chains(sql):
        if chain[-1].casefold() == folded:
            return ".".join(chain)
    return None


def indexed_by(sql: str) -> Iterator[str]:
    """The index names `sql` writes after INDEXED BY, as written."""
    before: list[Token] = []
    for token in tokens(sql):
        if len(before) == 2 and _keyword(before[0], "indexed") and _keyword(before[1], "by") and token.name:
            yield token.text
        before = [*before[-1:], token]


def _keyword(token: Token, word: str) -> bool:
    return token.name and not token.quoted and token.folded == word

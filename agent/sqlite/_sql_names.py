"""The names an SQL text writes, found by scanning it (never parsing it): what hiding checks a
statement or a stored definition against, and how a refusal quotes a name as it was written."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .sql_text import skip_comment, skip_quoted

# A name: a letter, _ or any character past ASCII, then those, digits and $. Written as what it
# excludes of ASCII: the class [A-Za-z_\u0080-\U0010ffff] says the same but takes 15 ms to compile,
# at the start of every process that imports agent.sqlite (tests/sqlite/test_hiding.py pins the two
# equal).
_WORD = re.compile(r"[^\x00-\x40\x5b-\x5e\x60\x7b-\x7f][^\x00-\x23\x25-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]*")
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
            text = sql[i + 1 : end - 1]
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
    literals = {
        sql[m.start() + 1 : m.end() - 1].replace("''", "'").strip().casefold() for m in _LITERAL.finditer(sql)
    }
    return sql_words(sql) | sql_names(sql) | literals


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
        if last in folded_names and (
            len(chain) == 1 or (len(chain) == 2 and chain[0].casefold() in SCHEMA_NAMES)
        ):
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


@dataclass(frozen=True)
class UncheckedJoin:
    """The USING and NATURAL joins of one FROM clause, and every name that clause holds."""

    names: frozenset[str]  # casefolded names of the clause (its tables, aliases, ON terms, subqueries)
    using: tuple[str, ...]  # casefolded USING columns
    natural: bool  # a NATURAL join, or a join scanning cannot read (taken as joining on every column)


# Keywords that end a FROM clause at its own depth.
_FROM_ENDS = frozenset(
    {"where", "group", "having", "window", "order", "limit", "union", "intersect", "except", "returning"}
)


class _Clause:
    """A FROM clause being scanned."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.using: list[str] = []
        self.natural = False
        self.awaiting_columns = False  # USING was read: its column list comes next

    def join(self) -> UncheckedJoin | None:
        if not (self.natural or self.using or self.awaiting_columns):
            return None
        return UncheckedJoin(frozenset(self.names), tuple(self.using), self.natural or self.awaiting_columns)


class _Frame:
    """One parenthesised level of the statement: its names and its open FROM clause."""

    def __init__(self, columns_of: _Clause | None = None) -> None:
        self.names: set[str] = set()
        self.clause: _Clause | None = None
        self.columns_of = columns_of  # the clause whose USING column list this level is


def unchecked_joins(sql: str) -> list[UncheckedJoin]:
    """The FROM clauses of `sql` that join with USING or NATURAL, each with the names it holds.

    Found by scanning, never parsing: a FROM clause runs to WHERE, GROUP BY, ..., a compound
    operator or the end of its parentheses, and holds every name inside it, subqueries and
    parenthesised joins included. A USING or NATURAL outside any FROM clause, or a USING without
    a column list, counts as a NATURAL join over every name of the statement.
    """
    found: list[UncheckedJoin] = []
    stack = [_Frame()]
    orphan = False
    previous: Token | None = None

    def close(frame: _Frame) -> None:
        if frame.clause is not None and (join := frame.clause.join()) is not None:
            found.append(join)
        frame.clause = None

    for token in tokens(sql):
        frame = stack[-1]
        clause = frame.clause
        if not token.name and token.text == "(":
            awaiting = clause is not None and clause.awaiting_columns
            if awaiting and clause is not None:
                clause.awaiting_columns = False
            stack.append(_Frame(clause if awaiting else None))
        elif not token.name and token.text == ")" and len(stack) > 1:
            close(stack.pop())
            if frame.columns_of is not None:
                frame.columns_of.using.extend(frame.names)
            parent = stack[-1]
            parent.names |= frame.names
            if parent.clause is not None:
                parent.clause.names |= frame.names
        elif clause is not None and clause.awaiting_columns:
            clause.awaiting_columns, clause.natural = False, True  # USING without its list
        if not token.name:
            if token.text == ";":
                close(frame)
            previous = token
            continue
        keyword = "" if token.quoted else token.folded
        if keyword == "from" and not (previous is not None and _keyword(previous, "distinct")):
            close(frame)
            frame.clause = _Clause()
        elif keyword in _FROM_ENDS:
            close(frame)
        elif keyword in ("using", "natural"):
            if clause is None:
                orphan = True
            elif keyword == "natural":
                clause.natural = True
            else:
                clause.awaiting_columns = True
        else:
            frame.names.add(token.folded)
            if clause is not None:
                clause.names.add(token.folded)
        previous = token
    while stack:
        close(stack.pop())
    if orphan:
        found.append(UncheckedJoin(sql_names(sql), (), True))
    return found


def cte_names(sql: str) -> frozenset[str]:
    """The casefolded names the WITH clauses of `sql` define (`WITH [RECURSIVE] a(x) AS (...), b AS ...`)."""
    found: set[str] = set()
    stream = list(tokens(sql))
    for i, token in enumerate(stream):
        if not _keyword(token, "with"):
            continue
        j = i + 1 + int(_keyword_at(stream, i + 1, "recursive"))
        while j < len(stream) and stream[j].name:
            found.add(stream[j].folded)
            j = _past_parentheses(stream, j + 1)  # its column list, if any
            if not _keyword_at(stream, j, "as"):
                break
            j += 1
            j += int(_keyword_at(stream, j, "not"))
            j += int(_keyword_at(stream, j, "materialized"))
            j = _past_parentheses(stream, j)  # its body
            if j >= len(stream) or stream[j].name or stream[j].text != ",":
                break
            j += 1
    return frozenset(found)


def _keyword_at(stream: list[Token], j: int, word: str) -> bool:
    return j < len(stream) and _keyword(stream[j], word)


def _past_parentheses(stream: list[Token], j: int) -> int:
    """The index past the parenthesised group starting at `j` (`j` itself when none starts there)."""
    if j >= len(stream) or stream[j].name or stream[j].text != "(":
        return j
    depth = 0
    for k in range(j, len(stream)):
        if not stream[k].name and stream[k].text in "()":
            depth += 1 if stream[k].text == "(" else -1
            if depth == 0:
                return k + 1
    return len(stream)

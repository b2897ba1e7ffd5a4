"""An SQL statement's top-level parts, found by scanning its text (never parsing it): what sets one
answer's SQL apart from another's.

A SELECT is cut at its clause keywords outside parentheses: each selected column, the first
table, each join, each condition of WHERE and HAVING (split at top-level AND), each GROUP BY
and ORDER BY term, the LIMIT, DISTINCT, a WITH clause, and each compound branch (UNION ...).
What sits inside parentheses stays with the part that holds it. Comments are dropped and
whitespace is collapsed, so two parts compare equal when they differ only in layout or in
the case of keywords and names; string literals keep their case.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .sql_text import Token, TokenKind, skip_quoted, sql_tokens


class PartKind(Enum):
    """Which clause a part comes from (in the order differences are told)."""

    FILTER = "filter"  # one condition of WHERE
    JOIN = "join"  # one JOIN with its ON or USING
    FROM = "from"  # the first table (or subquery) read
    GROUP = "group"  # one GROUP BY term
    HAVING = "having"  # one condition of HAVING
    COLUMN = "column"  # one selected column
    DISTINCT = "distinct"
    ORDER = "order"  # one ORDER BY term
    LIMIT = "limit"  # LIMIT (and OFFSET)
    COMPOUND = "compound"  # UNION / INTERSECT / EXCEPT and the branch after it
    WITH = "with"  # the WITH clause


@dataclass(frozen=True)
class SqlPart:
    """One top-level part of a statement, as written (comments dropped, whitespace collapsed)."""

    kind: PartKind
    text: str

    @property
    def key(self) -> tuple[PartKind, str]:
        """What two parts must share to be the same: the kind and the text, case aside outside strings."""
        return self.kind, _folded(self.text)


@dataclass(frozen=True)
class _Token:
    text: str
    word: bool  # a bare word (keyword or name), compared case-insensitively


_JOIN_WORDS = frozenset({"join", "left", "right", "full", "inner", "cross", "natural", "outer"})
_CLAUSES = frozenset({"select", "from", "where", "group", "having", "order", "limit", "window"})
_COMPOUND = frozenset({"union", "intersect", "except"})
_NO_SPACE_BEFORE = frozenset({",", ")", ".", ";"})
_NO_SPACE_AFTER = frozenset({"(", "."})
# Words after which a parenthesized group keeps its space (`IN (1, 2)`); after any other word it
# is a call's arguments (`count(*)`).
_SPACED_BEFORE_GROUP = frozenset(
    {
        "in",
        "as",
        "using",
        "on",
        "and",
        "or",
        "not",
        "exists",
        "from",
        "join",
        "where",
        "select",
        "when",
        "then",
        "else",
        "by",
        "over",
        "filter",
        "values",
        "is",
        "like",
        "glob",
        "between",
        "case",
        "all",
        "distinct",
        "having",
        "union",
        "except",
        "intersect",
        "with",
    }
)


def sql_parts(sql: str) -> tuple[SqlPart, ...]:
    """The top-level parts of `sql`, in order; () when it holds no SELECT (nothing to compare)."""
    tokens = _top_level_tokens(sql)
    parts: list[SqlPart] = []
    start = 0
    if tokens and tokens[0].word and tokens[0].text.casefold() == "with":
        select = _next_word(tokens, 1, "select")
        if select is None:
            return ()
        parts.append(SqlPart(PartKind.WITH, _joined(tokens[1:select])))
        start = select
    branches = _split_compound(tokens[start:])
    if not branches or not _is_word(branches[0][0], "select"):
        return tuple(parts)
    parts.extend(_select_parts(branches[0]))
    parts.extend(SqlPart(PartKind.COMPOUND, _joined(branch)) for branch in branches[1:])
    return tuple(parts)


def without_comments(sql: str) -> str:
    """`sql` on one line as the parts show it: comments dropped, whitespace collapsed."""
    return _joined(_top_level_tokens(sql))


def _top_level_tokens(sql: str) -> list[_Token]:
    """Words, literals and punctuation outside parentheses (sql_tokens); a parenthesized group is one
    token, its inside joined as the parts show it."""
    tokens, _ = _level(sql, list(sql_tokens(sql)), 0, inner=False)
    return tokens


def _level(sql: str, tokens: list[Token], i: int, *, inner: bool) -> tuple[list[_Token], int]:
    """The tokens from `i` to the `)` that closes this level (an inner one) or to the end, each group
    one token; and the index past them. An unclosed group runs to the end of the text."""
    out: list[_Token] = []
    while i < len(tokens):
        token = tokens[i]
        text = sql[token.start : token.end]
        i += 1
        if text == ")" and inner:
            break
        if text == "(":
            group, i = _level(sql, tokens, i, inner=True)
            out.append(_Token(f"({_joined(group)})", word=False))
        else:
            out.append(_Token(text, word=token.kind is TokenKind.WORD))
    return out, i


def _is_word(token: _Token, word: str) -> bool:
    return token.word and token.text.casefold() == word


def _next_word(tokens: list[_Token], start: int, word: str) -> int | None:
    return next((i for i in range(start, len(tokens)) if _is_word(tokens[i], word)), None)


def _split_compound(tokens: list[_Token]) -> list[list[_Token]]:
    """The branches of a compound SELECT; each branch after the first starts with its operator."""
    branches: list[list[_Token]] = [[]]
    for token in tokens:
        if token.word and token.text.casefold() in _COMPOUND and branches[-1]:
            branches.append([])
        branches[-1].append(token)
    return [b for b in branches if b]


def _select_parts(tokens: list[_Token]) -> list[SqlPart]:
    """The parts of one SELECT (`tokens` starts with SELECT)."""
    sections: list[tuple[str, list[_Token]]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name = token.text.casefold() if token.word else ""
        if name in _CLAUSES and (name not in ("group", "order") or _by_follows(tokens, i)):
            skip = 2 if name in ("group", "order") else 1
            sections.append((name, []))
            i += skip
            continue
        if sections:
            sections[-1][1].append(token)
        i += 1
    parts: list[SqlPart] = []
    for name, body in sections:
        if name == "select":
            if body and body[0].word and body[0].text.casefold() in ("distinct", "all"):
                if body[0].text.casefold() == "distinct":
                    parts.append(SqlPart(PartKind.DISTINCT, "DISTINCT"))
                body = body[1:]
            parts.extend(SqlPart(PartKind.COLUMN, t) for t in _split(body, ","))
        elif name == "from":
            parts.extend(_from_parts(body))
        elif name == "where":
            parts.extend(SqlPart(PartKind.FILTER, t) for t in _conditions(body))
        elif name == "having":
            parts.extend(SqlPart(PartKind.HAVING, t) for t in _conditions(body))
        elif name == "group":
            parts.extend(SqlPart(PartKind.GROUP, t) for t in _split(body, ","))
        elif name == "order":
            parts.extend(SqlPart(PartKind.ORDER, t) for t in _split(body, ","))
        elif name == "limit" and body:
            parts.append(SqlPart(PartKind.LIMIT, f"LIMIT {_joined(body)}"))
    return parts


def _by_follows(tokens: list[_Token], i: int) -> bool:
    return i + 1 < len(tokens) and _is_word(tokens[i + 1], "by")


def _from_parts(body: list[_Token]) -> list[SqlPart]:
    """The first source, then each join (its keywords, source and condition) or comma-joined source."""
    pieces: list[list[_Token]] = [[]]
    kinds = [PartKind.FROM]
    i = 0
    while i < len(body):
        token = body[i]
        starts_join = token.word and token.text.casefold() in _JOIN_WORDS
        if (starts_join or token.text == ",") and pieces[-1]:
            pieces.append([])
            kinds.append(PartKind.JOIN)
            if token.text == ",":
                i += 1
                continue
            while i < len(body) and body[i].word and body[i].text.casefold() in _JOIN_WORDS:
                pieces[-1].append(body[i])
                i += 1
            continue
        pieces[-1].append(token)
        i += 1
    return [SqlPart(kind, _joined(piece)) for kind, piece in zip(kinds, pieces, strict=True) if piece]


def _conditions(body: list[_Token]) -> list[str]:
    """The conditions of a WHERE or HAVING, split at top-level AND (a BETWEEN's own AND stays)."""
    out: list[list[_Token]] = [[]]
    between = False
    for token in body:
        if _is_word(token, "between"):
            between = True
        elif _is_word(token, "and"):
            if between:
                between = False
            elif out[-1]:
                out.append([])
                continue
        out[-1].append(token)
    return [_joined(c) for c in out if c]


def _split(body: list[_Token], separator: str) -> list[str]:
    out: list[list[_Token]] = [[]]
    for token in body:
        if token.text == separator:
            out.append([])
        else:
            out[-1].append(token)
    return [_joined(c) for c in out if c]


def _joined(tokens: list[_Token]) -> str:
    """Tokens as one line: single spaces, none inside `a.b`, before `,` or `)`, or after `(`."""
    text = ""
    previous: _Token | None = None
    for token in tokens:
        call = (
            previous is not None
            and previous.word
            and token.text.startswith("(")
            and previous.text.casefold() not in _SPACED_BEFORE_GROUP
        )
        tight = previous is None or token.text in _NO_SPACE_BEFORE or previous.text in _NO_SPACE_AFTER or call
        text += ("" if tight else " ") + token.text
        previous = token
    return text


def _folded(text: str) -> str:
    """`text` case-folded except inside string literals ('Jazz' and 'jazz' differ, SELECT and select not)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "'":
            end = skip_quoted(text, i, "'")
            out.append(text[i:end])
            i = end
        else:
            j = text.find("'", i)
            j = len(text) if j < 0 else j
            out.append(text[i:j].casefold())
            i = j
    return "".join(out)

"""Reading the final SQL answer out of a reply: a submit_sql call's, else the last ```sql fence, else
a run_query call's, else a bare SELECT/WITH statement read whole (and what followed it).

Pure functions over a parsed completion (replies.py).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from .replies import SUBMIT, ParsedCompletion, parse_completion
from .sqlite.sql_text import TokenKind, sql_tokens
from .text import echo_value
from .tools import TOOLS

SQL_KEYS = TOOLS[SUBMIT].params[0].keys  # "sql" and the spellings agent.tools accepts
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
# A statement start: at a line start after optional list marks, a short "label:" or backticks.
# Only all-caps or all-lowercase keywords count: "Select the rows ..." or "With that ..." is prose.
_STATEMENT_START = re.compile(
    r"^[ \t>*-]*(?:[^\n:`\"{}]{0,40}:[ \t]*)?`*[ \t]*(?=(?:SELECT|select|WITH|with)\b)", re.MULTILINE
)
_WITH_CLAUSE = re.compile(
    r"(?:WITH|with)\s+(?:RECURSIVE\s+|recursive\s+)?[^\s(]+\s*(?:\([^)]*\)\s*)?(?:AS|as)\s*\("
)
_SELECT_START = re.compile(r"(?:SELECT|select)\s+\S")
DROPPED_CHARS = 120  # what the episode's record shows of text left out after an answer's SQL


@dataclass(frozen=True)
class FinalSql:
    """The answer SQL a reply holds, and the text after a bare statement that was not read as SQL."""

    sql: str
    dropped: str | None = None  # non-SQL text that followed a bare statement, left out of it

    def note(self) -> str | None:
        """One line saying what was left out of the answer, for the episode's record."""
        if self.dropped is None:
            return None
        return (
            "the answer's SQL was read up to where it ended; the text after it is not SQL and was "
            f"left out: {echo_value(' '.join(self.dropped.split()), DROPPED_CHARS)}"
        )


def read_final_sql(text: str) -> FinalSql | None:
    """The answer SQL: a submit_sql call, else the last ```sql fence, else a run_query, else bare SQL
    (with what was left out after a bare statement)."""
    parsed = parse_completion(text)
    submitted = _call_sql(parsed, SUBMIT)
    if submitted is not None:
        return FinalSql(submitted)
    fenced = last_sql_fence(parsed.body)
    if fenced is not None:
        return FinalSql(fenced)
    # A query tested in the answer turn is what the model means to answer with.
    tested = _call_sql(parsed, "run_query")
    if tested is not None:
        return FinalSql(tested)
    return last_bare_statement(parsed.body)


def _call_sql(parsed: ParsedCompletion, tool: str) -> str | None:
    sqls = [sql_argument(call.args) for call in parsed.calls if call.tool == tool]
    usable = [sql for sql in sqls if sql is not None]
    return usable[-1] if usable else None


def sql_argument(args: dict[str, Any]) -> str | None:
    """The SQL of a run_query/submit_sql call ("sql", or the "query" spelling the tools accept)."""
    for key in SQL_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def last_sql_fence(text: str) -> str | None:
    """Content of the last ```sql (or unlabelled SELECT/WITH) code fence; an unclosed one counts."""
    found = None
    for match in _FENCE.finditer(text):
        label, content = match.group(1).strip().lower(), match.group(2).strip()
        if not content:
            continue
        if label in ("sql", "sqlite") or (label == "" and _starts_statement(content)):
            found = content
    return found


def _starts_statement(text: str) -> bool:
    return bool(_SELECT_START.match(text) or _WITH_CLAUSE.match(text))


def last_bare_statement(text: str) -> FinalSql | None:
    """The last SELECT/WITH statement written as plain text, read whole, and what followed it.

    It ends at its first unquoted `;`, at a backtick, at the end of the text, or at a blank
    line after which the text no longer continues the statement (see `_continues`).
    """
    found: FinalSql | None = None
    pos = 0
    while (match := _STATEMENT_START.search(text, pos)) is not None:
        start = match.end()
        end = _statement_end(text, start)
        statement = text[start:end].strip()
        if _starts_statement(statement):
            rest = text[end:].lstrip(" \t\r\n;`")
            found = FinalSql(statement, rest.rstrip() or None)
            pos = max(end, start + 1)
        else:
            pos = start + 1
    return found


# A statement is not over at a blank line when what follows continues it: a clause keyword (in
# the statement's own case: "WHERE" after "SELECT", "where" after "select"; "Where ..." is prose)
# or an operator; or when what came before cannot end a statement (an open parenthesis, a
# trailing comma, operator or keyword such as AND, FROM, BY).
_CONTINUING_WORDS = frozenset(
    {
        "from",
        "where",
        "group",
        "order",
        "having",
        "limit",
        "offset",
        "join",
        "inner",
        "left",
        "right",
        "full",
        "cross",
        "natural",
        "outer",
        "on",
        "using",
        "and",
        "or",
        "union",
        "intersect",
        "except",
        "window",
        "as",
        "not",
        "in",
        "is",
        "like",
        "glob",
        "between",
        "then",
        "else",
        "end",
        "when",
        "collate",
        "escape",
        "asc",
        "desc",
        "nulls",
    }
)
_UNFINISHED_WORDS = _CONTINUING_WORDS - {"end", "asc", "desc"} | {
    "select",
    "distinct",
    "all",
    "by",
    "case",
    "with",
    "recursive",
    "exists",
    "filter",
    "over",
    "partition",
    "values",
}
_OPERATORS = frozenset(
    {
        ",",
        "(",
        "=",
        "==",
        "<",
        ">",
        "<=",
        ">=",
        "!=",
        "<>",
        "+",
        "-",
        "*",
        "/",
        "%",
        "||",
        "&",
        "|",
        "<<",
        ">>",
        ".",
        "->",
        "->>",
    }
)


def _statement_end(text: str, start: int) -> int:
    """Index of the statement's end: an unquoted `;` or backtick, a blank line it does not go on
    past, or the end of `text`."""
    quote: str | None = None
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch in ";`" or (
            ch == "\n"
            and depth == 0
            and text[i + 1 :].lstrip(" \t").startswith("\n")
            and not _continues(text[start:i], text[i:])
        ):
            return i
        i += 1
    return len(text)


def _continues(before: str, after: str) -> bool:
    """Whether the text after a blank line goes on with the statement written before it."""
    following = next(sql_tokens(after), None)
    if following is None:
        return False
    last = deque(sql_tokens(before), maxlen=1)
    if last and _open_end(before[last[0].start : last[0].end]):
        return True
    word = after[following.start : following.end]
    if following.kind is TokenKind.SYMBOL:
        return word in _OPERATORS or word == ")"
    own_case = word.upper() if before.lstrip()[:1].isupper() else word.lower()  # SELECT or select
    return following.kind is TokenKind.WORD and word.lower() in _CONTINUING_WORDS and word == own_case


def _open_end(token: str) -> bool:
    """Whether a statement's last token leaves it unfinished (AND, FROM, a comma, `=` ...)."""
    return token in _OPERATORS or token.lower() in _UNFINISHED_WORDS

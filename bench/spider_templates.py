"""Spider dev's questions made into verified templates, for bench_verified_params (no product code).

Groups a database's questions by their gold SQL with its literals abstracted (SQLite's tokenizer,
agent.sqlite.sql_tokens: strings, numbers, and a double-quoted token that names nothing, which
SQLite reads as a string); makes a template of one question by replacing each literal it writes
(once, as a whole word or number) by a slot in the question and a parameter in the SQL; and
builds the questions nobody wrote that the bench asks of it: other values, other spellings of
them, and the negatives that must never be served.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.sqlite import Database, Schema
from agent.sqlite.sql_text import Token, TokenKind, sql_tokens
from agent.verified.slot_types import NUMBER_WORDS

NEW_VALUES = 3  # other values asked per slot
COMPARE_OPS = {"=", "==", "!=", "<>", ">", "<", ">=", "<="}


@dataclass(frozen=True)
class Question:
    db_id: str
    question: str
    sql: str


@dataclass(frozen=True)
class Literal:
    """One literal of a gold SQL: where it is, its value, and the column it is compared with."""

    start: int
    end: int
    value: str | int | float
    after_limit: bool
    column: str | None  # TABLE.COLUMN, for a string compared with a column


@dataclass
class Made:
    """A template made from one question: its entry, and the literals that became slots."""

    source: Question
    entry: dict[str, Any]
    slots: list[tuple[str, Literal, tuple[int, int]]]  # (name, literal, span in the source question)


def load(data: Path) -> dict[str, list[Question]]:
    raw = json.loads((data / "dev.json").read_text(encoding="utf-8"))
    by_db: dict[str, list[Question]] = defaultdict(list)
    for item in raw:
        by_db[item["db_id"]].append(Question(item["db_id"], item["question"], item["query"]))
    return by_db


def schema_names(schema: Schema) -> tuple[set[str], dict[str, list[str]]]:
    """Every table and column name (folded), and each folded column's tables."""
    names: set[str] = set()
    columns: dict[str, list[str]] = defaultdict(list)
    for table in schema.tables:
        names.add(table.name.casefold())
        for column in table.columns:
            names.add(column.name.casefold())
            columns[column.name.casefold()].append(table.name)
    return names, columns


def is_literal(sql: str, token: Token, names: set[str]) -> bool:
    if token.kind is TokenKind.QUOTED_NAME:  # SQLite reads "x" as a string only when it names nothing
        return sql[token.start] == '"' and sql[token.start + 1 : token.end - 1].casefold() not in names
    return token.kind in (TokenKind.STRING, TokenKind.NUMBER)


def shape(sql: str, names: set[str]) -> tuple[str, ...]:
    """The SQL with its literals abstracted: what a group shares."""
    return tuple("?" if is_literal(sql, t, names) else sql[t.start : t.end].casefold() for t in sql_tokens(sql))


def literals(sql: str, names: set[str], columns: dict[str, list[str]]) -> list[Literal]:
    tokens = list(sql_tokens(sql))
    words = [sql[t.start : t.end] for t in tokens]
    aliases: dict[str, str] = {}
    tables: list[str] = []
    for i, w in enumerate(words):
        if w.casefold() in ("from", "join") and i + 1 < len(tokens) and tokens[i + 1].kind is TokenKind.WORD:
            table = words[i + 1]
            tables.append(table)
            j = i + 2
            if j < len(words) and words[j].casefold() == "as":
                j += 1
            if j < len(tokens) and tokens[j].kind is TokenKind.WORD and words[j].casefold() not in _KEYWORDS:
                aliases[words[j].casefold()] = table
    found = []
    for i, token in enumerate(tokens):
        if not is_literal(sql, token, names):
            continue
        text = words[i]
        value: str | int | float
        if token.kind is TokenKind.NUMBER:
            value = int(text) if text.isdigit() else float(text) if re.fullmatch(r"\d+\.\d+", text) else text
        else:
            value = text[1:-1].replace(text[0] * 2, text[0])
        column = None
        if token.kind is not TokenKind.NUMBER and i >= 2 and words[i - 1] in COMPARE_OPS:
            name = words[i - 2].casefold()
            qualifier = words[i - 4].casefold() if i >= 4 and words[i - 3] == "." else None
            table = aliases.get(qualifier or "", qualifier) if qualifier else None
            if table is None:
                owners = [t for t in columns.get(name, []) if t.casefold() in {x.casefold() for x in tables}]
                table = owners[0] if len(owners) == 1 else None
            column = f"{table}.{words[i - 2]}" if table else None
        after_limit = i >= 1 and words[i - 1].casefold() == "limit"
        found.append(Literal(token.start, token.end, value, after_limit, column))
    return found


_KEYWORDS = {
    "where",
    "join",
    "on",
    "group",
    "order",
    "limit",
    "inner",
    "left",
    "natural",
    "union",
    "except",
    "intersect",
    "having",
    "as",
    "cross",
    "outer",
    "using",
}


def find_in_question(question: str, literal: Literal) -> tuple[int, int] | None:
    """Where the question writes the literal: once, as a whole word or number; None otherwise."""
    value = literal.value
    if isinstance(value, int | float):
        options = [str(value)]
        if isinstance(value, int) and 0 <= value < len(NUMBER_WORDS):
            options.append(NUMBER_WORDS[value])
        spans = []
        for text in options:
            spans += [
                m.span()
                for m in re.finditer(rf"(?<![\w.,]){re.escape(text)}(?![\w]|[.,]\d)", question, re.IGNORECASE)
            ]
        return spans[0] if len(spans) == 1 else None
    if not value.strip() or "%" in value:
        return None
    spans = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(value)}(?!\w)", question, re.IGNORECASE)]
    return spans[0] if len(spans) == 1 else None


def slot_type(literal: Literal) -> dict[str, Any] | None:
    if isinstance(literal.value, int):
        if literal.after_limit:
            return {"type": "top"}
        return {"type": "year"} if 1900 <= literal.value <= 2100 else {"type": "integer"}
    if isinstance(literal.value, float):
        return {"type": "number"}
    if literal.column is None:
        return None
    return {"type": "value", "column": literal.column}


async def column_holds(db: Database, column: str, value: str) -> bool:
    table, _, name = column.partition(".")
    result = await db.aquery(
        f'SELECT 1 FROM "{table}" WHERE "{table}"."{name}" = :v LIMIT 1', max_rows=1, params={"v": value}
    )
    return result.ok and bool(result.rows)


async def make_template(
    db: Database, q: Question, names: set[str], columns: dict[str, list[str]]
) -> Made | None:
    """The template of one question: each literal it writes becomes a slot; None when none does."""
    slots: list[tuple[str, Literal, tuple[int, int]]] = []
    params: dict[str, Any] = {}
    for literal in literals(q.sql, names, columns):
        span = find_in_question(q.question, literal)
        spec = slot_type(literal)
        if span is None or spec is None or any(s[2] == span for s in slots):
            continue
        if spec["type"] == "value" and not await column_holds(db, spec["column"], str(literal.value)):
            continue  # the gold SQL's literal is no value the column holds as written
        name = f"p{len(slots) + 1}"
        slots.append((name, literal, span))
        params[name] = spec
    if not slots:
        return None
    question, sql = q.question, q.sql
    for name, _, span in sorted(slots, key=lambda s: -s[2][0]):
        question = question[: span[0]] + "{" + name + "}" + question[span[1] :]
    for name, literal, _ in sorted(slots, key=lambda s: -s[1].start):
        sql = sql[: literal.start] + ":" + name + sql[literal.end :]
    return Made(q, {"question": question, "sql": sql, "database": q.db_id, "params": params}, slots)


def sql_literal(value: str | int | float) -> str:
    return str(value) if isinstance(value, int | float) else "'" + value.replace("'", "''") + "'"


async def other_values(db: Database, literal: Literal, spec: dict[str, Any]) -> list[str | int | float]:
    """Up to NEW_VALUES other values for a slot: of its column, or numbers near it."""
    value = literal.value
    if spec["type"] == "value":
        table, _, name = spec["column"].partition(".")
        column = f'"{table}"."{name}"'
        result = await db.aquery(
            f"SELECT DISTINCT {column} FROM \"{table}\" WHERE typeof({column}) = 'text' "
            f"AND {column} != :v ORDER BY {column} LIMIT 50",
            max_rows=50,
            params={"v": value},
        )
        held = [r[0] for r in result.rows if isinstance(r[0], str)]
        # A value the question can write as the column holds it: no runs of spaces, nothing the
        # normalisation drops at the end, no braces (a template's slot).
        plain = [v for v in held if v and v == " ".join(v.split()) and v.strip("?!.… ") == v and "{" not in v]
        folded = Counter(v.casefold() for v in held)
        usable = [v for v in plain if folded[v.casefold()] == 1]
        step = max(1, len(usable) // NEW_VALUES)
        return usable[::step][:NEW_VALUES]
    if isinstance(value, float):
        return [value + 0.5, value * 2, round(value / 2, 3)]
    assert isinstance(value, int)
    if spec["type"] == "year":
        return [value - 1, value + 1, value + 5]
    return [v for v in (value + 1, value * 2 + 1, max(1, value - 1)) if v != value]


def spellings(value: str | int | float, written: str, kind: str) -> list[tuple[str, str]]:
    """(kind, text) for a new value: as the column holds it (or as the question wrote its number: a word or
    digits), and in other spellings a reader must take too (other letter case, a number's other form; a
    year is never written with a comma)."""
    if isinstance(value, str):
        others = [v for v in dict.fromkeys((value.lower(), value.upper())) if v != value]
        return [("new values", value), *(("new values, other spellings", v) for v in others)]
    as_word = isinstance(value, int) and 0 <= value < len(NUMBER_WORDS)
    plain = NUMBER_WORDS[value] if as_word and not written[:1].isdigit() else str(value)  # type: ignore[index]
    others = []
    if as_word:
        others.append(str(value) if plain != str(value) else NUMBER_WORDS[value])  # type: ignore[index]
    if isinstance(value, int) and value >= 1000 and kind != "year":
        others.append(f"{value:,}")
    return [("new values", plain), *(("new values, other spellings", v) for v in others)]


def with_text(question: str, span: tuple[int, int], text: str) -> str:
    return question[: span[0]] + text + question[span[1] :]


def negatives(made: Made, span: tuple[int, int], shown: str, other: str) -> list[tuple[str, str]]:
    """(kind, question) for the edits that must never be served."""
    q = made.source.question
    out = [
        ("second literal", with_text(q, span, f"{shown} or {other}")),
        ("second literal", with_text(q, span, f"{shown} and {other}")),
        ("second literal", with_text(q, span, f"{shown}, {other}")),
        ("negation", with_text(q, span, f"not {shown}")),
    ]
    words = q.split()
    auxiliaries = {"is", "are", "was", "were", "do", "does", "did", "have", "has"}
    verbs = [i for i, w in enumerate(words) if w.lower() in auxiliaries]
    if verbs:
        out.append(("negation", " ".join([*words[: verbs[0] + 1], "not", *words[verbs[0] + 1 :]])))
    if len(shown) > 3 and not shown[:1].isdigit():  # a value misspelt: no value of its column
        out.append(("near value", with_text(q, span, shown[:2] + shown[3:])))
    if shown[:1].isdigit():
        out += [
            ("near value", with_text(q, span, f"{shown}.5")),
            ("different unit", with_text(q, span, f"{shown}%")),
            ("different unit", with_text(q, span, f"{shown} km")),
            ("different unit", with_text(q, span, f"{shown} thousand")),
            ("different unit", with_text(q, span, f"${shown}")),
        ]
    return out


def literal_values(q: Question, names: set[str], columns: dict[str, list[str]]) -> list[str | int | float]:
    return [literal.value for literal in literals(q.sql, names, columns)]

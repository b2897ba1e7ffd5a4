"""Verified templates on questions nobody here wrote: Spider dev, its literals made parameters.

    python bench/bench_verified_params.py [--data ../shared/data/spider_dev] [--repeats 40]

Issue 35 asks, on Spider dev (1,034 questions over 20 databases):
- per database, group the questions whose gold SQL is the same once its literals are abstracted
  (SQLite's tokenizer, agent.sqlite.sql_tokens: strings, numbers, and a double-quoted token
  that names no table or column, which SQLite reads as a string); make a template from one
  question of each group, replacing each literal it writes in the question (a number, a year,
  a count after LIMIT, a value of the column the SQL compares it with) by a slot in the
  question and a parameter in the SQL; load each database's templates through the real checks;
- ask every question of the database (the other questions of each group are the coverage,
  the rest are questions no template was made from), and compare the rows of every verified
  answer with the rows of that question's own gold SQL: a difference is a false verified;
- build questions no one wrote from each template: the template's question with a slot's text
  replaced by another value (another value of the column, another number), whose gold is the
  template's gold SQL with that literal changed (rows compared the same way); and negatives
  that must never be served: a second literal ("X or Y", "X and Y", "X, Y"), a negation ("not
  X", "not" after the verb), a different unit ("X%", "X km", "X thousand", "$X");
- coverage per database (the share of a group's other questions served verified), the misses
  classified by agent.verified.TemplateMiss (paraphrase beyond the template, slot text not
  read, ambiguity);
- latency: through the MCP tool of an in-process server (concert_singer, schema cached, after
  a warm-up), an exact hit against a template hit with an integer slot and one with a value
  slot, the three interleaved; median server time as the client sees it (goal: a template hit
  within 2x an exact hit).

Served rows are compared whole: the bench's episode settings keep 100,000 rows.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from mcp import Client  # noqa: E402

from agent.backends.settings import make_backend  # noqa: E402
from agent.episode import EpisodeSettings  # noqa: E402
from agent.evaluation.accuracy import MatchRule, has_top_level_order_by, results_match  # noqa: E402
from agent.sqlite import Database, EngineLimits, QueryEngine, QueryResult, Schema  # noqa: E402
from agent.sqlite.sql_text import Token, TokenKind, sql_tokens  # noqa: E402
from agent.verified import Consulted, VerifiedLibrary, consult  # noqa: E402
from agent.verified.slots import NUMBER_WORDS  # noqa: E402
from agent.voting import CompareLimits, execute_for_comparison  # noqa: E402
from mcp_server.app import build_server  # noqa: E402
from mcp_server.config.command_line import parse_settings  # noqa: E402
from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.policies import OraclePolicy  # noqa: E402

TOOL = "answer_sql_question"
SETTINGS = EpisodeSettings(result_rows=100_000, result_cell_chars=None, result_bytes=1 << 30)
NEW_VALUES = 3  # other values asked per slot
LATENCY_DB = "concert_singer"
COMPARE_OPS = {"=", "==", "!=", "<>", ">", "<", ">=", "<="}
LITERAL_KINDS = (TokenKind.STRING, TokenKind.NUMBER, TokenKind.QUOTED_NAME)


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


@dataclass
class Figures:
    counts: Counter[str] = field(default_factory=Counter)
    per_db: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    false_verified: list[str] = field(default_factory=list)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))


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
        return sql[token.start] == '"' and sql[token.start + 1:token.end - 1].casefold() not in names
    return token.kind in (TokenKind.STRING, TokenKind.NUMBER)


def shape(sql: str, names: set[str]) -> tuple[str, ...]:
    """The SQL with its literals abstracted: what a group shares."""
    return tuple("?" if is_literal(sql, t, names) else sql[t.start:t.end].casefold() for t in sql_tokens(sql))


def literals(sql: str, names: set[str], columns: dict[str, list[str]]) -> list[Literal]:
    tokens = list(sql_tokens(sql))
    words = [sql[t.start:t.end] for t in tokens]
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


_KEYWORDS = {"where", "join", "on", "group", "order", "limit", "inner", "left", "natural", "union", "except",
             "intersect", "having", "as", "cross", "outer", "using"}


def find_in_question(question: str, literal: Literal) -> tuple[int, int] | None:
    """Where the question writes the literal: once, as a whole word or number; None otherwise."""
    value = literal.value
    if isinstance(value, int | float):
        options = [str(value)]
        if isinstance(value, int) and 0 <= value < len(NUMBER_WORDS):
            options.append(NUMBER_WORDS[value])
        spans = []
        for text in options:
            spans += [m.span() for m in re.finditer(rf"(?<![\w.,]){re.escape(text)}(?![\w]|[.,]\d)", question,
                                                    re.IGNORECASE)]
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
    result = await db.aquery(f'SELECT 1 FROM "{table}" WHERE "{table}"."{name}" = :v LIMIT 1', max_rows=1,
                             params={"v": value})
    return result.ok and bool(result.rows)


async def make_template(db: Database, q: Question, names: set[str],
                        columns: dict[str, list[str]]) -> Made | None:
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
        question = question[:span[0]] + "{" + name + "}" + question[span[1]:]
    for name, literal, _ in sorted(slots, key=lambda s: -s[1].start):
        sql = sql[:literal.start] + ":" + name + sql[literal.end:]
    return Made(q, {"question": question, "sql": sql, "database": q.db_id, "params": params}, slots)


def sql_literal(value: str | int | float) -> str:
    return str(value) if isinstance(value, int | float) else "'" + value.replace("'", "''") + "'"


async def other_values(db: Database, literal: Literal, spec: dict[str, Any]) -> list[str | int | float]:
    """Up to NEW_VALUES other values for a slot: of its column, or numbers near it."""
    value = literal.value
    if spec["type"] == "value":
        table, _, name = spec["column"].partition(".")
        column = f'"{table}"."{name}"'
        result = await db.aquery(f"SELECT DISTINCT {column} FROM \"{table}\" WHERE typeof({column}) = 'text' "
                                 f"AND {column} != :v ORDER BY {column} LIMIT 50", max_rows=50,
                                 params={"v": value})
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
    return question[:span[0]] + text + question[span[1]:]


def negatives(made: Made, span: tuple[int, int], shown: str, other: str) -> list[tuple[str, str]]:
    """(kind, question) for the edits that must never be served."""
    q = made.source.question
    out = [("second literal", with_text(q, span, f"{shown} or {other}")),
           ("second literal", with_text(q, span, f"{shown} and {other}")),
           ("second literal", with_text(q, span, f"{shown}, {other}")),
           ("negation", with_text(q, span, f"not {shown}"))]
    words = q.split()
    auxiliaries = {"is", "are", "was", "were", "do", "does", "did", "have", "has"}
    verbs = [i for i, w in enumerate(words) if w.lower() in auxiliaries]
    if verbs:
        out.append(("negation", " ".join([*words[:verbs[0] + 1], "not", *words[verbs[0] + 1:]])))
    if len(shown) > 3 and not shown[:1].isdigit():  # a value misspelt: no value of its column
        out.append(("near value", with_text(q, span, shown[:2] + shown[3:])))
    if shown[:1].isdigit():
        out += [("near value", with_text(q, span, f"{shown}.5")),
                ("different unit", with_text(q, span, f"{shown}%")),
                ("different unit", with_text(q, span, f"{shown} km")),
                ("different unit", with_text(q, span, f"{shown} thousand")),
                ("different unit", with_text(q, span, f"${shown}"))]
    return out


async def rows_of(db: Database, sql: str, cache: dict[str, QueryResult]) -> QueryResult:
    if sql not in cache:
        cache[sql] = await execute_for_comparison(db, sql, CompareLimits(timeout=30.0, max_rows=100_000))
    return cache[sql]


async def judge(db: Database, got: Consulted, gold_sql: str, cache: dict[str, QueryResult]) -> bool:
    """True when the verified answer's rows are the gold SQL's (Spider's rule: multiset, ordered when it
    orders)."""
    assert got.answer is not None
    gold = await rows_of(db, gold_sql, cache)
    if not gold.ok or got.answer.truncated:
        return False
    return results_match(gold.rows, got.answer.rows, rule=MatchRule.MULTISET,
                         ordered=has_top_level_order_by(gold_sql))


async def tiers(data: Path, workdir: Path) -> tuple[Figures, list[str]]:
    figures = Figures()
    refusals: list[str] = []
    engine = QueryEngine(EngineLimits(workers=2, query_timeout=30.0))
    try:
        for db_id, asked in sorted(load(data).items()):
            db_path = data / "database" / db_id / f"{db_id}.sqlite"
            if not db_path.is_file():
                figures.counts["databases missing"] += 1
                continue
            await one_database(Database.unruled(db_path, engine), db_id, asked, workdir, figures, refusals)
    finally:
        engine.close()
    return figures, refusals


async def one_database(db: Database, db_id: str, asked: list[Question], workdir: Path, figures: Figures,
                       refusals: list[str]) -> None:
    c, per = figures.counts, figures.per_db[db_id]
    names, columns = schema_names(await db.aschema())
    groups: dict[tuple[str, ...], list[Question]] = defaultdict(list)
    for q in asked:
        groups[shape(q.sql, names)].append(q)
    made: dict[tuple[str, ...], Made] = {}
    for key, members in groups.items():
        for q in members:
            template = await make_template(db, q, names, columns)
            if template is not None:
                made[key] = template
                break
    c["groups"] += len(groups)
    c["groups with 2 or more questions"] += sum(len(m) > 1 for m in groups.values())
    c["groups with a literal"] += sum(any(t == "?" for t in k) for k in groups)
    c["templates made"] += len(made)
    file = workdir / f"{db_id}.jsonl"
    file.write_text("".join(json.dumps(m.entry) + "\n" for m in made.values()), encoding="utf-8")
    library = VerifiedLibrary(file, db_id, report=refusals.append)
    snapshot = await library.acurrent(db)
    c["templates served"] += len(snapshot.templates)
    for entry in snapshot.templates:
        for slot in entry.template.slots if entry.template else ():
            c[f"slots of type {slot.kind.value}"] += 1
    cache: dict[str, QueryResult] = {}

    # Every question of the database: a group's other questions are the coverage.
    sources = {m.source for m in made.values()}
    for key, members in groups.items():
        template = made.get(key)
        for q in members:
            got = await consult(library, db, q.question, None, settings=SETTINGS)
            kind = ("template sources" if q in sources else "group others" if template is not None
                    else "questions without a template")
            c[f"{kind} asked"] += 1
            per[f"{kind} asked"] += 1
            if template is not None and kind == "group others" and _values(q, names, columns) != _values(
                    template.source, names, columns):
                c["group others with other literals than the template's (asked)"] += 1
                c["group others with other literals than the template's (served)"] += got.answer is not None
            if got.answer is None:
                miss = got.template_miss.value if got.template_miss else "none"
                c[f"{kind} miss: {miss}"] += 1
                per[f"{kind} miss: {miss}"] += 1
                if len(figures.examples[f"{kind}, {miss}"]) < 8:
                    figures.examples[f"{kind}, {miss}"].append(
                        f"{db_id}: {q.question!r}"
                        + (f" vs {template.entry['question']!r}" if template else ""))
                continue
            if await judge(db, got, q.sql, cache):
                c[f"{kind} verified, same rows"] += 1
                per[f"{kind} verified"] += 1
            else:
                c["false verified"] += 1
                figures.false_verified.append(f"{db_id}: {q.question!r} served {got.answer.sql!r} "
                                              f"{got.provenance.params if got.provenance else ''}")

    # Questions no one wrote: other values (gold: the literal changed), and negatives.
    for template in made.values():
        if not any(e.question == template.entry["question"] for e in snapshot.templates):
            continue
        q = template.source
        for name, literal, span in template.slots:
            spec = template.entry["params"][name]
            values = await other_values(db, literal, spec)
            for value in values:
                gold = q.sql[:literal.start] + sql_literal(value) + q.sql[literal.end:]
                for kind, text in spellings(value, q.question[span[0]:span[1]], spec["type"]):
                    question = with_text(q.question, span, text)
                    got = await consult(library, db, question, None, settings=SETTINGS)
                    c[f"{kind} asked"] += 1
                    per[f"{kind} asked"] += 1
                    if got.answer is None:
                        miss = got.template_miss.value if got.template_miss else "none"
                        c[f"{kind} miss: {miss}"] += 1
                        if len(figures.examples[f"{kind}, {miss}"]) < 5:
                            figures.examples[f"{kind}, {miss}"].append(f"{db_id}: {question!r}")
                    elif await judge(db, got, gold, cache):
                        c[f"{kind} verified, same rows"] += 1
                        per[f"{kind} verified"] += 1
                    else:
                        c["false verified"] += 1
                        served = got.provenance.params if got.provenance else ""
                        figures.false_verified.append(
                            f"{db_id}: {kind} {question!r} served {served} vs {gold!r}")
            shown = q.question[span[0]:span[1]]
            other = str(values[0]) if values else shown
            for kind, question in negatives(template, span, shown, other):
                got = await consult(library, db, question, None, settings=SETTINGS)
                c[f"negatives asked ({kind})"] += 1
                if got.answer is not None:
                    c["false verified"] += 1
                    figures.false_verified.append(f"{db_id}: negative ({kind}) {question!r} served "
                                                  f"{got.provenance.params if got.provenance else ''}")


def _values(q: Question, names: set[str], columns: dict[str, list[str]]) -> list[str | int | float]:
    return [literal.value for literal in literals(q.sql, names, columns)]


async def latency(data: Path, workdir: Path, repeats: int) -> dict[str, float]:
    """Server time of an exact hit, a template hit with an integer slot and one with a value slot."""
    questions = {q.question: q.sql for q in load(data)[LATENCY_DB]}
    db_path = data / "database" / LATENCY_DB / f"{LATENCY_DB}.sqlite"
    exact_q = "How many singers do we have?"
    entries = [
        {"question": exact_q, "sql": questions[exact_q], "database": LATENCY_DB},
        {"question": "What are all distinct countries where singers above age {age} are from?",
         "sql": "SELECT DISTINCT country FROM singer WHERE age > :age", "database": LATENCY_DB,
         "params": {"age": {"type": "integer"}}},
        {"question": "What is the average, minimum, and maximum age of all singers from {country}?",
         "sql": "SELECT avg(age), min(age), max(age) FROM singer WHERE country = :country",
         "database": LATENCY_DB, "params": {"country": {"type": "value", "column": "singer.Country"}}}]
    asks = {"exact": exact_q,
            "integer slot": "What are all distinct countries where singers above age 30 are from?",
            "value slot": "What is the average, minimum, and maximum age of all singers from netherlands?"}
    file = workdir / "latency.jsonl"
    file.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    fake = FakeServer(OraclePolicy(questions)).start()
    try:
        environ = {"XDG_CACHE_HOME": str(workdir / "cache")}
        settings = parse_settings(["--db", f"{LATENCY_DB}={db_path}", "--verified", f"{LATENCY_DB}={file}",
                                   "--ollama-host", fake.url, "--log-level", "WARNING"], environ)
        server = build_server(settings, environ=environ, backend_factory=make_backend)
        timings: dict[str, list[float]] = {kind: [] for kind in asks}
        async with Client(server) as client:
            for question in asks.values():
                await client.call_tool(TOOL, {"question": question})  # warm-up: schema, worker, connections
            for _ in range(repeats):
                for kind, question in asks.items():
                    started = time.perf_counter()
                    result = await client.call_tool(TOOL, {"question": question})
                    timings[kind].append(time.perf_counter() - started)
                    assert (result.structured_content or {}).get("status") == "verified", result.content
    finally:
        fake.stop()
    return {kind: 1000 * statistics.median(values) for kind, values in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "spider_dev",
                        help="Spider dev folder: dev.json and database/<db_id>/<db_id>.sqlite")
    parser.add_argument("--repeats", type=int, default=40, help="timed calls per latency case (default 40)")
    args = parser.parse_args()
    if not (args.data / "dev.json").is_file():
        print(f"skipped: {args.data / 'dev.json'} not found (Spider dev is not in ../shared/data; "
              "pass --data DIR)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        figures, refusals = anyio.run(tiers, args.data, Path(tmp))
        took = time.perf_counter() - started
        timing = anyio.run(latency, args.data, Path(tmp), args.repeats)
    c = figures.counts
    print(f"Spider dev ({args.data}), measured in {took:.0f} s")
    for key in sorted(c):
        print(f"  {key}: {c[key]}")
    print("coverage per database (served verified / asked: group others; new values; their other spellings):")
    for db_id, per in sorted(figures.per_db.items()):
        print(f"  {db_id}: {per['group others verified']}/{per['group others asked']}; "
              f"{per['new values verified']}/{per['new values asked']}; "
              f"{per['new values, other spellings verified']}/{per['new values, other spellings asked']}")
    others = c["group others asked"]
    served = c["group others verified, same rows"]
    print(f"group others: {served}/{others} served verified ({100 * served / max(others, 1):.1f}%); misses: "
          + ", ".join(f"{k.split(': ')[1]} {v}" for k, v in sorted(c.items())
                      if k.startswith("group others miss")))
    for kind in ("new values", "new values, other spellings"):
        asked, served = c[f"{kind} asked"], c[f"{kind} verified, same rows"]
        print(f"{kind}: {served}/{asked} served verified with the gold rows "
              f"({100 * served / max(asked, 1):.1f}%)")
    negatives = sum(v for k, v in c.items() if k.startswith("negatives asked"))
    total = sum(v for k, v in c.items() if k.endswith(" asked")) + negatives
    print(f"false verified: {c['false verified']} (goal 0) over {total} questions asked, {negatives} of them "
          "negatives")
    for line in figures.false_verified[:20]:
        print(f"  FALSE VERIFIED {line}")
    print(f"templates refused at load: {len(refusals)}")
    for line in refusals[:10]:
        print(f"  {line}")
    for kind, lines in figures.examples.items():
        print(f"examples of misses, {kind}:")
        for line in lines:
            print(f"  {line}")
    print(f"latency through the MCP tool ({LATENCY_DB}, {args.repeats} calls each, interleaved, after a "
          "warm-up), median ms:")
    for kind, value in timing.items():
        print(f"  {kind}: {value:.2f} ({value / timing['exact']:.2f}x the exact hit)")


if __name__ == "__main__":
    main()

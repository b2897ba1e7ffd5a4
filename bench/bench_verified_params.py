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
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from mcp import Client  # noqa: E402
from spider_templates import (  # noqa: E402  (beside this file)
    Made,
    Question,
    literal_values,
    load,
    make_template,
    negatives,
    other_values,
    schema_names,
    shape,
    spellings,
    sql_literal,
    with_text,
)

from agent.backends.registry import make_backend  # noqa: E402
from agent.episode import EpisodeSettings  # noqa: E402
from agent.evaluation.accuracy import MatchRule, has_top_level_order_by, results_match  # noqa: E402
from agent.sqlite import Database, QueryResult, WorkerLimits, WorkerPool  # noqa: E402
from agent.verified import Consulted, VerifiedLibrary, consult  # noqa: E402
from agent.voting import CompareLimits, execute_for_comparison  # noqa: E402
from mcp_server.app import build_server  # noqa: E402
from mcp_server.config.command_line import parse_settings  # noqa: E402
from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.policies import OraclePolicy  # noqa: E402

TOOL = "answer_sql_question"
SETTINGS = EpisodeSettings(result_rows=100_000, result_cell_chars=None, result_bytes=1 << 30)
LATENCY_DB = "concert_singer"


@dataclass
class Figures:
    counts: Counter[str] = field(default_factory=Counter)
    per_db: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    false_verified: list[str] = field(default_factory=list)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))


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
    return results_match(
        gold.rows, got.answer.rows, rule=MatchRule.MULTISET, ordered=has_top_level_order_by(gold_sql)
    )


async def tiers(data: Path, workdir: Path) -> tuple[Figures, list[str]]:
    figures = Figures()
    refusals: list[str] = []
    engine = WorkerPool(WorkerLimits(workers=2, query_timeout=30.0))
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


async def one_database(
    db: Database, db_id: str, asked: list[Question], workdir: Path, figures: Figures, refusals: list[str]
) -> None:
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
            kind = (
                "template sources"
                if q in sources
                else "group others"
                if template is not None
                else "questions without a template"
            )
            c[f"{kind} asked"] += 1
            per[f"{kind} asked"] += 1
            if (
                template is not None
                and kind == "group others"
                and literal_values(q, names, columns) != literal_values(template.source, names, columns)
            ):
                c["group others with other literals than the template's (asked)"] += 1
                c["group others with other literals than the template's (served)"] += got.answer is not None
            if got.answer is None:
                miss = got.template_miss.value if got.template_miss else "none"
                c[f"{kind} miss: {miss}"] += 1
                per[f"{kind} miss: {miss}"] += 1
                if len(figures.examples[f"{kind}, {miss}"]) < 8:
                    figures.examples[f"{kind}, {miss}"].append(
                        f"{db_id}: {q.question!r}" + (f" vs {template.entry['question']!r}" if template else "")
                    )
                continue
            if await judge(db, got, q.sql, cache):
                c[f"{kind} verified, same rows"] += 1
                per[f"{kind} verified"] += 1
            else:
                c["false verified"] += 1
                figures.false_verified.append(
                    f"{db_id}: {q.question!r} served {got.answer.sql!r} "
                    f"{got.provenance.params if got.provenance else ''}"
                )

    # Questions no one wrote: other values (gold: the literal changed), and negatives.
    for template in made.values():
        if not any(e.question == template.entry["question"] for e in snapshot.templates):
            continue
        q = template.source
        for name, literal, span in template.slots:
            spec = template.entry["params"][name]
            values = await other_values(db, literal, spec)
            for value in values:
                gold = q.sql[: literal.start] + sql_literal(value) + q.sql[literal.end :]
                for kind, text in spellings(value, q.question[span[0] : span[1]], spec["type"]):
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
                            f"{db_id}: {kind} {question!r} served {served} vs {gold!r}"
                        )
            shown = q.question[span[0] : span[1]]
            other = str(values[0]) if values else shown
            for kind, question in negatives(template, span, shown, other):
                got = await consult(library, db, question, None, settings=SETTINGS)
                c[f"negatives asked ({kind})"] += 1
                if got.answer is not None:
                    c["false verified"] += 1
                    figures.false_verified.append(
                        f"{db_id}: negative ({kind}) {question!r} served "
                        f"{got.provenance.params if got.provenance else ''}"
                    )


async def latency(data: Path, workdir: Path, repeats: int) -> dict[str, float]:
    """Server time of an exact hit, a template hit with an integer slot and one with a value slot."""
    questions = {q.question: q.sql for q in load(data)[LATENCY_DB]}
    db_path = data / "database" / LATENCY_DB / f"{LATENCY_DB}.sqlite"
    exact_q = "How many singers do we have?"
    entries = [
        {"question": exact_q, "sql": questions[exact_q], "database": LATENCY_DB},
        {
            "question": "What are all distinct countries where singers above age {age} are from?",
            "sql": "SELECT DISTINCT country FROM singer WHERE age > :age",
            "database": LATENCY_DB,
            "params": {"age": {"type": "integer"}},
        },
        {
            "question": "What is the average, minimum, and maximum age of all singers from {country}?",
            "sql": "SELECT avg(age), min(age), max(age) FROM singer WHERE country = :country",
            "database": LATENCY_DB,
            "params": {"country": {"type": "value", "column": "singer.Country"}},
        },
    ]
    asks = {
        "exact": exact_q,
        "integer slot": "What are all distinct countries where singers above age 30 are from?",
        "value slot": "What is the average, minimum, and maximum age of all singers from netherlands?",
    }
    file = workdir / "latency.jsonl"
    file.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    fake = FakeServer(OraclePolicy(questions)).start()
    try:
        environ = {"XDG_CACHE_HOME": str(workdir / "cache")}
        settings = parse_settings(
            [
                "--db",
                f"{LATENCY_DB}={db_path}",
                "--verified",
                f"{LATENCY_DB}={file}",
                "--ollama-host",
                fake.url,
                "--log-level",
                "WARNING",
            ],
            environ,
        )
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
    parser.add_argument(
        "--data",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "spider_dev",
        help="Spider dev folder: dev.json and database/<db_id>/<db_id>.sqlite",
    )
    parser.add_argument("--repeats", type=int, default=40, help="timed calls per latency case (default 40)")
    args = parser.parse_args()
    if not (args.data / "dev.json").is_file():
        print(
            f"skipped: {args.data / 'dev.json'} not found (Spider dev is not in ../shared/data; "
            "pass --data DIR)"
        )
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
        print(
            f"  {db_id}: {per['group others verified']}/{per['group others asked']}; "
            f"{per['new values verified']}/{per['new values asked']}; "
            f"{per['new values, other spellings verified']}/{per['new values, other spellings asked']}"
        )
    others = c["group others asked"]
    served = c["group others verified, same rows"]
    print(
        f"group others: {served}/{others} served verified ({100 * served / max(others, 1):.1f}%); misses: "
        + ", ".join(
            f"{k.split(': ')[1]} {v}" for k, v in sorted(c.items()) if k.startswith("group others miss")
        )
    )
    for kind in ("new values", "new values, other spellings"):
        asked, served = c[f"{kind} asked"], c[f"{kind} verified, same rows"]
        print(
            f"{kind}: {served}/{asked} served verified with the gold rows ({100 * served / max(asked, 1):.1f}%)"
        )
    negatives = sum(v for k, v in c.items() if k.startswith("negatives asked"))
    total = sum(v for k, v in c.items() if k.endswith(" asked")) + negatives
    print(
        f"false verified: {c['false verified']} (goal 0) over {total} questions asked, {negatives} of them "
        "negatives"
    )
    for line in figures.false_verified[:20]:
        print(f"  FALSE VERIFIED {line}")
    print(f"templates refused at load: {len(refusals)}")
    for line in refusals[:10]:
        print(f"  {line}")
    for kind, lines in figures.examples.items():
        print(f"examples of misses, {kind}:")
        for line in lines:
            print(f"  {line}")
    print(
        f"latency through the MCP tool ({LATENCY_DB}, {args.repeats} calls each, interleaved, after a "
        "warm-up), median ms:"
    )
    for kind, value in timing.items():
        print(f"  {kind}: {value:.2f} ({value / timing['exact']:.2f}x the exact hit)")


if __name__ == "__main__":
    main()

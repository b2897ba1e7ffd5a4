"""The verified library on questions nobody here wrote: Spider dev's paraphrase pairs and near misses.

    python bench/bench_verified.py [--data ../shared/data/spider_dev] [--repeats 30]

Issue 27 asks for, on Spider dev (1,034 questions over 20 databases, where most gold queries
come with two differently worded questions):
- one question of each same-SQL group goes in its database's library (every SQL group has one
  entry, so each library holds all of its database's distinct queries); the library is loaded
  through the real checks (guarded worker, refusals);
- the same-question tier: every library question asked again with its case, whitespace and
  final punctuation changed must be answered verified (goal: 100% hit rate); every negative must
  never get a verified answer whose result differs from its own gold result (the only acceptable
  number is 0). Negatives are (1) the 5 questions of the same database with another gold SQL
  that BM25 finds nearest to each library question (Spider's near-identical questions: "older
  than 30" / "older than 40"), asked with their own text, and (2) each library question with one
  meaning-changing edit: a number changed, a "not" added, a name's case-sensitive quote added;
- the similar tier: each paraphrase (the other question of a pair) is asked; recall@3 is the
  share whose pair's library entry is among the three similar questions listed (goal 70%);
- latency: one repeated question answered from the library against the full episode it
  replaces (a fake Ollama answering at once over real HTTP: list_tables, run_query, submit_sql),
  through the MCP tool of an in-process server on a Spider database, after a warm-up (the
  schema is cached); server time as the MCP client sees it, median and 95th percentile.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from mcp import Client  # noqa: E402

from agent.backends.registry import make_backend  # noqa: E402
from agent.episode import EpisodeSettings  # noqa: E402
from agent.evaluation.accuracy import MatchRule, has_top_level_order_by, results_match  # noqa: E402
from agent.sqlite import Database, QueryResult, WorkerLimits, WorkerPool  # noqa: E402
from agent.sqlite.text_index import TextIndex  # noqa: E402
from agent.verified import VerifiedLibrary, consult, normalise_question  # noqa: E402
from agent.verified.matching import query_terms  # noqa: E402
from agent.voting import CompareLimits, execute_for_comparison  # noqa: E402
from mcp_server.app import build_server  # noqa: E402
from mcp_server.config.command_line import parse_settings  # noqa: E402
from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.policies import OraclePolicy  # noqa: E402

TOOL = "answer_sql_question"
NEIGHBOURS = 5  # different-SQL questions nearest to each library entry, asked as negatives
LATENCY_DB = "concert_singer"


@dataclass(frozen=True)
class Question:
    db_id: str
    question: str
    sql: str
    group: int  # same database and same gold SQL (whitespace and case folded): same group


def load_questions(data: Path) -> list[Question]:
    """Spider dev's questions, each with the id of its same-SQL group."""
    raw = json.loads((data / "dev.json").read_text(encoding="utf-8"))
    groups: dict[tuple[str, str], int] = {}
    out = []
    for item in raw:
        key = (item["db_id"], " ".join(item["query"].split()).casefold())
        group = groups.setdefault(key, len(groups))
        out.append(Question(item["db_id"], item["question"], item["query"], group))
    return out


def surface_variants(question: str) -> list[str]:
    """The same question as the same-question rule sees it: case, whitespace, final punctuation."""
    bare = question.rstrip("?.! ")
    return [
        question.upper(),
        f"  {question.lower()}  ",
        bare,
        "\t".join(bare.split(" ")) + " ?!",
        question.casefold() + "...",
    ]


def meaning_variants(question: str) -> list[str]:
    """One edit each that changes the meaning: a number, a negation, a quoted name."""
    out = []
    number = re.search(r"\d+", question)
    if number:
        changed = str(int(number.group()) + 1)
        out.append(question[: number.start()] + changed + question[number.end() :])
    words = question.split()
    verbs = [
        i
        for i, w in enumerate(words)
        if w.lower() in {"is", "are", "was", "were", "do", "does", "did", "have", "has"}
    ]
    if verbs:
        i = verbs[0] + 1
        out.append(" ".join([*words[:i], "not", *words[i:]]))
    capital = next((w for w in words[1:] if w[:1].isupper()), None)
    if capital is not None:
        out.append(question.replace(capital, f"'{capital}'", 1))
    return out


async def same_result(db: Database, a: str, b: str, cache: dict[str, QueryResult]) -> bool:
    """True when the two SQL texts give the same rows (Spider's rule: multiset, order when b orders)."""
    results = []
    for sql in (a, b):
        if sql not in cache:
            cache[sql] = await execute_for_comparison(db, sql, CompareLimits(timeout=30.0))
        results.append(cache[sql])
    ra, rb = results
    if not (ra.ok and rb.ok):
        return False
    return results_match(rb.rows, ra.rows, rule=MatchRule.MULTISET, ordered=has_top_level_order_by(b))


async def tiers(data: Path, workdir: Path) -> dict[str, Any]:
    questions = load_questions(data)
    by_db: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        by_db[q.db_id].append(q)
    engine = WorkerPool(WorkerLimits(workers=2, query_timeout=30.0))
    settings = EpisodeSettings()
    figures: dict[str, Any] = defaultdict(int)
    refusals: list[str] = []
    false_verified: list[str] = []
    missing: list[str] = []
    try:
        for db_id, asked in sorted(by_db.items()):
            db_path = data / "database" / db_id / f"{db_id}.sqlite"
            if not db_path.is_file():
                missing.append(db_id)
                continue
            database = Database.unruled(db_path, engine)
            library_entries: dict[int, Question] = {}
            for q in asked:
                library_entries.setdefault(q.group, q)
            file = workdir / f"{db_id}.jsonl"
            file.write_text(
                "".join(
                    json.dumps({"question": q.question, "sql": q.sql, "database": db_id}) + "\n"
                    for q in library_entries.values()
                ),
                encoding="utf-8",
            )
            library = VerifiedLibrary(file, db_id, report=refusals.append)
            snapshot = await library.acurrent(database)
            served_groups = {g for g, q in library_entries.items() if snapshot.exact(q.question) is not None}
            figures["library entries"] += len(library_entries)
            figures["entries served"] += len(served_groups)
            cache: dict[str, QueryResult] = {}

            # Same-question tier, exact repeats.
            for group in served_groups:
                entry = library_entries[group]
                for variant in surface_variants(entry.question):
                    figures["exact repeats asked"] += 1
                    got = await consult(library, database, variant, None, settings=settings)
                    if got.answer is not None and got.answer.sql == entry.sql:
                        figures["exact repeats verified"] += 1

            # Same-question tier, negatives: the nearest questions with other SQL that are not
            # library entries themselves (asking an entry's own question is an exact repeat),
            # and meaning edits of every entry.
            others = [q for q in asked if library_entries[q.group] is not q]
            index = TextIndex([q.question for q in others])
            negatives: dict[str, Question] = {}
            for group, entry in library_entries.items():
                ranked = index.search(query_terms(entry.question), limit=len(others))
                near = [others[r.position] for r in ranked if others[r.position].group != group][:NEIGHBOURS]
                for q in near:
                    negatives[q.question] = q
            for q in negatives.values():
                figures["negatives asked (near neighbours)"] += 1
                got = await consult(library, database, q.question, None, settings=settings)
                if got.answer is None:
                    continue
                assert got.answer.sql is not None
                if await same_result(database, got.answer.sql, q.sql, cache):
                    figures["negatives verified with the same result"] += 1
                else:
                    figures["false verified"] += 1
                    false_verified.append(f"{db_id}: {q.question!r} got {got.answer.sql!r}")
            for entry in library_entries.values():
                for variant in meaning_variants(entry.question):
                    figures["negatives asked (meaning edits)"] += 1
                    got = await consult(library, database, variant, None, settings=settings)
                    if got.answer is not None:
                        figures["false verified"] += 1
                        false_verified.append(f"{db_id}: edited {variant!r} got {got.answer.sql!r}")

            # Similar tier: the other questions of each pair.
            for q in asked:
                partner = library_entries[q.group]
                if partner is q or q.group not in served_groups:
                    continue
                if normalise_question(partner.question) == normalise_question(q.question):
                    figures["pairs asking the same question twice"] += 1
                    continue
                figures["paraphrases asked"] += 1
                got = await consult(library, database, q.question, None, settings=settings)
                if got.answer is not None:
                    figures["paraphrases verified (same SQL)"] += 1
                    continue
                listed = [e.question for e in got.similar]
                if partner.question in listed[:1]:
                    figures["paraphrase partner top-1"] += 1
                if partner.question in listed[:3]:
                    figures["paraphrase partner top-3"] += 1
                figures["similar listed"] += len(listed)
            index.close()
    finally:
        engine.close()
    out = dict(figures)
    out["refusals"] = refusals
    out["false verified examples"] = false_verified[:10]
    out["databases missing"] = missing
    return out


async def latency(data: Path, workdir: Path, repeats: int) -> dict[str, float]:
    """Server time of a repeated question from the library, and of the full episode it replaces."""
    questions = [q for q in load_questions(data) if q.db_id == LATENCY_DB]
    question = questions[0]
    db_path = data / "database" / LATENCY_DB / f"{LATENCY_DB}.sqlite"
    file = workdir / "latency.jsonl"
    file.write_text(
        json.dumps({"question": question.question, "sql": question.sql, "database": LATENCY_DB}) + "\n",
        encoding="utf-8",
    )
    fake = FakeServer(OraclePolicy({q.question: q.sql for q in questions})).start()
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
        timings: dict[str, list[float]] = {"verified": [], "episode": []}
        async with Client(server) as client:
            for arguments, kind in (
                ({"question": question.question}, "verified"),
                ({"question": question.question, "verified": False}, "episode"),
            ):
                await client.call_tool(TOOL, arguments)  # warm-up: schema, worker, connections
                for _ in range(repeats):
                    started = time.perf_counter()
                    result = await client.call_tool(TOOL, arguments)
                    timings[kind].append(time.perf_counter() - started)
                    status = (result.structured_content or {}).get("status")
                    assert status == ("verified" if kind == "verified" else "submitted"), result.content
    finally:
        fake.stop()
    out = {}
    for kind, values in timings.items():
        values.sort()
        out[f"{kind} median ms"] = 1000 * statistics.median(values)
        out[f"{kind} p95 ms"] = 1000 * values[max(0, round(0.95 * len(values)) - 1)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "spider_dev",
        help="Spider dev folder: dev.json and database/<db_id>/<db_id>.sqlite",
    )
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per latency case (default 30)")
    args = parser.parse_args()
    if not (args.data / "dev.json").is_file():
        print(
            f"skipped: {args.data / 'dev.json'} not found (Spider dev is not in ../shared/data; "
            "pass --data DIR)"
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        figures = anyio.run(tiers, args.data, Path(tmp))
        took = time.perf_counter() - started
        timing = anyio.run(latency, args.data, Path(tmp), args.repeats)
    refusals = figures.pop("refusals")
    examples = figures.pop("false verified examples")
    missing = figures.pop("databases missing")
    print(
        f"Spider dev ({args.data}), tiers measured in {took:.0f} s"
        + (f"; databases missing: {', '.join(missing)}" if missing else "")
    )
    for key, value in figures.items():
        print(f"  {key}: {value}")
    asked, hit = figures.get("exact repeats asked", 0), figures.get("exact repeats verified", 0)
    paraphrases = figures.get("paraphrases asked", 0) - figures.get("paraphrases verified (same SQL)", 0)
    negatives = figures.get("negatives asked (near neighbours)", 0) + figures.get(
        "negatives asked (meaning edits)", 0
    )
    print(
        f"same-question tier: {hit}/{asked} exact repeats verified ({100 * hit / max(asked, 1):.1f}%); "
        f"{figures.get('false verified', 0)} false verified answers on {negatives} negatives (goal 0)"
    )
    top3 = figures.get("paraphrase partner top-3", 0)
    top1 = figures.get("paraphrase partner top-1", 0)
    print(
        f"similar tier: recall@3 {top3}/{paraphrases} = {100 * top3 / max(paraphrases, 1):.1f}% "
        f"(goal 70%), recall@1 {100 * top1 / max(paraphrases, 1):.1f}%, "
        f"{figures.get('similar listed', 0) / max(paraphrases, 1):.2f} listed per question"
    )
    print(f"library entries refused at load: {len(refusals)}")
    for line in refusals[:10]:
        print(f"  {line}")
    for line in examples:
        print(f"  FALSE VERIFIED {line}")
    print(f"latency through the MCP tool ({LATENCY_DB}, {args.repeats} calls each, after a warm-up):")
    for key, value in timing.items():
        print(f"  {key}: {value:.1f}")
    print(
        f"  a repeated question costs {timing['verified median ms'] / timing['episode median ms']:.2f}x "
        "the full episode with a model that answers at once (goal: verified <= 50 ms)"
    )


if __name__ == "__main__":
    main()

"""The owner's statements in the server's own process (agent/sqlite/_inline.py): how many run there,
whether each gives the worker's result, what it saves, and how long the event loop is held by what
the bounded connection sends to a worker.

    python bench/bench_owner_statements.py [--data ../shared/data/spider_dev] [--repeats 20]

Part 1, Spider dev's distinct gold SQL (the kind of SQL a verified library holds; 1,034 questions
over 20 databases), each run as the owner's (`owner_sql=True`) and as anybody's (a worker's):
the share answered in process, the statements whose result differs on its first run or any repeat
(the kept statement: rows, columns, cuts, what it read; the only acceptable number is 0), and the
median time of both for the statements answered in process.
Part 2, the query bombs of the test suite (tests/support/databases.py) as the owner's, on the test
suite's shop database they are written for: the longest a first attempt holds the event loop
before the worker takes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.sqlite import Database, HideRules, QueryResult, WorkerLimits, WorkerPool, create_database  # noqa: E402
from tests.support.databases import BOMBS  # noqa: E402
from tests.support.sqlite_files import SHOP_SQL  # noqa: E402

OPTIONS = {"max_rows": 50, "byte_budget": 20_000}  # an answer's limits (EpisodeSettings' defaults)


def _timeless(result: QueryResult) -> QueryResult:
    return replace(result, seconds=0.0)


async def spider_part(data: Path, pool: WorkerPool, repeats: int) -> None:
    """Part 1."""
    by_db: dict[str, set[str]] = {}
    for item in json.loads((data / "dev.json").read_text(encoding="utf-8")):
        if (data / "database" / item["db_id"] / f"{item['db_id']}.sqlite").is_file():  # some may be absent
            by_db.setdefault(item["db_id"], set()).add(item["query"])
    here = differ = worker_only = 0
    inline_times: list[float] = []
    worker_times: list[float] = []
    for db_id, queries in sorted(by_db.items()):
        with Database(data / "database" / db_id / f"{db_id}.sqlite", pool, hide=HideRules()) as db:
            for sql in sorted(queries):
                worker = await db.aquery(sql, **OPTIONS)
                inline = db._inline.run(
                    db._request(
                        sql, cell_limit=None, count_cap=None, timeout=None, reads=True, params=None, **OPTIONS
                    )
                )
                if inline is None:
                    worker_only += 1
                    continue
                here += 1
                runs = [inline]  # its first run in process, then each run of its kept statement
                for _ in range(repeats):
                    started = time.perf_counter()
                    runs.append(await db.aquery(sql, owner_sql=True, **OPTIONS))
                    inline_times.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    await db.aquery(sql, **OPTIONS)
                    worker_times.append(time.perf_counter() - started)
                differ += any(_timeless(run) != _timeless(worker) for run in runs)
    total = here + worker_only
    print(f"Spider dev: {total} distinct gold SQL over {len(by_db)} databases")
    print(f"  answered in process: {here} ({here / total:.1%}); sent to a worker: {worker_only}")
    print(
        f"  statements with a result in process (first run or a repeat) unlike the worker's: {differ} (goal 0)"
    )
    inline_ms, worker_ms = statistics.median(inline_times) * 1e3, statistics.median(worker_times) * 1e3
    print(
        f"  median per statement answered in process: {inline_ms:.3f} ms in process, "
        f"{worker_ms:.3f} ms through a worker ({inline_ms / worker_ms:.2f}x), {repeats} repeats each"
    )


async def bombs_part(pool: WorkerPool) -> None:
    """Part 2: how long each bomb's attempt in process holds the event loop."""
    print("Query bombs as the owner's, on the test suite's shop database:")
    path = create_database(Path(tempfile.mkdtemp()) / "shop.sqlite", SHOP_SQL)
    longest = 0.0
    for name, sql in BOMBS.items():
        with Database(path, pool, hide=HideRules()) as db:
            request = db._request(
                sql, cell_limit=None, count_cap=None, timeout=None, reads=True, params=None, **OPTIONS
            )
            started = time.perf_counter()
            kept = db._inline.run(request)
            held = time.perf_counter() - started
            longest = max(longest, held)
            print(f"  {name:30s} loop held {held * 1e3:7.2f} ms, then {'served' if kept else 'a worker'}")
    print(f"  longest: {longest * 1e3:.2f} ms (the in-process deadline is 20 ms)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "spider_dev")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if not (args.data / "dev.json").is_file():
        print(f"skipped: {args.data / 'dev.json'} not found (Spider dev is not in ../shared/data)")
        return
    pool = WorkerPool(WorkerLimits(workers=1, query_timeout=2.0))
    try:
        await spider_part(args.data, pool, args.repeats)
        await bombs_part(pool)
    finally:
        pool.close()


if __name__ == "__main__":
    anyio.run(main)

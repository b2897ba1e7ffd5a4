"""Latency of each exploration tool, run_query overhead against bare sqlite3, and bomb hold times.

    python bench/bench_tools.py [--repeat 200]

Goals (issue 2): each exploration tool p95 < 5 ms on bakerydemo and < 20 ms on 1,000 tables;
run_query overhead < 1 ms per query; every bomb released within deadline + 0.5 s. Also what
completing tables_read from the statement's program (`reads`, on for run_query and the answer)
adds to a query, on Chinook; and what printf() checked against the value cap costs per row.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.sqlite import Database, WorkerLimits, WorkerPool, create_database  # noqa: E402
from agent.tools import ToolSettings, run_tool  # noqa: E402
from tests.support.databases import BOMBS, SHOP_SQL  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "dbs"


def generate_wide_database(path: Path, tables: int = 1000) -> Path:
    """A database with `tables` tables, each pointing at the one before it."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t0000 (id INTEGER PRIMARY KEY, name TEXT)")
    for i in range(1, tables):
        conn.execute(
            f"CREATE TABLE t{i:04d} (id INTEGER PRIMARY KEY, name TEXT, score REAL, "
            f"parent_id INTEGER REFERENCES t{i - 1:04d}(id))"
        )
    for i in range(tables):
        conn.executemany(f"INSERT INTO t{i:04d} (id, name) VALUES (?, ?)", [(j, f"row {j}") for j in range(20)])
    conn.commit()
    conn.close()
    return path


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p95 in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


def time_calls(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    fn()  # warm: schema cache, worker start
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


def pick_tables(db: Database) -> tuple[str, str, str]:
    """A table with foreign keys, a table two hops away, and a text column of the first."""
    schema = db.schema()
    tables = [t for t in schema.tables if t.kind == "table"]
    start = max(tables, key=lambda t: (len(t.foreign_keys), t.name))
    far = start.foreign_keys[0].ref_table if start.foreign_keys else tables[-1].name
    hop = schema.find(far)
    if hop is not None and hop.foreign_keys:
        far = hop.foreign_keys[0].ref_table
    column = next(
        (c.name for c in start.columns if "CHAR" in c.type.upper() or "TEXT" in c.type.upper()),
        start.columns[0].name,
    )
    return start.name, far, column


def bench_database(label: str, path: Path, repeat: int) -> None:
    engine = WorkerPool(WorkerLimits())
    db = Database.unruled(path, engine)
    table, far, column = pick_tables(db)
    quoted = '"' + table.replace('"', '""') + '"'
    calls = {
        "list_tables": {},
        "describe_table": {"table_name": table},
        "foreign_keys": {"table_name": table},
        "join_path": {"table_a": table, "table_b": far},
        "sample_rows": {"table_name": table, "limit": 10},
        "distinct_values": {"table_name": table, "column_name": column, "limit": 20},
        "run_query": {"sql": f"SELECT * FROM {quoted} LIMIT 20"},
    }
    settings = ToolSettings()
    print(f"\n{label}: {len(db.schema().tables)} tables  (table {table!r}, join to {far!r})")
    print(f"  {'tool':<16} {'p50 ms':>8} {'p95 ms':>8}")
    for name, args in calls.items():
        p50, p95 = time_calls(lambda name=name, args=args: run_tool(db, name, args, settings), repeat)
        print(f"  {name:<16} {p50:8.3f} {p95:8.3f}")

    sql = f"SELECT * FROM {quoted} LIMIT 20"
    bare = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)
    bare_p50, _ = time_calls(lambda: bare.execute(sql).fetchall(), repeat)
    ours_p50, _ = time_calls(lambda: db.query(sql, max_rows=50), repeat)
    bare.close()
    print(
        f"  run_query overhead: bare sqlite3 p50 {bare_p50:.3f} ms, Database.query p50 "
        f"{ours_p50:.3f} ms, overhead {ours_p50 - bare_p50:.3f} ms per query"
    )
    engine.close()


# Statements of the shapes the model writes: a scan, a three-table join with ON, the same join
# with USING (what the program adds to the authorizer's reads), a correlated subquery.
READ_QUERIES = {
    "scan": "SELECT * FROM Track LIMIT 20",
    "join ON": "SELECT g.Name, sum(il.Quantity) FROM Genre g JOIN Track t ON t.GenreId = g.GenreId "
    "JOIN InvoiceLine il ON il.TrackId = t.TrackId GROUP BY g.Name",
    "join USING": "SELECT g.Name, sum(il.Quantity) FROM Genre g JOIN Track t USING (GenreId) "
    "JOIN InvoiceLine il USING (TrackId) GROUP BY g.Name",
    "subquery": "SELECT Name FROM Artist a WHERE EXISTS (SELECT 1 FROM Album al "
    "WHERE al.ArtistId = a.ArtistId AND al.Title LIKE 'G%')",
}


def bench_reads(path: Path, repeat: int) -> None:
    """Database.query p50 with and without `reads` (the statement's EXPLAIN, read in the worker)."""
    engine = WorkerPool(WorkerLimits())
    db = Database.unruled(path, engine)
    print("\ntables_read from the program (Chinook): Database.query p50, reads off / on")
    for name, sql in READ_QUERIES.items():
        samples: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeat + 1):  # alternated, so a busy spell on the machine hits both
            for reads in (False, True):
                start = time.perf_counter()
                db.query(sql, max_rows=50, reads=reads)
                samples[reads].append(time.perf_counter() - start)
        off, on = (statistics.median(samples[r][1:]) * 1000 for r in (False, True))
        print(f"  {name:<12} {off:8.3f} ms {on:8.3f} ms  {on - off:+.3f} ms ({on / off - 1:+.0%})")
    engine.close()


# printf() on every row of 20,000: the guard's checked printf (a call into SQLite's own on a
# private connection, `_formats`) against bare sqlite3; the same statement without printf, and
# the first statement that names printf (it opens the twin connection).
FORMAT_ROWS = 20_000
FORMAT_QUERIES = {
    "printf per row": "SELECT count(*) FROM n WHERE printf('%05d-%s', id, label) LIKE '%7%'",
    "no printf": "SELECT count(*) FROM n WHERE CAST(id AS TEXT) || '-' || label LIKE '%7%'",
}


def bench_formats(folder: Path, repeat: int) -> None:
    """Database.query p50 of a printf-heavy statement, bare sqlite3 against the guarded worker."""
    path = folder / "numbers.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE n (id INTEGER PRIMARY KEY, label TEXT)")
    conn.executemany("INSERT INTO n VALUES (?, ?)", [(i, f"row {i}") for i in range(FORMAT_ROWS)])
    conn.commit()
    conn.close()
    engine = WorkerPool(WorkerLimits())
    db = Database.unruled(path, engine)
    db.query("SELECT 1", max_rows=1)
    start = time.perf_counter()
    db.query("SELECT printf('%d', 1)", max_rows=1)
    first = time.perf_counter() - start
    print(f"\nprintf past the value cap fails (checked printf), {FORMAT_ROWS:,} rows: p50 ms")
    print(f"  first statement naming printf (opens the twin connection): {first * 1000:.1f} ms")
    bare = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)
    runs = max(3, repeat // 20)
    for name, sql in FORMAT_QUERIES.items():
        bare_p50, _ = time_calls(lambda sql=sql: bare.execute(sql).fetchall(), runs)
        ours_p50, _ = time_calls(lambda sql=sql: db.query(sql, max_rows=5), runs)
        print(
            f"  {name:<16} bare {bare_p50:8.2f}  guarded {ours_p50:8.2f}  ratio {ours_p50 / bare_p50:5.2f}  "
            f"(+{(ours_p50 - bare_p50) * 1000 / FORMAT_ROWS:.2f} us per row)"
        )
    bare.close()
    engine.close()


def bench_bombs(path: Path, deadline: float) -> None:
    engine = WorkerPool(WorkerLimits(query_timeout=deadline, kill_grace=0.3))
    db = Database.unruled(path, engine)
    db.query("SELECT 1", max_rows=1)
    print(f"\nbombs (deadline {deadline:g} s; goal: released within {deadline + 0.5:g} s)")
    for name, sql in BOMBS.items():
        start = time.perf_counter()
        result = db.query(sql, max_rows=5)
        held = time.perf_counter() - start
        start = time.perf_counter()
        after = db.query("SELECT 1", max_rows=1)
        recover = time.perf_counter() - start
        print(
            f"  {name:<28} held {held:6.3f} s  {result.status.value:<9} next query "
            f"{'ok' if after.ok else 'FAILED'} in {recover * 1000:6.1f} ms"
        )
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--deadline", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wide = generate_wide_database(Path(tmp) / "wide.sqlite")
        targets = [
            ("Chinook", DATA / "Chinook_Sqlite.sqlite"),
            ("bakerydemo", DATA / "wagtail_bakerydemo.sqlite"),
            ("generated 1,000 tables", wide),
        ]
        for label, path in targets:
            if path.exists():
                bench_database(label, path, args.repeat)
            else:
                print(f"\n{label}: skipped ({path} not found; ../shared/data is absent)")
        if targets[0][1].exists():
            bench_reads(targets[0][1], args.repeat)
        bench_formats(Path(tmp), args.repeat)
        bench_bombs(create_database(Path(tmp) / "shop.sqlite", SHOP_SQL), args.deadline)


if __name__ == "__main__":
    main()

"""The harness's own cost per episode with a zero-latency scripted model, and prompt size per round.

    python bench/bench_episode.py [--episodes 30]

A scripted model explores for all 6 tool turns (several calls per turn, one duplicate) and answers
in the final turn. Harness cost = wall time minus time spent inside the model backend.
Goal (issue 3): under 25 ms per 6-round episode.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.loop import run_episode  # noqa: E402
from agent.sqlite import Database  # noqa: E402
from tests.support.policies import PolicyBackend, ScriptPolicy, assistant_reply, fenced, tool_call  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "dbs"


def script_for(db: Database) -> ScriptPolicy:
    """Six exploring turns over real tables of `db`, then a final answer."""
    schema = db.schema()
    tables = [t for t in schema.tables if t.kind == "table" and t.foreign_keys] or list(schema.tables)
    a = tables[0]
    b = a.foreign_keys[0].ref_table if a.foreign_keys else schema.tables[-1].name
    col = a.columns[1].name if len(a.columns) > 1 else a.columns[0].name
    qa = '"' + a.name.replace('"', '""') + '"'
    sql = f"SELECT * FROM {qa} LIMIT 5"
    turns = [
        assistant_reply("List the tables.", tool_call("list_tables")),
        assistant_reply(
            "Look at two tables.",
            tool_call("describe_table", table_name=a.name),
            tool_call("describe_table", table_name=b),
            tool_call("describe_table", table_name=a.name),
        ),
        assistant_reply(
            "How do they join?",
            tool_call("join_path", table_a=a.name, table_b=b),
            tool_call("foreign_keys", table_name=a.name),
        ),
        assistant_reply("See some rows.", tool_call("sample_rows", table_name=a.name, limit=5)),
        assistant_reply(
            "Which values?", tool_call("distinct_values", table_name=a.name, column_name=col, limit=10)
        ),
        assistant_reply("Test it.", tool_call("run_query", sql=sql)),
    ]
    return ScriptPolicy(turns, final=assistant_reply("Answer.", fenced(sql, "sql")))


async def one_episode(db: Database, policy: ScriptPolicy) -> tuple[float, float, list[int]]:
    backend = PolicyBackend(policy, record=True)
    start = time.perf_counter()
    result = await run_episode("Show a few rows of the main table.", db, backend)
    wall = time.perf_counter() - start
    assert len(result.rounds) == 7, [r.index for r in result.rounds]
    return wall, result.model_seconds, [len(r.prompt) for r in backend.requests]


def bench(label: str, path: Path, episodes: int) -> None:
    with Database.unruled(path) as db:
        policy = script_for(db)
        anyio.run(one_episode, db, policy)  # warm: worker start, schema cache
        costs, walls = [], []
        sizes: list[int] = []
        for _ in range(episodes):
            wall, model, sizes = anyio.run(one_episode, db, policy)
            walls.append(wall)
            costs.append(wall - model)
    costs.sort()
    p95 = costs[min(len(costs) - 1, round(0.95 * (len(costs) - 1)))]
    print(f"\n{label}: {episodes} episodes of 6 tool turns + final turn")
    print(
        f"  harness cost per episode: median {statistics.median(costs) * 1000:.2f} ms, "
        f"p95 {p95 * 1000:.2f} ms (wall median {statistics.median(walls) * 1000:.2f} ms)"
    )
    print(
        "  prompt size per round (characters; ~4 per token): "
        + ", ".join(f"r{i + 1} {n:,}" for i, n in enumerate(sizes))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=30)
    args = parser.parse_args()
    for label, name in (("Chinook", "Chinook_Sqlite.sqlite"), ("bakerydemo", "wagtail_bakerydemo.sqlite")):
        path = DATA / name
        if path.exists():
            bench(label, path, args.episodes)
        else:
            print(f"{label}: skipped ({path} not found; ../shared/data is absent)")


if __name__ == "__main__":
    main()

"""What the model reads under each environment: characters and tokens per round, and token-budget ends.

    python bench/bench_environment.py [--limit N] [--skip-spider]

1. The authors' three published episodes (../shared/data/sqale_episodes) replayed call for call
   through the loop under `trained` and `rich`: the characters and tokens (4 characters a token)
   of each round's results turn, and of the whole prompt at the end.
2. Scripted Spider dev episodes under each environment: the share that hit the 12,288-token
   budget (stop reason token_budget). Two scripted models: the oracle of tests/support/policies.py
   (list_tables, run the gold SQL, submit) and an "explorer" shaped like the authors' episodes
   (batched and repeated calls over the gold query's tables for all six rounds, then the SQL as
   text in the final turn).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from agent.episode import EpisodeResult, EpisodeSettings, StopReason  # noqa: E402
from agent.evaluation import load_dataset  # noqa: E402
from agent.loop import run_episode  # noqa: E402
from agent.sqlite import Database, WorkerLimits, WorkerPool  # noqa: E402
from agent.tools import Environment  # noqa: E402
from tests.support.policies import (  # noqa: E402
    OraclePolicy,
    PolicyBackend,
    ScriptedReply,
    assistant_reply,
    is_final_turn,
    last_user_turn,
    round_number,
    tool_call,
)
from tests.support.sqale_episodes import SHARED, build_database, load_episodes, replay_policy  # noqa: E402

SPIDER = SHARED / "data" / "spider_dev"
ENVIRONMENTS = (Environment.TRAINED, Environment.RICH)


def tokens(chars: int) -> int:
    """Tokens at 4 characters a token."""
    return math.ceil(chars / 4)


async def replay(db: Database, episode: dict, environment: Environment) -> tuple[EpisodeResult, list[str]]:
    """The episode's calls through the loop; the result and every prompt sent."""
    backend = PolicyBackend(replay_policy(episode))
    result = await run_episode(
        episode["question"],
        db,
        backend,
        evidence=episode["hint"],
        settings=EpisodeSettings(environment=environment),
    )
    return result, [r.prompt for r in backend.requests]


def episodes_report() -> None:
    """Per round: the results turn's size under each environment."""
    episodes = load_episodes()
    if episodes is None:
        print("authors' episodes: skipped (../shared/data/sqale_episodes is absent)")
        return
    engine = WorkerPool(WorkerLimits(workers=1))
    with tempfile.TemporaryDirectory() as tmp:
        for episode in episodes:
            db = Database.unruled(build_database(episode, Path(tmp)), engine)
            sizes = {}
            for environment in ENVIRONMENTS:
                result, prompts = anyio.run(replay, db, episode, environment)
                sizes[environment] = (
                    [len(last_user_turn(p)) for p in prompts[1:]],
                    len(result.prompt),
                    result.stop_reason,
                )
            db.close()
            calls = [sum(c["n"] for c in r["calls"]) for r in episode["rounds"] if r["budget"] is not None]
            print(
                f"\n{episode['id']} ({episode['title']}, {episode['nTables']} tables): results turn "
                "per round, characters (tokens at 4 chars/token)"
            )
            print(f"  {'round':>5} {'calls':>5} | {'trained':>15} | {'rich':>15} | rich/trained")
            trained, rich = sizes[Environment.TRAINED][0], sizes[Environment.RICH][0]
            for i, (n, t, r) in enumerate(zip(calls, trained, rich, strict=False), start=1):
                print(f"  {i:>5} {n:>5} | {t:>7,} ({tokens(t):>5,}) | {r:>7,} ({tokens(r):>5,}) | {r / t:.2f}")
            for environment in ENVIRONMENTS:
                turns, whole, stop = sizes[environment]
                print(
                    f"  {environment:>7}: results turns {sum(turns):,} chars ({tokens(sum(turns)):,} "
                    f"tokens); whole prompt at the end {whole:,} chars ({tokens(whole):,} tokens); "
                    f"stop: {stop}"
                )
    engine.close()


class ExplorerPolicy:
    """Explores like the authors' episodes: batched, repeated calls on the gold query's tables."""

    def __init__(self, gold: dict[str, str], tables: dict[str, list[str]]) -> None:
        self.oracle = OraclePolicy(gold)
        self.gold, self.tables = gold, tables

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """Six rounds of exploration, then the gold SQL as text in the final turn."""
        question = self.oracle.question_in(prompt)
        sql, tables = self.gold[question], self.tables[question] or ["sqlite_master"]
        if is_final_turn(prompt):
            return ScriptedReply(assistant_reply("This looks correct.", sql))
        first = tables[0]
        rounds = {
            1: [
                tool_call("list_tables"),
                tool_call("list_tables"),
                tool_call("run_query", sql="SELECT * FROM sqlite_master LIMIT 20"),
            ],
            2: [
                c
                for t in tables
                for c in (
                    tool_call("describe_table", table_name=t),
                    tool_call("describe_table", table_name=t),
                    tool_call("run_query", sql=f'SELECT * FROM "{t}" LIMIT 10'),
                    tool_call("sample_rows", table_name=t, limit=10),
                )
            ],
            3: [
                c
                for t in tables
                for c in (
                    tool_call("foreign_keys", table_name=t),
                    tool_call("run_query", sql=f'SELECT COUNT(*) FROM "{t}"'),
                )
            ]
            + [tool_call("join_path", table_a=first, table_b=tables[-1])],
            4: [tool_call("run_query", sql=sql)] + [tool_call("describe_table", table_name=t) for t in tables],
            5: [tool_call("run_query", sql=sql), tool_call("run_query", sql=sql)],
            6: [tool_call("run_query", sql=sql)],
        }
        return ScriptedReply(assistant_reply("Explore.", *rounds.get(round_number(prompt), rounds[6])))


def spider_report(limit: int | None) -> None:
    """The share of scripted Spider episodes that end at the token budget, per environment."""
    if not SPIDER.is_dir():
        print(f"\nSpider: skipped ({SPIDER} is absent)")
        return
    dataset = load_dataset(SPIDER)
    examples = [e for e in dataset.examples if dataset.has_database(e.db_id)][:limit]
    engine = WorkerPool(WorkerLimits(workers=2))
    databases = {
        db_id: Database.unruled(dataset.database_path(db_id), engine)
        for db_id in sorted({e.db_id for e in examples})
    }
    gold = {e.question: e.gold_sql for e in examples}
    tables = {}
    for e in examples:
        read = databases[e.db_id].query(e.gold_sql, max_rows=1).tables_read
        tables[e.question] = sorted(t for t in read if not t.startswith("sqlite_"))
    print(f"\nSpider dev, {len(examples)} questions: episodes that ended at the 12,288-token budget")
    for label, policy in (("oracle", OraclePolicy(gold)), ("explorer", ExplorerPolicy(gold, tables))):
        for environment in ENVIRONMENTS:
            stops, used = anyio.run(_run_all, examples, databases, policy, environment)
            share = stops[StopReason.TOKEN_BUDGET] / len(examples)
            ended = ", ".join(f"{reason} {n}" for reason, n in sorted(stops.items()))
            print(
                f"  {label:>8} {environment:>7}: {share:6.1%} token budget "
                f"({stops[StopReason.TOKEN_BUDGET]}/{len(examples)}); episode tokens mean "
                f"{sum(used) / len(used):,.0f}, max {max(used):,}; ended by: {ended}"
            )
    for db in databases.values():
        db.close()
    engine.close()


async def _run_all(examples, databases, policy, environment) -> tuple[Counter, list[int]]:
    stops: Counter = Counter()
    used: list[int] = []
    settings = replace(EpisodeSettings(), environment=environment)
    limiter = anyio.CapacityLimiter(2)

    async def one(example) -> None:
        async with limiter:
            backend = PolicyBackend(policy, record=False)
            result = await run_episode(example.question, databases[example.db_id], backend, settings=settings)
            stops[result.stop_reason] += 1
            used.append(result.tokens)

    async with anyio.create_task_group() as tg:
        for example in examples:
            tg.start_soon(one, example)
    return stops, used


def main() -> int:
    """Print both reports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="only the first N Spider questions")
    parser.add_argument("--skip-spider", action="store_true", help="only the authors' episodes")
    args = parser.parse_args()
    episodes_report()
    if not args.skip_spider:
        spider_report(args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())

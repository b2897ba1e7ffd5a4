"""The same scripted episodes through the real Ollama and OpenAI-compatible clients over HTTP.

Both backends must send byte-identical prompts and give the same answers, and those answers
must equal the gold SQL's rows on the real Spider dev databases.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.backends.ollama import OllamaBackend
from agent.backends.openai_compat import OpenAICompletionsBackend
from agent.episode import EpisodeResult, EpisodeStatus
from agent.loop import run_episode
from agent.sqlite import Database, WorkerLimits, WorkerPool, create_database
from tests.conftest import SHARED_DATA
from tests.support.policies import (
    DEFAULT_MODEL,
    OraclePolicy,
    ScriptPolicy,
    assistant_reply,
    broken_json_call,
    fenced,
    tool_call,
)

SPIDER = SHARED_DATA / "spider_dev"
needs_spider = pytest.mark.needs_shared("spider_dev/dev.json")


def spider_params() -> list[Any]:
    """The questions as test parameters; without any, one parameter skipped with the reason (pytest's
    own for an empty list, "got empty parameter set", says nothing about what is missing)."""
    questions = spider_questions()
    if questions:
        return questions
    reason = (
        f"{SPIDER / 'dev.json'} is absent (../shared/data is not next to this clone)"
        if not (SPIDER / "dev.json").exists()
        else f"no Spider dev database under {SPIDER / 'database'}"
    )
    return [pytest.param(None, id="no-spider", marks=pytest.mark.skip(reason=reason))]


def spider_questions(per_db: int = 2, dbs: int = 6) -> list[dict[str, Any]]:
    """A few questions from each of the first Spider dev databases that exist here."""
    if not (SPIDER / "dev.json").exists():
        return []
    chosen: dict[str, list[dict[str, Any]]] = {}
    for item in json.loads((SPIDER / "dev.json").read_text()):
        path = SPIDER / "database" / item["db_id"] / f"{item['db_id']}.sqlite"
        if not path.exists():
            continue
        bucket = chosen.setdefault(item["db_id"], [])
        if len(bucket) < per_db and len(chosen) <= dbs:
            bucket.append(item)
    return [q for bucket in chosen.values() for q in bucket]


def gold_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def both(
    policy: Any, fake_ollama: Any, fake_openai: Any, question: str, db: Database
) -> tuple[tuple[EpisodeResult, list[str]], ...]:
    """Run one episode through each backend; return results and the prompts each server got."""
    ollama_server = fake_ollama(policy)
    openai_server = fake_openai(policy)
    runs = []
    for backend, server, path, key in (
        (OllamaBackend(DEFAULT_MODEL, host=ollama_server.url), ollama_server, "/api/generate", "prompt"),
        (
            OpenAICompletionsBackend(DEFAULT_MODEL, [openai_server.url], api_key=None),
            openai_server,
            "/v1/completions",
            "prompt",
        ),
    ):
        try:
            result = await run_episode(question, db, backend)
        finally:
            await backend.aclose()
        runs.append((result, [body[key] for body in server.bodies(path)]))
    return tuple(runs)


def comparable(result: EpisodeResult) -> tuple[Any, ...]:
    return (
        result.sql,
        result.status,
        result.stop_reason,
        result.columns,
        result.rows,
        result.row_count,
        [[(c.call, c.ok, c.text) for c in r.calls] for r in result.rounds],
        result.prompt,
    )


@needs_spider
@pytest.mark.parametrize("item", spider_params(), ids=lambda q: f"{q['db_id']}:{q['question'][:30]}")
def test_oracle_gives_gold_rows_through_both_backends(
    item: dict[str, Any], fake_ollama: Any, fake_openai: Any
) -> None:
    """Both backends send identical prompts and return the gold SQL's rows."""
    path = SPIDER / "database" / item["db_id"] / f"{item['db_id']}.sqlite"
    policy = OraclePolicy({item["question"]: item["query"]})
    engine = WorkerPool(WorkerLimits())
    try:
        db = Database.unruled(path, engine)
        (ours, sent_a), (theirs, sent_b) = anyio.run(
            both, policy, fake_ollama, fake_openai, item["question"], db
        )
    finally:
        engine.close()
    assert sent_a == sent_b
    assert comparable(ours) == comparable(theirs)
    assert ours.status is EpisodeStatus.SUBMITTED
    assert sorted(map(repr, ours.rows)) == sorted(map(repr, gold_rows(path, item["query"])[:50]))


def test_malformed_script_gives_the_same_fallback_through_both_backends(
    tmp_path: Path, fake_ollama: Any, fake_openai: Any
) -> None:
    """Broken calls, a duplicate and a rambling final turn end in the same fallback either way."""
    path = create_database(tmp_path / "t.sqlite", "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2);")
    turns = [
        assistant_reply("look", tool_call("list_tables"), tool_call("list_tables")),
        assistant_reply("broken", broken_json_call("run_query", sql="SELECT x FROM t")),
        assistant_reply("test", tool_call("run_query", sql="SELECT x FROM t WHERE x > 1")),
    ]
    policy = ScriptPolicy(turns, final=assistant_reply("I am not sure.", fenced("no sql here", "text")))
    with Database.unruled(path) as db:
        (ours, sent_a), (theirs, sent_b) = anyio.run(both, policy, fake_ollama, fake_openai, "q?", db)
    assert sent_a == sent_b
    assert comparable(ours) == comparable(theirs)
    assert (ours.status, ours.sql, ours.rows) == (
        EpisodeStatus.FALLBACK,
        "SELECT x FROM t WHERE x > 1",
        ((2,),),
    )

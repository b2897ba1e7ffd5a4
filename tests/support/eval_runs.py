"""Whole evaluation runs from synchronous test code, with scripted backends and their summaries."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import anyio

from agent.backends.base import SamplingSettings
from agent.evaluation.datasets import Dataset, Selection
from agent.evaluation.runner import EvalSettings, RunResult, evaluate
from agent.evaluation.summary import Summary, summarize
from agent.sqlite import create_database
from tests.support.policies import OraclePolicy, PolicyBackend, ScriptPolicy, assistant_reply, tool_call

MODEL = "scripted"
SHOP = """
    CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
    INSERT INTO customer VALUES (1, 'Ann', 'Oslo'), (2, 'Bob', 'Rome'), (3, 'Cy', 'Oslo');
"""
SHOP_QUESTIONS = {
    "How many customers are there?": "SELECT count(*) FROM customer",
    "Which customers live in Oslo?": "SELECT name FROM customer WHERE city = 'Oslo'",
    "Which cities are there?": "SELECT DISTINCT city FROM customer",
}


def spider_shop(folder: Path) -> Path:
    """`folder` made a Spider-layout set: SHOP_QUESTIONS on one database, shop (SHOP)."""
    create_database(folder / "database" / "shop" / "shop.sqlite", SHOP)
    records = [{"db_id": "shop", "question": q, "query": sql} for q, sql in SHOP_QUESTIONS.items()]
    (folder / "dev.json").write_text(json.dumps(records), encoding="utf-8")
    return folder


def oracle_for(dataset: Dataset) -> OraclePolicy:
    """An oracle knowing every gold query of the dataset."""
    return OraclePolicy({e.question: e.gold_sql for e in dataset.examples})


def submits(sql: str) -> ScriptPolicy:
    """Lists the tables, then submits `sql` whatever the question."""
    return ScriptPolicy(
        [
            assistant_reply("Look first.", tool_call("list_tables")),
            assistant_reply("Answer.", tool_call("submit_sql", sql=sql)),
        ]
    )


def backends_of(policy, created: list[PolicyBackend] | None = None):
    """A backend factory over `policy`, keeping the backends it makes."""

    def make(sampling: SamplingSettings) -> PolicyBackend:
        backend = PolicyBackend(policy, MODEL, sampling=sampling)
        if created is not None:
            created.append(backend)
        return backend

    return make


def run_eval(
    dataset: Dataset,
    selection: Selection,
    factory,
    out: Path,
    *,
    resume: bool = False,
    progress=None,
    **settings,
) -> RunResult:
    """evaluate() from synchronous test code."""
    return anyio.run(
        partial(
            evaluate,
            dataset,
            selection,
            factory,
            model=MODEL,
            out_path=out,
            resume=resume,
            settings=EvalSettings(**settings),
            progress=progress,
        )
    )


def summary_of(result: RunResult, dataset: Dataset, samples: int = 1) -> Summary:
    """The summary of a run's records."""
    return summarize(
        result.records,
        benchmark=dataset.benchmark.value,
        model=MODEL,
        samples=samples,
        selected=len(result.records),
    )


def verdicts(summary: Summary) -> dict:
    """Everything in a summary except wall-clock timing."""
    return summary.model_dump(exclude={"timing"})

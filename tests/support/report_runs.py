"""Evaluation runs with known outcomes for the HTML report's tests.

Five questions on two tiny Spider-layout databases, each answered by a scripted policy whose
outcome is fixed: right, wrong result, no SQL at all, right again, and a gold query that fails.
A second policy flips two answers so two runs can be compared.
Import as `from tests.support.report_runs import ...`.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import anyio

from agent.backends.base import SamplingSettings
from agent.evaluation.datasets import Dataset, load_dataset, select_examples
from agent.evaluation.records import TraceKind
from agent.evaluation.runner import EvalSettings, evaluate
from agent.sqlite import create_database
from tests.support.databases import CUSTOMER_ORDERS_SQL
from tests.support.policies import (
    OraclePolicy,
    PolicyBackend,
    ScriptedReply,
    ScriptPolicy,
    SeedSwitchPolicy,
    assistant_reply,
    first_user_turn,
    tool_call,
)

MODEL = "scripted"
ZOO = """
    CREATE TABLE animal (id INTEGER PRIMARY KEY, name TEXT, legs INTEGER);
    INSERT INTO animal VALUES (1, '<script>alert("cell")</script>', 4), (2, 'Kiwi', 2);
"""
HOSTILE = '<script>alert("question")</script>'
# (database, difficulty, question, gold SQL)
QUESTIONS = [
    ("shop", "easy", "How many customers are there?", "SELECT count(*) FROM customer"),
    ("shop", "easy", "Which customers live in Oslo?", "SELECT name FROM customer WHERE city = 'Oslo'"),
    (
        "shop",
        "hard",
        "What is the total of each customer's orders?",
        "SELECT c.name, sum(o.amount) FROM customer c JOIN orders o ON o.customer_id = c.id GROUP BY c.name",
    ),
    ("zoo", "medium", f"Which animals are there? {HOSTILE}", "SELECT name FROM animal"),
    ("zoo", "medium", "How many lions are there?", "SELECT count(*) FROM lion"),  # gold fails
]
WRONG_OSLO = "SELECT name FROM customer WHERE city = 'Rome'"


def write_dataset(root: Path) -> Dataset:
    """The Spider-layout folder: dev.json, dev_hardness.tsv and the two databases."""
    create_database(root / "database" / "shop" / "shop.sqlite", CUSTOMER_ORDERS_SQL)
    create_database(root / "database" / "zoo" / "zoo.sqlite", ZOO)
    records = [{"db_id": db, "question": q, "query": sql} for db, _, q, sql in QUESTIONS]
    (root / "dev.json").write_text(json.dumps(records), encoding="utf-8")
    rows = ["index\tdb_id\thardness", *(f"{i}\t{db}\t{level}" for i, (db, level, _, _) in enumerate(QUESTIONS))]
    (root / "dev_hardness.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return load_dataset(root)


class ByQuestion:
    """Delegates to the policy registered for the question in the prompt; the oracle otherwise."""

    def __init__(self, oracle: OraclePolicy, overrides: dict[str, object]) -> None:
        self.oracle = oracle
        self.overrides = overrides

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """The override's reply when the first user turn asks one of its questions."""
        asked = first_user_turn(prompt)
        for question, policy in self.overrides.items():
            if question in asked:
                return policy.reply(prompt, model)  # type: ignore[attr-defined]
        return self.oracle.reply(prompt, model)


def submits(sql: str) -> ScriptPolicy:
    """Lists the tables, then submits `sql`."""
    return ScriptPolicy(
        [
            assistant_reply("Look first.", tool_call("list_tables")),
            assistant_reply("Answer.", tool_call("submit_sql", sql=sql)),
        ]
    )


def never_answers() -> ScriptPolicy:
    """Lists the tables every round and answers the final turn with prose: no SQL at all."""
    return ScriptPolicy(
        [assistant_reply("Still looking.", tool_call("list_tables"))],
        final=assistant_reply(
            "I cannot tell.",
        ),
    )


def run_a_policy() -> ByQuestion:
    """Run A: Q0 right, Q1 wrong result, Q2 no SQL, Q3 right (Q4's gold fails)."""
    oracle = OraclePolicy({q: sql for _, _, q, sql in QUESTIONS})
    return ByQuestion(oracle, {QUESTIONS[1][2]: submits(WRONG_OSLO), QUESTIONS[2][2]: never_answers()})


def run_b_policy() -> ByQuestion:
    """Run B: Q0 wrong (flipped from A), Q1 right (flipped), Q2 no SQL, Q3 right."""
    oracle = OraclePolicy({q: sql for _, _, q, sql in QUESTIONS})
    return ByQuestion(oracle, {QUESTIONS[0][2]: submits("SELECT 42"), QUESTIONS[2][2]: never_answers()})


def run(
    dataset: Dataset,
    policy: object,
    out: Path,
    *,
    trace: TraceKind = TraceKind.FULL,
    samples: int = 1,
    early_stop: bool = True,
) -> Path:
    """Evaluate every question of `dataset` with `policy` (K samples) into `out`; returns `out`."""

    def factory(sampling: SamplingSettings) -> PolicyBackend:
        return PolicyBackend(policy, MODEL, sampling=sampling)  # type: ignore[arg-type]

    anyio.run(
        partial(
            evaluate,
            dataset,
            select_examples(dataset),
            factory,
            model=MODEL,
            out_path=out,
            settings=EvalSettings(trace=trace, samples=samples, early_stop=early_stop),
        )
    )
    return out


def voting_policy() -> SeedSwitchPolicy:
    """Three samples: seeds 0 and 1 answer as run A, seed 2 as run B. Q0 right 2 of 3, Q1 wrong 2 of
    3, Q2 no SQL at all, Q3 right 3 of 3 (Q4's gold fails)."""
    return SeedSwitchPolicy({0: run_a_policy(), 1: run_a_policy(), 2: run_b_policy()})

"""Whole evaluation runs on a small shop: gold errors, failures by kind, traces, dead backends, resume."""

from __future__ import annotations

import dataclasses
import json
from functools import partial
from pathlib import Path

import anyio
import pytest

from agent.backends.base import SamplingSettings
from agent.errors import ConfigError, DatabaseWorkerError
from agent.evaluation.datasets import Dataset, load_dataset, select_examples
from agent.evaluation.records import TraceKind, read_records
from agent.evaluation.runner import EvaluationAborted, evaluate
from agent.evaluation.scoring import QueryLimits
from agent.sqlite import create_database
from tests.support.databases import CUSTOMER_ORDERS_SQL
from tests.support.eval_runs import MODEL, backends_of, oracle_for, run_eval, submits, summary_of
from tests.support.policies import (
    PolicyBackend,
    ScriptedReply,
    ScriptPolicy,
    SeedSwitchPolicy,
    assistant_reply,
    first_user_turn,
    tool_call,
)

SHOP_QUESTIONS = [
    ("How many customers are there?", "SELECT count(*) FROM customer"),
    ("Which customers live in Oslo?", "SELECT name FROM customer WHERE city = 'Oslo'"),
    (
        "What is the total of each customer's orders?",
        "SELECT c.name, sum(o.amount) FROM customer c JOIN orders o ON o.customer_id = c.id GROUP BY c.name",
    ),
    ("List the customer names by id, last first.", "SELECT name FROM customer ORDER BY id DESC"),
]


def shop_dataset(root: Path, questions: list[tuple[str, str]] = SHOP_QUESTIONS) -> Dataset:
    """A Spider-layout folder with one small database."""
    create_database(root / "database" / "shop" / "shop.sqlite", CUSTOMER_ORDERS_SQL)
    records = [{"db_id": "shop", "question": q, "query": sql} for q, sql in questions]
    (root / "dev.json").write_text(json.dumps(records), encoding="utf-8")
    return load_dataset(root)


def test_failing_gold_is_counted_apart(tmp_path):
    """Gold SQL that fails is reported as a gold error, runs no episode, and leaves the denominator."""
    questions = [*SHOP_QUESTIONS[:2], ("Which planets?", "SELECT name FROM planet")]
    dataset = shop_dataset(tmp_path, questions)
    created: list[PolicyBackend] = []
    result = run_eval(
        dataset, select_examples(dataset), backends_of(oracle_for(dataset), created), tmp_path / "r.jsonl"
    )
    summary = summary_of(result, dataset)
    assert (summary.questions.evaluated, summary.questions.gold_errors, summary.questions.scored) == (3, 1, 2)
    assert (summary.accuracy.correct, summary.accuracy.ex, summary.gold_errors) == (2, 1.0, {"sql_error": 1})
    failed = result.records[2]
    assert (failed.gold_error, failed.correct, failed.samples, failed.gold.error) == (
        True,
        None,
        [],
        "no such table: planet",
    )
    assert not any("Which planets?" in first_user_turn(r.prompt) for r in created[0].requests)


def test_gold_over_the_row_cap_is_a_gold_error(tmp_path):
    """A gold result larger than --max-result-rows cannot be compared: a gold error of kind row_cap."""
    dataset = shop_dataset(tmp_path)
    result = run_eval(
        dataset,
        select_examples(dataset),
        backends_of(oracle_for(dataset)),
        tmp_path / "r.jsonl",
        limits=QueryLimits(max_rows=2),
    )
    assert [(r.key, r.gold.status) for r in result.records if r.gold_error] == [("3", "row_cap")]
    assert result.records[3].gold.error == (
        "the gold result has more than 2 rows; raise --max-result-rows to compare it"
    )
    assert summary_of(result, dataset).questions.scored == 3


def test_episode_failures_are_recorded_by_kind(tmp_path):
    """No SQL at all, SQL that fails, and SQL with too many rows are wrong, each with its kind."""
    dataset = shop_dataset(tmp_path)
    policy = SeedSwitchPolicy(
        {
            0: ScriptPolicy([assistant_reply("Hmm.", tool_call("list_tables"))], final="I do not know."),
            1: submits("SELECT * FROM customer, orders, customer AS c2"),
            2: oracle_for(dataset),
        }
    )
    result = run_eval(
        dataset,
        select_examples(dataset, limit=1),
        backends_of(policy),
        tmp_path / "r.jsonl",
        samples=3,
        limits=QueryLimits(max_rows=5),
    )
    samples = result.records[0].samples
    assert [(s.outcome.value, s.status) for s in samples] == [
        ("no_sql", "failed"),
        ("row_cap", "submitted"),
        ("correct", "submitted"),
    ]
    assert samples[1].error == "more than 5 rows; not compared"
    assert (result.records[0].voted_sample, result.records[0].correct) == (2, True)


def test_gold_table_coverage(tmp_path):
    """An episode that never looked at a table the gold reads does not cover the gold tables."""
    dataset = shop_dataset(tmp_path)
    sql = SHOP_QUESTIONS[2][1]
    narrow = ScriptPolicy(
        [
            assistant_reply(None, tool_call("list_tables")),
            assistant_reply(None, tool_call("submit_sql", sql="SELECT name, 1 FROM customer")),
        ]
    )
    broad = ScriptPolicy(
        [
            assistant_reply(
                None,
                tool_call("describe_table", table_name="customer"),
                tool_call("describe_table", table_name="orders"),
            ),
            assistant_reply(None, tool_call("submit_sql", sql=sql)),
        ]
    )
    selection = select_examples(dataset, offset=2, limit=1)
    result = run_eval(
        dataset,
        selection,
        backends_of(SeedSwitchPolicy({0: narrow, 1: broad})),
        tmp_path / "r.jsonl",
        samples=2,
    )
    record = result.records[0]
    assert record.gold.tables == ["customer", "orders"]
    assert [(s.tables_seen, s.saw_gold_tables) for s in record.samples] == [
        (["customer"], False),
        (["customer", "orders"], True),
    ]
    assert summary_of(result, dataset, 2).episodes.saw_gold_tables == 0.5


def test_results_line_holds_the_question_and_trace(tmp_path):
    """One JSON line per question with gold, prediction, verdict, counts and the episode trace."""
    dataset = shop_dataset(tmp_path)
    run_eval(dataset, select_examples(dataset, limit=1), backends_of(oracle_for(dataset)), tmp_path / "r.jsonl")
    line = json.loads((tmp_path / "r.jsonl").read_text(encoding="utf-8"))
    sample = line["samples"][0]
    assert {
        k: line[k]
        for k in (
            "key",
            "index",
            "benchmark",
            "model",
            "db_id",
            "question",
            "gold_sql",
            "predicted_sql",
            "status",
            "correct",
            "single_correct",
            "rounds",
            "tool_calls",
            "gold_error",
        )
    } == {
        "key": "0",
        "index": 0,
        "benchmark": "spider",
        "model": MODEL,
        "db_id": "shop",
        "question": "How many customers are there?",
        "gold_sql": "SELECT count(*) FROM customer",
        "predicted_sql": "SELECT count(*) FROM customer",
        "status": "submitted",
        "correct": True,
        "single_correct": 1.0,
        "rounds": 3,
        "tool_calls": 3,
        "gold_error": False,
    }
    assert line["gold"] | {"seconds": 0} == {
        "status": "ok",
        "error": None,
        "rows": 1,
        "ordered": False,
        "tables": ["customer"],
        "seconds": 0,
        "preview": {"columns": ["count(*)"], "rows": [[3]]},
    }
    assert sample["preview"] == {"columns": ["count(*)"], "rows": [[3]]}
    assert [[c["tool"] for c in r["calls"]] for r in sample["trace"]] == [
        ["list_tables"],
        ["run_query"],
        ["submit_sql"],
    ]
    assert sample["trace"][1]["calls"][0]["args"] == {"sql": "SELECT count(*) FROM customer"}
    assert line["tokens"] == sample["tokens"] > 0


@pytest.mark.parametrize(("kind", "texts"), [(TraceKind.FULL, True), (TraceKind.CALLS, False)])
def test_trace_kinds(tmp_path, kind, texts):
    """--trace full keeps tool result texts, calls drops them; reading back keeps traces on request."""
    dataset = shop_dataset(tmp_path)
    run_eval(
        dataset,
        select_examples(dataset, limit=1),
        backends_of(oracle_for(dataset)),
        tmp_path / "r.jsonl",
        trace=kind,
    )
    trace = read_records(tmp_path / "r.jsonl", traces=True)["0"].samples[0].trace
    assert [(r.index, r.calls[0].tool, r.calls[0].text is not None) for r in trace] == [
        (1, "list_tables", texts),
        (2, "run_query", texts),
        (3, "submit_sql", texts),
    ]
    assert read_records(tmp_path / "r.jsonl")["0"].samples[0].trace is None


def test_trace_none_keeps_no_rounds(tmp_path):
    """--trace none drops the rounds but keeps the counts."""
    dataset = shop_dataset(tmp_path)
    run_eval(
        dataset,
        select_examples(dataset, limit=1),
        backends_of(oracle_for(dataset)),
        tmp_path / "r.jsonl",
        trace=TraceKind.NONE,
    )
    line = json.loads((tmp_path / "r.jsonl").read_text(encoding="utf-8"))
    assert (line["samples"][0]["trace"], line["rounds"], line["tool_calls"]) == (None, 3, 3)


def test_order_sensitivity_follows_the_gold(tmp_path):
    """The gold's ORDER BY makes order count: the same rows in another order are wrong."""
    dataset = shop_dataset(tmp_path)
    selection = select_examples(dataset, offset=3, limit=1)
    policy = SeedSwitchPolicy({0: submits("SELECT name FROM customer ORDER BY id"), 1: oracle_for(dataset)})
    result = run_eval(dataset, selection, backends_of(policy), tmp_path / "r.jsonl", samples=2)
    assert result.records[0].gold.ordered is True
    assert [s.outcome.value for s in result.records[0].samples] == ["wrong_result", "correct"]


def test_dead_backend_stops_the_run_and_resume_retries(tmp_path):
    """Three unreachable episodes in a row stop the run; --resume reruns those questions."""
    dataset = shop_dataset(tmp_path)
    down = ScriptPolicy([ScriptedReply("connection refused", http_status=503)])
    out = tmp_path / "r.jsonl"
    with pytest.raises(EvaluationAborted) as info:
        run_eval(dataset, select_examples(dataset), backends_of(down), out)
    assert str(info.value) == (
        "stopped early: 3 episodes in a row failed in the model backend: connection refused. Questions in "
        "flight were not recorded; fix the backend and rerun with --resume to continue"
    )
    written = read_records(out)
    assert [(k, r.samples[0].outcome.value) for k, r in written.items()] == [
        ("0", "backend_unreachable"),
        ("1", "backend_unreachable"),
    ]
    result = run_eval(dataset, select_examples(dataset), backends_of(oracle_for(dataset)), out, resume=True)
    assert (result.resumed, result.ran, summary_of(result, dataset).accuracy.ex) == (0, 4, 1.0)


def test_missing_model_stops_at_once(tmp_path):
    """ModelNotFound will not fix itself: the first one stops the run."""
    dataset = shop_dataset(tmp_path)
    missing = ScriptPolicy([ScriptedReply('model "x" not found, try pulling it first', http_status=404)])
    with pytest.raises(EvaluationAborted) as info:
        run_eval(dataset, select_examples(dataset), backends_of(missing), tmp_path / "r.jsonl")
    assert str(info.value).startswith("stopped early: the backend refused the model or our credentials: ")
    assert read_records(tmp_path / "r.jsonl") == {}


class FailsOn:
    """Answers like `policy`, except an HTTP 500 for one question."""

    def __init__(self, policy, question: str) -> None:
        self.policy, self.question = policy, question

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        if self.question in first_user_turn(prompt):
            return ScriptedReply("internal error", http_status=500)
        return self.policy.reply(prompt, model)


def test_a_flaky_backend_error_is_a_value(tmp_path):
    """One failing request is recorded in its question's line and the run goes on."""
    dataset = shop_dataset(tmp_path)
    policy = FailsOn(oracle_for(dataset), SHOP_QUESTIONS[1][0])
    result = run_eval(dataset, select_examples(dataset), backends_of(policy), tmp_path / "r.jsonl")
    summary = summary_of(result, dataset)
    assert (summary.accuracy.correct, summary.backend_failures) == (3, 1)
    assert summary.episodes.outcomes == {"correct": 3, "backend_response": 1}
    assert (result.records[1].samples[0].error, result.records[1].status) == ("internal error", "backend_error")


def test_existing_results_need_resume(tmp_path):
    """A non-empty --out without --resume is refused rather than appended to."""
    dataset = shop_dataset(tmp_path)
    out = tmp_path / "r.jsonl"
    out.write_text("something\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        run_eval(dataset, select_examples(dataset), backends_of(oracle_for(dataset)), out)
    assert str(info.value) == (
        f"{out} already holds results; pass --resume to continue that run or give another --out"
    )


def test_resume_refuses_another_sample_count(tmp_path):
    """Resuming with other options than the file was written with is refused."""
    dataset = shop_dataset(tmp_path)
    out = tmp_path / "r.jsonl"
    run_eval(dataset, select_examples(dataset, limit=1), backends_of(oracle_for(dataset)), out)
    with pytest.raises(ConfigError) as info:
        run_eval(
            dataset, select_examples(dataset), backends_of(oracle_for(dataset)), out, resume=True, samples=2
        )
    assert str(info.value) == (
        f"{out}: its line for question 0 was written with benchmark spider, model "
        f"{MODEL}, 1 samples; this run uses spider, {MODEL}, 2; give another --out "
        "or the same options"
    )


def test_unreadable_database_is_recorded_and_the_run_goes_on(tmp_path):
    """A database file that is not SQLite makes its questions gold errors; other questions still run."""
    shop_dataset(tmp_path, SHOP_QUESTIONS[:1])  # the shop database; dev.json is rewritten below
    broken = tmp_path / "database" / "broken" / "broken.sqlite"
    broken.parent.mkdir()
    broken.write_text("not a database", encoding="utf-8")
    records = [
        {"db_id": "shop", "question": SHOP_QUESTIONS[0][0], "query": SHOP_QUESTIONS[0][1]},
        {"db_id": "broken", "question": "Anything?", "query": "SELECT 1"},
    ]
    (tmp_path / "dev.json").write_text(json.dumps(records), encoding="utf-8")
    dataset = load_dataset(tmp_path)
    result = run_eval(dataset, select_examples(dataset), backends_of(oracle_for(dataset)), tmp_path / "r.jsonl")
    assert [(r.key, r.gold_error, r.gold.status, r.correct) for r in result.records] == [
        ("0", False, "ok", True),
        ("1", True, "database_error", None),
    ]
    assert result.records[1].gold.error == (
        f"{broken}: not an SQLite 3 database (the file does not start with the SQLite header)"
    )


def test_our_own_errors_propagate_as_themselves(tmp_path):
    """A failure of our layers inside the run surfaces as that error, not wrapped in an ExceptionGroup."""
    dataset = shop_dataset(tmp_path)

    async def broken_loop(*args, **kwargs):
        raise DatabaseWorkerError("worker failed")

    with pytest.raises(DatabaseWorkerError) as info:
        anyio.run(
            partial(
                evaluate,
                dataset,
                select_examples(dataset),
                backends_of(oracle_for(dataset)),
                model=MODEL,
                out_path=tmp_path / "r.jsonl",
                episode_fn=broken_loop,
            )
        )
    assert str(info.value) == "worker failed"


@dataclasses.dataclass(frozen=True)
class WiderSampling(SamplingSettings):
    """SamplingSettings with a field added after eval was written (say min_p one day)."""

    min_p: float = 0.0


def test_every_sampling_field_reaches_every_backend_eval_makes(tmp_path):
    """Each sample's backend gets the run's sampling whole, its own seed the only change: a field
    added to SamplingSettings reaches every backend (and the run's settings record it)."""
    dataset = shop_dataset(tmp_path)
    created: list[PolicyBackend] = []
    given = WiderSampling(temperature=0.3, top_p=0.8, top_k=7, min_p=0.05)
    result = run_eval(
        dataset,
        select_examples(dataset, limit=1),
        backends_of(oracle_for(dataset), created),
        tmp_path / "r.jsonl",
        samples=3,
        seed=40,
        sampling=given,
    )
    assert [b.sampling for b in created] == [dataclasses.replace(given, seed=40 + k) for k in range(3)]
    run = result.records[0].run
    assert run is not None
    assert {k: run.settings[k] for k in ("temperature", "top_p", "top_k", "min_p", "seed")} == {
        "temperature": 0.3,
        "top_p": 0.8,
        "top_k": 7,
        "min_p": 0.05,
        "seed": 40,
    }

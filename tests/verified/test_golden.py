"""Golden questions on your own database: the file format, `golden add`, and `eval` over them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.commands.cli import main
from agent.errors import ConfigError
from agent.evaluation.golden_dataset import load_golden
from agent.golden_file import GoldenEntry, read_golden
from agent.sqlite import create_database
from tests.support.policies import OraclePolicy

SALES = """
    CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, amount INTEGER);
    INSERT INTO orders VALUES (1, 'Ann', 30), (2, 'Bob', 20), (3, 'Ann', 50);
"""
RIGHT_Q, RIGHT_SQL = "How many orders are there?", "SELECT count(*) FROM orders"
WRONG_Q, WRONG_SQL = (
    "Who spent the most?",
    ("SELECT customer FROM orders GROUP BY customer ORDER BY sum(amount) DESC LIMIT 1"),
)


@pytest.fixture
def sales(tmp_path: Path) -> Path:
    """A tiny sales database."""
    return create_database(tmp_path / "data" / "sales.db", SALES)


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_golden_file_with_one_right_and_one_wrong_answer_scores_50(
    sales: Path, tmp_path: Path, fake_ollama, capsys
) -> None:
    """eval FILE.jsonl --db sales=PATH: 50%, both questions in the results, tags as the groups."""
    golden = tmp_path / "my-questions.jsonl"
    golden.write_text(
        json.dumps({"question": RIGHT_Q, "sql": RIGHT_SQL, "database": "sales", "tags": ["counts"]})
        + "\n"
        + json.dumps(
            {
                "question": WRONG_Q,
                "sql": WRONG_SQL,
                "database": "sales",
                "evidence": "spent = sum of amount",
                "tags": ["ranking", "money"],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    # The model answers the second question with the smallest spender instead.
    wrong = WRONG_SQL.replace("DESC", "ASC")
    server = fake_ollama(OraclePolicy({RIGHT_Q: RIGHT_SQL, WRONG_Q: wrong}))
    out = tmp_path / "run.jsonl"
    code = main(["eval", str(golden), "--db", f"sales={sales}", "--ollama-host", server.url, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    records = lines(out)
    assert sorted(
        (r["question"], r["correct"], r["predicted_sql"], r["gold_sql"], r["tags"], r["benchmark"])
        for r in records
    ) == [
        (RIGHT_Q, True, RIGHT_SQL, RIGHT_SQL, ["counts"], "golden"),
        (WRONG_Q, False, wrong, WRONG_SQL, ["ranking", "money"], "golden"),
    ]
    summary = json.loads((tmp_path / "run.summary.json").read_text(encoding="utf-8"))
    assert (summary["accuracy"]["ex"], summary["benchmark"]) == (0.5, "golden")
    assert {tag: acc["ex"] for tag, acc in summary["by_difficulty"].items()} == {
        "counts": 1.0,
        "money": 0.0,
        "ranking": 0.0,
    }
    table = captured.out
    for row in (
        "overall  2   50.0%",
        "counts   1  100.0%",
        "money    1    0.0%",
        "ranking  1    0.0%",
        "sales     2  50.0%",
    ):
        assert row in table, table
    assert captured.err.startswith(f"golden: 2 questions from {golden}; ")


def test_database_may_be_a_path_next_to_the_file(sales: Path, tmp_path: Path) -> None:
    """A `database` that is no --db alias is a file relative to the golden file."""
    golden = tmp_path / "q.jsonl"
    golden.write_text(
        json.dumps({"question": "q", "sql": "SELECT 1", "database": "data/sales.db"}) + "\n", encoding="utf-8"
    )
    dataset = load_golden(golden, {})
    assert dataset.database_path("data/sales.db") == tmp_path / "data" / "sales.db"
    assert dataset.has_database("data/sales.db")


def test_bad_golden_files_say_which_line_and_how_to_fix(tmp_path: Path) -> None:
    """A line without sql, an unknown field, an unknown database: one message each."""
    golden = tmp_path / "q.jsonl"
    for text, message in [
        (
            '{"question": "q", "database": "d"}\n',
            "line 1 is not a golden question (no sql); each line is a JSON object like",
        ),
        (
            '{"question": "q", "sql": "SELECT 1", "database": "d", "dificulty": 1}\n',
            "line 1 is not a golden question (unknown field dificulty)",
        ),
        (
            '{"question": "q", "sql": "SELECT 1", "database": "shop"}\n',
            "question 1 names database 'shop', which is neither a --db alias (none given) nor a "
            "file next to the question file; pass --db shop=PATH",
        ),
    ]:
        golden.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            load_golden(golden, {})
        assert message in str(info.value)


def test_golden_add_runs_the_sql_and_stores_the_row_count(sales: Path, tmp_path: Path, capsys) -> None:
    """golden add appends a checked entry with its row count; the same question is not added twice."""
    golden = tmp_path / "golden.jsonl"
    argv = [
        "golden",
        "add",
        "--db",
        str(sales),
        "--file",
        str(golden),
        "--tag",
        "counts",
        "--by",
        "ann",
        RIGHT_Q,
        RIGHT_SQL,
    ]
    assert main(argv) == 0
    assert main(argv) == 0
    assert (
        main(
            [
                "golden",
                "add",
                "--db",
                f"sales={sales}",
                "--file",
                str(golden),
                "--by",
                "bob",
                "Which orders are over 25?",
                "SELECT id FROM orders WHERE amount > 25",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines() == [
        f"added to {golden}: {RIGHT_Q!r} on data/sales.db (1 row)",
        f"already in {golden}: {RIGHT_Q!r} on data/sales.db",
        f"added to {golden}: 'Which orders are over 25?' on sales (2 rows)",
    ]
    added = lines(golden)
    assert [datetime.fromisoformat(str(line.pop("added_at"))).tzinfo for line in added] == [UTC, UTC]
    assert added == [
        {
            "question": RIGHT_Q,
            "sql": RIGHT_SQL,
            "database": "data/sales.db",
            "tags": ["counts"],
            "row_count": 1,
            "added_by": "ann",
        },
        {
            "question": "Which orders are over 25?",
            "sql": "SELECT id FROM orders WHERE amount > 25",
            "database": "sales",
            "row_count": 2,
            "added_by": "bob",
        },
    ]
    assert [e.database for e in read_golden(golden)] == ["data/sales.db", "sales"]


def test_golden_add_refuses_sql_that_fails(sales: Path, tmp_path: Path, capsys) -> None:
    """Failing or writing SQL is refused with SQLite's reason; nothing is appended."""
    golden = tmp_path / "golden.jsonl"
    assert (
        main(
            [
                "golden",
                "add",
                "--db",
                str(sales),
                "--file",
                str(golden),
                "Total?",
                "SELECT sum(amont) FROM orders",
            ]
        )
        == 1
    )
    assert main(["golden", "add", "--db", str(sales), "--file", str(golden), "Wipe", "DELETE FROM orders"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"sqale-agent golden add: the SQL failed on {sales}: no such column: amont; fix it (it "
        "must run and return the right rows) before adding it",
        f"sqale-agent golden add: the SQL failed on {sales}: not allowed: DELETE; only reading "
        "statements (SELECT / WITH) are allowed; fix it (it must run and return the right rows) "
        "before adding it",
    ]
    assert not golden.exists()


def test_golden_add_from_log_turns_answers_into_candidates(sales: Path, tmp_path: Path, capsys) -> None:
    """Answered questions of an episode log become from-log candidates; failures are skipped."""
    log = tmp_path / "episodes.jsonl"
    log.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {
                    "question": RIGHT_Q,
                    "database": "sales",
                    "status": "submitted",
                    "sql": RIGHT_SQL,
                    "evidence": None,
                },
                {"question": "broken", "database": "sales", "status": "failed", "sql": None},
                {"question": "gone", "database": "sales", "status": "fallback", "sql": "SELECT 1"},
                {
                    "question": "stale",
                    "database": "sales",
                    "status": "final_answer",
                    "sql": "SELECT nope FROM orders",
                },
                {"question": "elsewhere", "database": "crm", "status": "submitted", "sql": "SELECT 1"},
                {"question": "error", "database": "sales", "status": "error", "error": "x"},
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    golden = tmp_path / "candidates.jsonl"
    assert (
        main(
            [
                "golden",
                "add",
                "--from-log",
                str(log),
                "--db",
                f"sales={sales}",
                "--file",
                str(golden),
                "--by",
                "ann",
            ]
        )
        == 0
    )
    added = lines(golden)
    assert isinstance(added[0].pop("added_at"), str)
    assert added == [
        {
            "question": RIGHT_Q,
            "sql": RIGHT_SQL,
            "database": "sales",
            "tags": ["from-log"],
            "row_count": 1,
            "added_by": "ann",
        }
    ]
    assert capsys.readouterr().out == (
        f"1 candidate question added to {golden} (tag from-log) of the 6 questions in {log}; 1 left "
        "out: no --db crm=PATH; 3 left out: not answered (failed, or only a fallback); 1 left out: their "
        "SQL fails now. The SQL is the model's: check each one, fix or delete it, and drop the from-log "
        "tag once it is known good (a verified library serves no entry still tagged so).\n"
    )
    assert GoldenEntry.model_validate(lines(golden)[0]).tags == ("from-log",)
    assert main(["golden", "add", "--from-log", str(log), "--db", f"sales={sales}", "--file", str(golden)]) == 0
    assert capsys.readouterr().out == (
        f"0 candidate questions added to {golden} (tag from-log) of the 6 questions in {log}; 1 left "
        f"out: already in {golden}; 1 left out: no --db crm=PATH; 3 left out: not answered (failed, or "
        "only a fallback); 1 left out: their SQL fails now.\n"
    )


def test_golden_add_from_an_empty_log_says_why_nothing_was_added(tmp_path: Path, capsys) -> None:
    """A log with no question (empty, or not an episode log): 0 added, and that the file holds none."""
    log = tmp_path / "episodes.jsonl"
    log.write_text('{"not": "an episode"}\n', encoding="utf-8")
    golden = tmp_path / "golden.jsonl"
    assert main(["golden", "add", "--from-log", str(log), "--file", str(golden)]) == 0
    assert capsys.readouterr().out == (
        f"0 candidate questions added to {golden} (tag from-log): {log} holds no question; give the "
        "file the server writes with --episode-log.\n"
    )


def test_golden_add_param_writes_a_template_checked_with_sample_values(
    sales: Path, tmp_path: Path, capsys
) -> None:
    """--param NAME=TYPE[:ARG]: the entry gets typed params, its SQL runs with a sample of each first."""
    golden = tmp_path / "g.jsonl"
    code = main(
        [
            "golden",
            "add",
            "--db",
            f"sales={sales}",
            "--file",
            str(golden),
            "--by",
            "ann",
            "--param",
            "who=value:orders.customer",
            "--param",
            "n=top:1..10",
            "Top {n} orders of {who}?",
            "SELECT id FROM orders WHERE customer = :who LIMIT :n",
        ]
    )
    assert (code, capsys.readouterr().out.strip()) == (
        0,
        (
            f"added to {golden}: 'Top {{n}} orders of {{who}}?' on sales (1 row with n = 1, who = 'Ann'; a "
            "template: each question it fits is answered with its own values)"
        ),
    )
    assert [{k: v for k, v in line.items() if k != "added_at"} for line in lines(golden)] == [
        {
            "question": "Top {n} orders of {who}?",
            "sql": "SELECT id FROM orders WHERE customer = :who LIMIT :n",
            "database": "sales",
            "added_by": "ann",
            "params": {
                "who": {"type": "value", "column": "orders.customer"},
                "n": {"type": "top", "min": 1, "max": 10},
            },
        }
    ]


@pytest.mark.parametrize(
    ("params", "question", "sql", "said"),
    [
        (
            ["n=integer:x..3"],
            "Orders over {n}?",
            "SELECT :n",
            "--param n=integer:x..3: bounds are numbers, e.g. n=integer:1..100",
        ),
        (
            ["m=month:1..3"],
            "Orders in {m}?",
            "SELECT :m",
            "--param m=month:1..3: a month parameter takes no min or max; only integer, number, year, top do",
        ),
        (
            ["m=weekday"],
            "Orders in {m}?",
            "SELECT :m",
            "--param m=weekday: type: Input should be 'integer', "
            "'number', 'year', 'month', 'date', 'value' or 'top'",
        ),
        (
            ["m"],
            "Orders in {m}?",
            "SELECT :m",
            "--param m: give NAME=TYPE[:ARG], e.g. --param month=month, --param "
            "n=top:1..100 or --param genre=value:Genre.Name",
        ),
        (
            [],
            "Orders in {m}?",
            "SELECT :m",
            "not added: its SQL binds :m, but the entry declares no params; "
            'declare each parameter in "params" and write it in the question as '
            "{name}",
        ),
        (
            ["m=month"],
            "Orders in March?",
            "SELECT :m",
            "not added: params declares m, which its question does not write as {m}",
        ),
    ],
)
def test_golden_add_refuses_a_param_or_template_that_cannot_work(
    sales: Path, tmp_path: Path, params: list[str], question: str, sql: str, said: str, capsys
) -> None:
    """A malformed --param, or slots, params and SQL that disagree: nothing written, one line why."""
    golden = tmp_path / "g.jsonl"
    code = main(
        [
            "golden",
            "add",
            "--db",
            f"sales={sales}",
            "--file",
            str(golden),
            *[f"--param={p}" for p in params],
            question,
            sql,
        ]
    )
    assert (code, capsys.readouterr().err, golden.exists()) == (1, f"sqale-agent golden: {said}\n", False)


def test_golden_add_refuses_a_template_whose_column_or_sql_fails(sales: Path, tmp_path: Path, capsys) -> None:
    """A value column that does not exist fails (never read as its own name); so does SQL failing a sample."""
    golden = tmp_path / "g.jsonl"
    assert (
        main(
            [
                "golden",
                "add",
                "--db",
                str(sales),
                "--file",
                str(golden),
                "--param",
                "who=value:orders.nme",
                "Orders of {who}?",
                "SELECT count(*) FROM orders WHERE customer = :who",
            ]
        )
        == 1
    )
    assert (
        main(
            [
                "golden",
                "add",
                "--db",
                str(sales),
                "--file",
                str(golden),
                "--param",
                "n=integer",
                "Orders over {n}?",
                "SELECT count(*) FROM order WHERE amount > :n",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": the SQL failed on ")[1] for line in err] == [
        f"{sales}: its parameter who is a value of orders.nme, but reading that column fails: no such column: "
        "orders.nme; fix it (it must run and return the right rows) before adding it",
        f'{sales}: near "order": syntax error; fix it (it must run and return the right rows) before adding it',
    ]
    assert not golden.exists()


def test_eval_leaves_templates_out_and_says_so(sales: Path, tmp_path: Path, capsys) -> None:
    """A golden file holding templates is still a question set: its plain questions, and a line why."""
    golden = tmp_path / "g.jsonl"
    golden.write_text(
        json.dumps({"question": RIGHT_Q, "sql": RIGHT_SQL, "database": "sales"})
        + "\n"
        + json.dumps(
            {
                "question": "Orders over {n}?",
                "sql": "SELECT :n",
                "database": "sales",
                "params": {"n": {"type": "integer"}},
            }
        )
        + "\n",
        encoding="utf-8",
    )
    said: list[str] = []
    dataset = load_golden(golden, {"sales": sales}, report=said.append)
    assert [e.question for e in dataset.examples] == [RIGHT_Q]
    assert said == [
        f"{golden}: 1 of its entries are templates (with params), left out: a template is no "
        "question to ask; eval measures the model on plain questions"
    ]

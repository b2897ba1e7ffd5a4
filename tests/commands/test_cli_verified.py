"""`sqale-agent ask --verified` and `eval --verified --verified-hints` against the fake Ollama."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.commands.cli import main
from agent.sqlite import create_database
from tests.support.policies import OraclePolicy, first_user_turn

SHOP = """
    CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, amount INTEGER);
    INSERT INTO orders VALUES (1, 'Ann', 30), (2, 'Bob', 20), (3, 'Ann', 50);
"""
COUNT_Q, COUNT_SQL = "How many orders are there?", "SELECT count(*) FROM orders"
TOTAL_Q, TOTAL_SQL = "What is the total amount of all orders?", "SELECT sum(amount) FROM orders"
SIMILAR_Q = "What is the total amount of the orders of Ann?"
SIMILAR_SQL = "SELECT sum(amount) FROM orders WHERE customer = 'Ann'"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A tiny shop database."""
    return create_database(tmp_path / "shop.db", SHOP)


class QuestionLineOracle(OraclePolicy):
    """The oracle, finding its question in the `Question:` line only (hints quote other questions)."""

    def question_in(self, prompt: str) -> str:
        asked = first_user_turn(prompt).split("\nEvidence:")[0]
        return next(q for q in self._questions if q in asked)


def write_library(path: Path, *entries: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def prompts(fake: Any) -> list[str]:
    return [body["prompt"] for body in fake.bodies("/api/generate")]


def test_ask_answers_a_repeated_question_from_the_library_without_the_model(
    shop: Path, tmp_path: Path, fake_ollama: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """ask --verified FILE: the library's SQL and rows, where they come from, no request to the model."""
    fake = fake_ollama(OraclePolicy({}))
    library = write_library(
        tmp_path / "lib.jsonl",
        {
            "question": COUNT_Q,
            "sql": COUNT_SQL,
            "database": "shop",
            "added_by": "ann",
            "added_at": "2025-01-02T10:00:00+00:00",
        },
    )
    assert (
        main(
            [
                "ask",
                "--db",
                str(shop),
                "--verified",
                str(library),
                "--ollama-host",
                fake.url,
                "HOW MANY ORDERS ARE THERE",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("status: verified (verified_answer); 0 rounds, 0 tool calls")
    assert f"```sql\n{COUNT_SQL}\n```" in out and "3" in out
    assert out.rstrip().endswith(
        'Verified answer: the SQL of lib.jsonl line 1 ("How many orders are there?", added by ann on '
        "2025-01-02T10:00:00+00:00), run now on the current data; no model was asked. Leave out "
        "--verified for the model's own answer."
    )
    assert prompts(fake) == []
    assert (
        main(
            [
                "ask",
                "--json",
                "--db",
                str(shop),
                "--verified",
                f"shop={library}",
                "--ollama-host",
                fake.url,
                COUNT_Q,
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert (data["status"], data["rows"], data["verified"]["line"], data["verified"]["added_by"]) == (
        "verified",
        [[3]],
        1,
        "ann",
    )


def test_ask_answers_a_question_fitting_a_template_with_the_values_it_read(
    shop: Path, tmp_path: Path, fake_ollama: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """ask --verified: a template's SQL run with the question's values, a line saying which, --json's params."""
    fake = fake_ollama(OraclePolicy({}))
    library = write_library(
        tmp_path / "lib.jsonl",
        {
            "question": "What is the total amount of the orders of {who}?",
            "database": "shop",
            "sql": "SELECT sum(amount) FROM orders WHERE customer = :who",
            "params": {"who": {"type": "value", "column": "orders.customer"}},
        },
    )
    assert (
        main(
            [
                "ask",
                "--db",
                str(shop),
                "--verified",
                str(library),
                "--ollama-host",
                fake.url,
                "What is the total amount of the orders of ann?",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.rstrip().splitlines()
    assert out[-2:] == [
        'Read from the question: {who} = "Ann" (from "ann").',
        'Verified answer: the SQL of lib.jsonl line 1 ("What is the total amount of the orders of {who}?"), '
        "run now on the current data; no model was asked. Leave out --verified for the model's own answer.",
    ]
    assert (
        main(
            [
                "ask",
                "--json",
                "--db",
                str(shop),
                "--verified",
                str(library),
                "--ollama-host",
                fake.url,
                "What is the total amount of the orders of Bob?",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert (data["status"], data["rows"], data["verified"]["params"]) == (
        "verified",
        [[20]],
        [{"name": "who", "type": "value", "text": "Bob", "value": "Bob"}],
    )
    assert prompts(fake) == []


def test_ask_lists_similar_verified_answers_and_hints_only_when_asked(
    shop: Path, tmp_path: Path, fake_ollama: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A similar question: the model answers, the entry is listed; --verified-hints puts it in the evidence."""
    fake = fake_ollama(OraclePolicy({SIMILAR_Q: SIMILAR_SQL}))
    library = write_library(tmp_path / "lib.jsonl", {"question": TOTAL_Q, "sql": TOTAL_SQL, "database": "shop"})
    assert (
        main(["ask", "--db", str(shop), "--verified", str(library), "--ollama-host", fake.url, SIMILAR_Q]) == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("status: submitted")
    assert out.rstrip().endswith(
        "A verified answer exists for a similar question: (compare them with this answer; they do not "
        f'replace it)\n- "{TOTAL_Q}":\n```sql\n{TOTAL_SQL}\n```'
    )
    assert "Evidence" not in first_user_turn(prompts(fake)[0])
    assert (
        main(
            [
                "ask",
                "--db",
                str(shop),
                "--verified",
                str(library),
                "--verified-hints",
                "--evidence",
                "Ann is a customer",
                "--ollama-host",
                fake.url,
                SIMILAR_Q,
            ]
        )
        == 0
    )
    assert first_user_turn(prompts(fake)[-1]).endswith(
        f'Evidence: "{TOTAL_Q}" refers to {TOTAL_SQL}; Ann is a customer'
    )


def test_ask_refuses_hints_without_a_library_and_says_which_entries_it_refused(
    shop: Path, tmp_path: Path, fake_ollama: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """--verified-hints alone is a usage error; a refused entry is one stderr line and never served."""
    fake = fake_ollama(OraclePolicy({COUNT_Q: COUNT_SQL}))
    assert main(["ask", "--db", str(shop), "--verified-hints", "--ollama-host", fake.url, COUNT_Q]) == 1
    assert "--verified-hints needs a library: add --verified FILE.jsonl" in capsys.readouterr().err
    library = write_library(
        tmp_path / "lib.jsonl", {"question": COUNT_Q, "sql": "SELECT count(*) FROM order", "database": "shop"}
    )
    assert main(["ask", "--db", str(shop), "--verified", str(library), "--ollama-host", fake.url, COUNT_Q]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == (
        f"sqale-agent: verified library 'shop' (lib.jsonl) line 1 \"{COUNT_Q}\": refused: its SQL fails: "
        'near "order": syntax error'
    )
    assert captured.out.startswith("status: submitted")


def test_eval_measures_hints_leaving_each_questions_own_entry_out(
    shop: Path, tmp_path: Path, fake_ollama: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """eval GOLDEN --verified GOLDEN --verified-hints: each question is hinted with the others, never
    itself; the runs with and without hints pair up in a comparison report."""
    golden = write_library(
        tmp_path / "golden.jsonl",
        {"question": TOTAL_Q, "sql": TOTAL_SQL, "database": "shop"},
        {"question": SIMILAR_Q, "sql": SIMILAR_SQL, "database": "shop"},
        {"question": COUNT_Q, "sql": COUNT_SQL, "database": "shop"},
    )
    fake = fake_ollama(QuestionLineOracle({TOTAL_Q: TOTAL_SQL, SIMILAR_Q: SIMILAR_SQL, COUNT_Q: COUNT_SQL}))
    base = ["eval", str(golden), "--db", f"shop={shop}", "--ollama-host", fake.url]
    assert main([*base, "--out", str(tmp_path / "off.jsonl")]) == 0
    sent_without = len(prompts(fake))
    assert (
        main([*base, "--verified", str(golden), "--verified-hints", "--out", str(tmp_path / "on.jsonl")]) == 0
    )
    lines = (tmp_path / "on.jsonl").read_text(encoding="utf-8").splitlines()
    records = {r["question"]: r for r in map(json.loads, lines)}
    assert {q: r["verified_hints"] for q, r in records.items()} == {
        TOTAL_Q: [SIMILAR_Q],
        SIMILAR_Q: [TOTAL_Q],
        COUNT_Q: [TOTAL_Q, SIMILAR_Q],
    }
    assert records[COUNT_Q]["run"]["settings"]["verified_hints"] == "golden.jsonl"
    firsts = {first_user_turn(p) for p in prompts(fake)[sent_without:]}
    assert f'Question: {TOTAL_Q}\nEvidence: "{SIMILAR_Q}" refers to {SIMILAR_SQL}' in firsts
    pytest.importorskip("matplotlib")
    capsys.readouterr()
    assert (
        main(
            [
                "report",
                str(tmp_path / "off.jsonl"),
                str(tmp_path / "on.jsonl"),
                "--out",
                str(tmp_path / "cmp.html"),
            ]
        )
        == 0
    )
    page = (tmp_path / "cmp.html").read_text(encoding="utf-8")
    assert "Paired: the 3 questions scored in both" in page
    assert "<td>verified hints</td><td>off</td><td>golden.jsonl</td>" in page


def test_eval_refuses_a_library_without_hints(
    shop: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--verified alone (or --verified-hints alone) says both are needed."""
    golden = write_library(
        tmp_path / "golden.jsonl", {"question": COUNT_Q, "sql": COUNT_SQL, "database": "shop"}
    )
    assert main(["eval", str(golden), "--db", f"shop={shop}", "--verified", str(golden)]) == 2
    assert "give both --verified FILE.jsonl and --verified-hints" in capsys.readouterr().err

"""The report's voting: agreement and candidates per question, the calibration chart, the summary's
agreement levels and environment (a K = 3 run whose outcomes are fixed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.commands.cli import main
from agent.evaluation.html_report import load_run
from agent.evaluation.html_report.data import run_summary as summary_of
from agent.evaluation.html_report.voting_data import calibration, candidates
from agent.evaluation.summary import render_summary
from tests.support.report_runs import QUESTIONS, run, voting_policy, write_dataset

pytest.importorskip("matplotlib", reason="the report draws with matplotlib (the report extra)")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """K = 3, every sample run to the end: Q0 right 2/3, Q1 wrong 2/3, Q2 no SQL, Q3 right 3/3."""
    root = tmp_path_factory.mktemp("voting")
    return run(write_dataset(root / "set"), voting_policy(), root / "k3.jsonl", samples=3, early_stop=False)


def test_calibration_counts_accuracy_per_agreement_level(results: Path) -> None:
    """3 of 3: 1/1 right; 2 of 3: 1/2; no SQL ran: 0/1; the gold error is left out."""
    levels = calibration(load_run(results))
    assert [(g.label, g.correct, g.questions) for g in levels] == [
        ("3 of 3 agree", 1, 1),
        ("2 of 3 agree", 1, 2),
        ("no SQL ran", 0, 1),
    ]


def test_candidates_name_their_samples_sql_and_verdict(results: Path) -> None:
    """Q0: samples 0 and 1 right (the answer), sample 2 alone and wrong."""
    record = load_run(results).records[0]
    assert [(c.samples, c.sql, c.rows, c.correct, c.chosen) for c in candidates(record)] == [
        ((0, 1), QUESTIONS[0][3], 1, True, True),
        ((2,), "SELECT 42", 1, False, False),
    ]


def test_the_summary_json_has_agreement_levels_and_the_environment(results: Path) -> None:
    """by_agreement in the calibration's order; environment from the run settings."""
    summary = summary_of(load_run(results))
    assert summary.environment == "trained"
    assert {level: (acc.correct, acc.questions) for level, acc in summary.by_agreement.items()} == {
        "3 of 3 agree": (1, 1),
        "2 of 3 agree": (1, 2),
        "no SQL ran": (0, 1),
    }
    assert list(summary.by_agreement) == ["3 of 3 agree", "2 of 3 agree", "no SQL ran"]


def test_the_page_shows_the_vote_of_each_question_and_the_calibration_chart(
    results: Path, tmp_path: Path
) -> None:
    """Each question says its agreement (filterable); Q0 lists both results; the chart is drawn."""
    out = tmp_path / "k3.html"
    assert main(["report", str(results), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert re.findall(r'data-key="(\d)"[^>]*data-agreement="([^"]*)"', page) == [
        ("0", "2 of 3 agree"),
        ("1", "2 of 3 agree"),
        ("2", "no SQL ran"),
        ("3", "3 of 3 agree"),
        ("4", ""),
    ]
    assert '<select name="agreement"><option value="">all</option><option value="3 of 3 agree">' in page
    q0 = page.split('data-key="0"', 1)[1].split('data-key="1"', 1)[0]
    assert "<h4>vote: 2 of 3 agree (agreement 0.67)</h4>" in q0
    cells = re.findall(r"<tr( class=chosen)?><td class=\"num\">(\d)</td><td>([^<]*)</td>", q0)
    assert cells == [(" class=chosen", "2", "0, 1"), ("", "1", "2")]
    assert '<span title="2 of 3 agree">submitted · 2/3</span>' in q0
    chart = page.split('data-chart="calibration"', 1)[1].split("</figure>", 1)[0]
    assert 'aria-label="accuracy of 3 groups"' in chart and "1/2 · 50.0%" in chart


def test_eval_writes_the_environment_to_the_summary_file(tmp_path: Path, fake_ollama, capsys) -> None:
    """`eval` with --environment rich: the .summary.json says so."""
    from tests.support.policies import OraclePolicy

    dataset = write_dataset(tmp_path / "set")
    server = fake_ollama(OraclePolicy({q: sql for _, _, q, sql in QUESTIONS}))
    out = tmp_path / "run.jsonl"
    assert (
        main(
            [
                "eval",
                str(tmp_path / "set"),
                "--ollama-host",
                server.url,
                "--environment",
                "rich",
                "--out",
                str(out),
                "--limit",
                "1",
            ]
        )
        == 0
    )
    assert dataset.benchmark.value == "spider"
    summary = json.loads((tmp_path / "run.summary.json").read_text(encoding="utf-8"))
    assert (summary["environment"], summary["by_agreement"]) == ("rich", {})


def test_each_disagreeing_question_records_what_a_person_would_be_asked(results: Path) -> None:
    """Q0 and Q1 gave two results: their options (as the server's form shows them) and which is
    right; Q2 (no SQL), Q3 (all agree) and Q4 (gold error) would ask nobody."""
    records = load_run(results).records
    assert [r.choice.model_dump() if r.choice else None for r in records] == [
        {
            "options": [
                "3 (1 row) · 2 of 3 samples · from customer; column count(∗)",
                "42 (1 row) · 1 of 3 samples · column 42; no from customer",
            ],
            "groups": [0, 1],
            "right": 1,
            "more": 0,
        },
        {
            "options": [
                "Bob (1 row) · 2 of 3 samples · filter city = 'Rome'",
                "2 rows, first: Ann · 1 of 3 samples · filter city = 'Oslo'",
            ],
            "groups": [0, 1],
            "right": 2,
            "more": 0,
        },
        None,
        None,
        None,
    ]


def test_the_summary_and_the_page_say_how_often_the_right_answer_was_among_the_options(
    results: Path, tmp_path: Path
) -> None:
    """2 questions disagreed: the right answer was among the options on both, the vote right on
    one; the page draws it beside the calibration and lists each question's options."""
    summary = summary_of(load_run(results))
    assert summary.asking is not None and summary.asking.model_dump() == {
        "questions": 2,
        "right_offered": 2,
        "vote_right": 1,
        "right_not_offered": 0,
        "offered": 1.0,
        "vote": 0.5,
    }
    assert (
        "samples disagreed on 2 of 4 questions (a person would be asked): the right answer was among the "
        "options on 2 (100.0%), the vote's answer was right on 1 (50.0%)"
    ) in render_summary(summary)
    out = tmp_path / "k3.html"
    assert main(["report", str(results), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.index('data-chart="calibration"') < page.index('data-chart="asking"')
    chart = page.split('data-chart="asking"', 1)[1].split("</figure>", 1)[0]
    assert "1/2 · 50.0%" in chart and "2/2 · 100.0%" in chart
    q1 = page.split('data-key="1"', 1)[1].split('data-key="2"', 1)[0]
    assert (
        "<h4>a person would be asked (option 2 is right)</h4><ol><li>Bob (1 row) · 2 of 3 samples · filter "
        "city = &#x27;Rome&#x27;</li><li class=right>2 rows, first: Ann · 1 of 3 samples · filter city = "
        "&#x27;Oslo&#x27; <strong>✓ right</strong></li><li>None of these</li></ol>"
    ) in q1

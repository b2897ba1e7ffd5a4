"""`sqale-agent report` and `eval --report`: the page's parts, escaping, comparison, errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.commands.cli import main
from agent.install_hints import install_hint
from agent.sqlite import create_database
from tests.support.policies import OraclePolicy, SeedSwitchPolicy
from tests.support.report_runs import HOSTILE, QUESTIONS, run, run_a_policy, run_b_policy, write_dataset

REPO = Path(__file__).resolve().parents[2]
RUN_CHARTS = [
    "by-difficulty",
    "by-database",
    "outcomes",
    "status",
    "stop-reasons",
    "rounds",
    "tool_calls",
    "tokens",
    "seconds",
    "tools",
    "gold-tables",
]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Results files of run A and run B (see report_runs.py)."""
    root = tmp_path_factory.mktemp("report-page")
    dataset = write_dataset(root / "set")
    return {
        "a": run(dataset, run_a_policy(), root / "a.jsonl"),
        "b": run(dataset, run_b_policy(), root / "b.jsonl"),
    }


@pytest.fixture(scope="module")
def page_a(results: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The page of run A, built through the CLI."""
    out = tmp_path_factory.mktemp("page") / "a.html"
    assert main(["report", str(results["a"]), "-o", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def charts_in(page: str) -> list[str]:
    """The data-chart names of the page's figures, in order."""
    return re.findall(r'<figure class="chart" data-chart="([^"]+)"', page)


def test_report_writes_one_self_contained_page(results, tmp_path, capsys):
    """Default path next to the results; nothing fetched: no external URL, link, or src; one script."""
    copy = tmp_path / "run.jsonl"
    copy.write_bytes(results["a"].read_bytes())
    assert main(["report", str(copy)]) == 0
    out = tmp_path / "run.html"
    assert capsys.readouterr().out.startswith(f"report: {out} (")
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert re.findall(r"(?:src|href)\s*=\s*\"(?!#)", page) == []  # only links inside the page
    assert "<link" not in page and "@import" not in page and "url(http" not in page
    assert len(re.findall(r"<script\b", page)) == 1
    assert "default-src &#x27;none&#x27;" in page  # a Content-Security-Policy allows no fetch


def test_every_chart_is_there(page_a):
    """Accuracy by difficulty and database, the three mixes, four distributions, tools by round, the 2×2."""
    assert charts_in(page_a) == RUN_CHARTS
    figures = re.findall(r'<figure class="chart" data-chart="([^"]+)">(.*?)</figure>', page_a, re.DOTALL)
    svg_charts = [name for name, body in figures if "<svg" in body and "<path" in body]
    assert svg_charts == RUN_CHARTS[:-1]


def test_headline_numbers(page_a):
    """Accuracy 2 of 4 scored, the gold failure listed apart with its error, the run's settings."""
    assert "execution accuracy: 2 of 4" in page_a
    assert re.search(r'<div class="n">50\.0%</div>', page_a)
    assert "Gold SQL that failed (1, not scored)" in page_a and "no such table: lion" in page_a
    assert "<div><dt>max tool turns</dt><dd>6</dd></div>" in page_a


def test_every_question_in_the_browser(page_a):
    """One entry per question with its verdict, group, database and status for the filters."""
    entries = re.findall(
        r'<details class="ep" data-key="(\d+)" data-verdict="([^"]+)" data-group="([^"]*)" '
        r'data-db="([^"]+)" data-status="([^"]+)" data-agreement="">',
        page_a,
    )
    assert entries == [
        ("0", "correct", "easy", "shop", "submitted"),
        ("1", "wrong", "easy", "shop", "submitted"),
        ("2", "wrong", "hard", "shop", "failed"),
        ("3", "correct", "medium", "zoo", "submitted"),
        ("4", "gold error", "medium", "zoo", "gold error"),
    ]


def test_wrong_answer_shows_both_results_with_the_difference_marked(page_a):
    """Q1: predicted Bob against gold Ann and Cy, every row marked as missing from the other side."""
    entry = page_a.split('data-key="1"', 1)[1].split("</details></div></details>", 1)[0]
    assert "<tr class=diff><td>Bob</td></tr>" in entry
    assert "<tr class=diff><td>Ann</td></tr><tr class=diff><td>Cy</td></tr>" in entry
    assert "marked (1): not among the other result&#x27;s rows shown" in entry
    assert '<pre class="sql">SELECT name FROM customer WHERE city = &#x27;Rome&#x27;</pre>' in entry


def test_trace_shows_what_the_model_saw(page_a):
    """Each round: the completion as written, each call with the text it got back."""
    entry = page_a.split('data-key="0"', 1)[1].split('data-key="1"', 1)[0]
    assert entry.count('<li class="round">') == 3
    assert "&lt;think&gt;List the tables first.&lt;/think&gt;" in entry
    assert "→ run_query {&quot;sql&quot;: &quot;SELECT count(*) FROM customer&quot;}" in entry
    assert '<pre class="result">' in entry


def test_untrusted_text_is_escaped(page_a):
    """A question, a SQL string and a result cell holding <script> appear only as text."""
    assert "alert(" in page_a  # it is on the page...
    assert re.findall(r"<script\b[^>]*>", page_a) == ["<script>"]  # ...but the only script is ours
    assert HOSTILE not in page_a
    assert "&lt;script&gt;alert(&quot;question&quot;)&lt;/script&gt;" in page_a
    assert "&lt;script&gt;alert(&quot;cell&quot;)&lt;/script&gt;" in page_a
    script = page_a.rsplit("<script>", 1)[1]
    assert "alert" not in script


def test_comparison_page(results, tmp_path, capsys):
    """Two runs: paired counts, the charts twice on shared axes, the two flipped questions with both traces."""
    out = tmp_path / "ab.html"
    assert main(["report", str(results["a"]), str(results["b"]), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert charts_in(page) == [name for name in RUN_CHARTS for _ in "ab"]
    assert '<td class="num">1 both</td><td class="num">1 A only</td>' in page
    assert '<td class="num">1 B only</td><td class="num">1 neither</td>' in page
    assert "50.0% → 50.0%" in page and "+0.0" in page
    assert "Right in A only (1)" in page and "Right in B only (1)" in page
    flipped = re.findall(r'<details class="ep flip" data-key="(\d+)">', page)
    assert flipped == ["0", "1"]
    first = page.split('data-key="0">', 1)[1].split('data-key="1">')[0]
    assert first.count('<details class="sample">') == 2  # A's trace and B's
    assert QUESTIONS[0][3] in first and "SELECT 42" in first


def test_default_comparison_path(results, tmp_path):
    """Two files without -o: <a>-vs-<b>.html next to the first."""
    a, b = tmp_path / "k1.jsonl", tmp_path / "k5.jsonl"
    a.write_bytes(results["a"].read_bytes())
    b.write_bytes(results["b"].read_bytes())
    assert main(["report", str(a), str(b)]) == 0
    assert (tmp_path / "k1-vs-k5.html").is_file()


def test_bad_input_says_what_to_do(tmp_path, capsys):
    """A missing file, an empty one, or three files: exit 2 with one line naming the problem."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    assert main(["report", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such results file" in capsys.readouterr().err
    assert main(["report", str(empty)]) == 2
    assert "holds no result line yet" in capsys.readouterr().err
    assert main(["report", str(empty), str(empty), str(empty)]) == 2
    assert capsys.readouterr().err == "sqale-agent report: give one results file, or two to compare\n"


def test_without_matplotlib_the_error_says_what_to_install(results, tmp_path):
    """With matplotlib unimportable, `report` exits 2 with one line naming the extra to install."""
    code = (
        "import sys; sys.modules['matplotlib'] = None; from agent.commands.cli import main; "
        f"sys.exit(main(['report', {str(results['a'])!r}, '-o', {str(tmp_path / 'x.html')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "sqale-agent report: the HTML report draws its charts with matplotlib, which is not installed; "
        f"run: {install_hint('report')}"
    ]
    assert not (tmp_path / "x.html").exists()


def test_eval_writes_the_report_and_again_after_resume(tmp_path, fake_ollama, capsys):
    """eval --report writes the page at the end; after --resume it covers old and new questions."""
    dataset_dir = tmp_path / "set"
    write_dataset(dataset_dir)
    server = fake_ollama(OraclePolicy({q: sql for _, _, q, sql in QUESTIONS}))
    out, report = tmp_path / "r.jsonl", tmp_path / "r.html"
    common = [str(dataset_dir), "--ollama-host", server.url, "--out", str(out), "--report", str(report)]
    assert main(["eval", *common, "--limit", "2"]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"report: {report}")
    first = report.read_text(encoding="utf-8")
    assert re.findall(r'data-key="(\d+)" data-verdict', first) == ["0", "1"]
    assert "<div><dt>backend</dt><dd>ollama</dd></div>" in first
    assert main(["eval", *common, "--resume"]) == 0
    second = report.read_text(encoding="utf-8")
    assert re.findall(r'data-key="(\d+)" data-verdict', second) == ["0", "1", "2", "3", "4"]
    started = [json.loads(line)["run"]["started"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(started) == 5


def test_several_samples(tmp_path):
    """K = 2 (seed 0 answers as run A, seed 1 as run B): voted, single-sample and any-of-K accuracy; each
    question opens both samples, the voted one named."""
    dataset = write_dataset(tmp_path / "set")
    policy = SeedSwitchPolicy({0: run_a_policy(), 1: run_b_policy()})
    results = run(dataset, policy, tmp_path / "k2.jsonl", samples=2)
    assert main(["report", str(results)]) == 0
    page = (tmp_path / "k2.html").read_text(encoding="utf-8")
    cards = re.findall(r'<div class="n">([^<]*)</div><div class="l">([^<]*)</div>', page)
    assert cards[:3] == [
        ("50.0%", "execution accuracy (voted): 2 of 4"),
        ("50.0%", "single-sample accuracy (mean over samples)"),
        ("75.0%", "right in any of 2 samples"),
    ]
    entry = page.split('data-key="0"', 1)[1].split('data-key="1"', 1)[0]
    samples = re.findall(r'<details class="sample"><summary>([^<]*)</summary>', entry)
    assert [s.split(" · ")[:2] for s in samples] == [
        ["sample 0 (voted)", "correct"],
        ["sample 1", "wrong_result"],
    ]


def test_golden_questions_group_by_tags(tmp_path, fake_ollama, capsys):
    """A golden file with one right and one wrong answer: 50%, both questions, charts and filter by tags."""
    sales = create_database(
        tmp_path / "sales.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INT);INSERT INTO orders VALUES (1, 30), (2, 20);",
    )
    golden = tmp_path / "mine.jsonl"
    questions = [
        ("How many orders?", "SELECT count(*) FROM orders", ["counts"]),
        ("What is the largest amount?", "SELECT max(amount) FROM orders", ["money", "ranking"]),
    ]
    golden.write_text(
        "".join(
            json.dumps({"question": q, "sql": sql, "database": "sales", "tags": tags}) + "\n"
            for q, sql, tags in questions
        ),
        encoding="utf-8",
    )
    server = fake_ollama(
        OraclePolicy({questions[0][0]: questions[0][1], questions[1][0]: "SELECT min(amount) FROM orders"})
    )
    report = tmp_path / "mine.html"
    assert (
        main(
            [
                "eval",
                str(golden),
                "--db",
                f"sales={sales}",
                "--ollama-host",
                server.url,
                "--out",
                str(tmp_path / "run.jsonl"),
                "--report",
                str(report),
            ]
        )
        == 0
    )
    page = report.read_text(encoding="utf-8")
    assert "execution accuracy: 1 of 2" in page
    assert charts_in(page)[:2] == ["by-tags", "by-database"]
    assert re.findall(r'data-verdict="([^"]+)" data-group="([^"]*)"', page) == [
        ("correct", "counts"),
        ("wrong", "money\nranking"),
    ]
    assert '<label>tags <select name="group">' in page

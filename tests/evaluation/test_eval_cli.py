"""`sqale-agent eval` end to end: real HTTP to fake Ollama/OpenAI runtimes, files, exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.commands import eval as eval_command
from agent.commands.cli import build_parser, main
from tests.support.eval_runs import SHOP_QUESTIONS as QUESTIONS
from tests.support.eval_runs import spider_shop
from tests.support.policies import (
    DEFAULT_MODEL,
    OraclePolicy,
    ScriptPolicy,
    SeedSwitchPolicy,
    assistant_reply,
    tool_call,
)


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A Spider-layout folder with three questions on one database."""
    return spider_shop(tmp_path / "shop_set")


def cli(*argv: str) -> int:
    """Parse like sqale-agent does and run the eval handler."""
    args = build_parser().parse_args(["eval", *argv])
    return args.run(args)


def test_eval_over_ollama_writes_results_and_summary(shop, tmp_path, fake_ollama, capsys):
    """Against a fake Ollama: exit 0, one line per question, the summary file next to --out, the table."""
    server = fake_ollama(OraclePolicy(QUESTIONS))
    out = tmp_path / "runs" / "shop.jsonl"
    code = cli(str(shop), "--ollama-host", server.url, "--out", str(out), "--concurrency", "2")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted((r["key"], r["correct"], r["model"]) for r in lines) == [
        ("0", True, DEFAULT_MODEL),
        ("1", True, DEFAULT_MODEL),
        ("2", True, DEFAULT_MODEL),
    ]
    summary = json.loads((tmp_path / "runs" / "shop.summary.json").read_text(encoding="utf-8"))
    assert (summary["accuracy"]["ex"], summary["questions"]["scored"]) == (1.0, 3)
    assert "overall  3  100.0%" in captured.out
    assert captured.err.startswith(
        f"spider: 3 questions from {shop / 'dev.json'}; model {DEFAULT_MODEL} via "
        f"ollama ({server.url}); trained environment; results -> {out}\n"
    )
    assert all(body["raw"] is True for body in server.bodies("/api/generate"))


def test_samples_use_consecutive_seeds(shop, tmp_path, fake_openai, capsys):
    """--samples 3 --seed 5 sends seeds 5, 6, 7 to an OpenAI-compatible server; the vote is reported."""
    wrong = assistant_reply(None, tool_call("submit_sql", sql="SELECT 0"))
    policy = SeedSwitchPolicy({6: ScriptPolicy([wrong])}, default=OraclePolicy(QUESTIONS))
    server = fake_openai(policy)
    out = tmp_path / "r.jsonl"
    code = cli(
        str(shop),
        "--backend",
        "openai",
        "--base-url",
        server.url,
        "--samples",
        "3",
        "--seed",
        "5",
        "--out",
        str(out),
        "--summary",
        str(tmp_path / "s.json"),
        "--limit",
        "1",
    )
    assert code == 0, capsys.readouterr().err
    assert sorted({b["seed"] for b in server.bodies("/v1/completions")}) == [5, 6, 7]
    summary = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert (summary["accuracy"]["ex"], round(summary["accuracy"]["single"], 4)) == (1.0, 0.6667)


def test_dead_ollama_stops_with_exit_1(shop, tmp_path, dead_url, capsys):
    """Nothing listening: the run stops after N failed episodes with a message saying what to do."""
    code = cli(
        str(shop), "--ollama-host", dead_url, "--out", str(tmp_path / "r.jsonl"), "--max-backend-failures", "2"
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "sqale-agent eval: stopped early: 2 episodes in a row failed in the model backend: " in err
    *_, stopped, recorded = err.splitlines()
    assert stopped.endswith("fix the backend and rerun with --resume to continue")
    tail = f"{tmp_path / 'r.jsonl'}; rerun the same command with --resume to continue"
    assert re.fullmatch(
        r"sqale-agent eval: (1 question is|(?!1 )\d+ questions are) recorded in " + re.escape(tail), recorded
    )


def test_a_run_where_the_model_never_answered_exits_1_and_names_the_file_to_resume(
    shop, tmp_path, dead_url, monkeypatch, capsys
):
    """Runtime down for all of --limit 2 (too few to abort): exit 1, and the hint names the --out to resume."""
    monkeypatch.chdir(tmp_path)
    code = cli(str(shop), "--ollama-host", dead_url, "--limit", "2")
    captured = capsys.readouterr()
    (out,) = (tmp_path / "eval-results").glob("spider-*.jsonl")
    assert code == 1
    assert "0.0%" in captured.out
    assert captured.err.endswith(
        "sqale-agent eval: no question got an answer from the model (every request to the runtime failed; "
        "see the errors above); check it with `sqale-agent doctor`, then rerun the same command with "
        f"--resume --out {out.relative_to(tmp_path)} to continue\n"
    )


def test_the_header_names_the_runtime_address_in_use(shop, tmp_path, fake_ollama, monkeypatch, capsys):
    """Without --ollama-host the header shows $OLLAMA_HOST as used, not a placeholder."""
    server = fake_ollama(OraclePolicy(QUESTIONS))
    monkeypatch.setenv("OLLAMA_HOST", server.url)
    assert cli(str(shop), "--out", str(tmp_path / "r.jsonl"), "--limit", "1") == 0
    assert f"via ollama ({server.url}); " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--backend", "openai"],
            "sqale-agent eval: --backend openai needs at least one --base-url (e.g. http://host:8000/v1)\n",
        ),
        (
            ["--samples", "0"],
            "sqale-agent eval: --samples, --concurrency and --max-backend-failures must be 1 or more\n",
        ),
        (
            ["--difficulty", "easy"],
            "sqale-agent eval: --difficulty easy: unknown; this dataset has no difficulty labels\n",
        ),
        (
            ["--offset", "10"],
            "sqale-agent eval: no question to run: the selection is empty (check --db-id, "
            "--difficulty, --offset, --limit, and that the database files exist)\n",
        ),
    ],
)
def test_bad_options_exit_2(shop, argv, message, capsys):
    """Option mistakes print one line saying what to change, and exit 2 before any model call."""
    assert cli(str(shop), *argv) == 2
    assert capsys.readouterr().err == message


def test_missing_api_key_variable(shop, monkeypatch, capsys):
    """--api-key-env naming an unset variable is an error that says to export it."""
    monkeypatch.delenv("SQALE_TEST_KEY", raising=False)
    assert (
        cli(
            str(shop),
            "--backend",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "SQALE_TEST_KEY",
        )
        == 2
    )
    assert capsys.readouterr().err == (
        "sqale-agent eval: --api-key-env SQALE_TEST_KEY: the environment "
        "variable SQALE_TEST_KEY is not set or empty; export "
        "SQALE_TEST_KEY=<secret> and run the command again\n"
    )


def test_default_paths():
    """The summary sits next to the results file; the default results file is per benchmark and time."""
    assert eval_command.summary_path_for(Path("out/run.jsonl")) == Path("out/run.summary.json")
    default = eval_command.default_out_path(eval_command.Benchmark.BIRD)
    assert (default.parent, default.name.startswith("bird-"), default.suffix) == (
        Path("eval-results"),
        True,
        ".jsonl",
    )


def test_scoring_timeout_and_its_old_spelling(capsys):
    """--scoring-timeout limits gold/predicted SQL; the old --query-timeout still sets it, with a warning."""

    def limit(*argv: str) -> float:
        return eval_command.settings_from_args(build_parser().parse_args(["eval", "set", *argv])).limits.timeout

    assert (limit(), limit("--scoring-timeout", "7"), limit("--query-timeout", "8")) == (30.0, 7.0, 8.0)
    assert capsys.readouterr().err == (
        "sqale-agent eval: --query-timeout is deprecated; it is now "
        "--scoring-timeout (the model's own statement limit is "
        "--tool-query-timeout)\n"
    )


def test_each_run_records_its_engine_and_a_comparison_shows_both(shop, tmp_path, fake_ollama, capsys):
    """Results lines record the engine's address; the comparison page shows each run's, side by side."""
    first, second = fake_ollama(OraclePolicy(QUESTIONS)), fake_ollama(OraclePolicy(QUESTIONS))
    for name, server in (("a", first), ("b", second)):
        assert cli(str(shop), "--ollama-host", server.url, "--out", str(tmp_path / f"{name}.jsonl")) == 0
    record = json.loads((tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert record["run"]["settings"]["engine"] == first.url
    out = tmp_path / "ab.html"
    assert main(["report", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert f"<td>engine</td><td>{first.url}</td><td>{second.url}</td>" in page.replace(' class="num"', "")


def test_report_of_a_summary_file_names_the_results_file(shop, tmp_path, fake_ollama, capsys):
    """`report run.summary.json` (the file eval writes beside the results) says to pass run.jsonl."""
    server = fake_ollama(OraclePolicy(QUESTIONS))
    assert cli(str(shop), "--ollama-host", server.url, "--out", str(tmp_path / "run.jsonl")) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run.summary.json")]) == 2
    assert capsys.readouterr().err == (
        f"sqale-agent report: {tmp_path / 'run.summary.json'} is the summary of an eval run; give its results "
        f"file instead: {tmp_path / 'run.jsonl'} (the --out file, one JSON line per question)\n"
    )

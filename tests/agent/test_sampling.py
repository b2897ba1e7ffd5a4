"""One question asked K times: `ask`, the server and `eval` choose the same sample by one rule."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.commands.cli import build_parser, main
from agent.episode import EpisodeResult, EpisodeStatus, StopReason
from agent.sampling import Candidate, SampledAnswer, SampleRun, VoteSummary, choose, summary_text
from agent.sqlite import create_database
from agent.voting import Group, VoteOutcome
from tests.support.mcp_in_process import ask as ask_server
from tests.support.mcp_in_process import build
from tests.support.policies import ScriptPolicy, SeedSwitchPolicy, assistant_reply, tool_call

QUESTION = "How many customers are there?"
GOLD = "SELECT count(*) FROM customer"
SHOP = "CREATE TABLE customer (id INTEGER PRIMARY KEY); INSERT INTO customer VALUES (1), (2), (3);"
# More rows than any front end compares (ask and eval read 100,000, the server 10,000): it runs
# but cannot vote.
HUGE = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 120000) SELECT x FROM n"
SEED = 100


def submits(k: int, sql: str) -> ScriptPolicy:
    """Lists the tables, then submits `sql`; its replies name the sample."""
    return ScriptPolicy(
        [
            assistant_reply(f"look (sample {k})", tool_call("list_tables")),
            assistant_reply(f"answer (sample {k})", tool_call("submit_sql", sql=sql)),
        ]
    )


def unsure(k: int) -> ScriptPolicy:
    """Never calls a tool and never writes SQL: the sample fails; its reply names it."""
    return ScriptPolicy([f"I am not sure (sample {k})."])


# name: (policies of samples 0, 1, 2; the chosen sample, its SQL, its agreement)
SCENARIOS = {
    # The drift this rule ends: `ask` used to print sample 0's failure, the server answered with 1.
    "no vote: the earliest sample whose SQL ran": ((unsure(0), submits(1, HUGE), unsure(2)), 1, HUGE, None),
    "nothing ran: the earliest sample that finished": ((unsure(0), unsure(1), unsure(2)), 0, None, None),
    "a vote: the earliest sample of the largest group": (
        (submits(0, "SELECT 7"), submits(1, GOLD), submits(2, "SELECT 3")),
        1,
        GOLD,
        0.667,
    ),
}


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A Spider-layout folder with the question and its gold SQL on one database."""
    create_database(tmp_path / "shop_set" / "database" / "shop" / "shop.sqlite", SHOP)
    (tmp_path / "shop_set" / "dev.json").write_text(
        json.dumps([{"db_id": "shop", "question": QUESTION, "query": GOLD}]), encoding="utf-8"
    )
    return tmp_path / "shop_set"


def chosen_by_ask(url: str, db: Path, capsys: Any) -> tuple[int | None, str | None, float | None]:
    """`sqale-agent ask --samples 3 --json`: the sample is told by its last reply."""
    code = main(
        [
            "ask",
            "--db",
            str(db),
            "--ollama-host",
            url,
            "--samples",
            "3",
            "--seed",
            str(SEED),
            "--json",
            QUESTION,
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == (3 if data["sql"] is None else 0)  # ask exits 3 when no SQL ran
    said = data["rounds"][-1]["completion"] if data["rounds"] else ""
    sample = next((k for k in range(3) if f"(sample {k})" in said), None)
    return sample, data["sql"], data["agreement"]


def chosen_by_server(url: str, db: Path, tmp_path: Path) -> tuple[int | None, str | None, float | None]:
    """answer_sql_question with samples=3: the episode log names the chosen sample."""
    log = tmp_path / "episodes.jsonl"
    server = build(
        tmp_path,
        [
            "--db",
            f"shop={db}",
            "--ollama-host",
            url,
            "--seed",
            str(SEED),
            "--runtime-slots",
            "3",
            "--episode-log",
            str(log),
        ],
    )
    result = anyio.run(ask_server, server, {"question": QUESTION, "samples": 3})
    answer = result.structured_content
    assert answer is not None
    line = json.loads(log.read_text(encoding="utf-8"))
    return line["chosen_sample"], answer["sql"], answer["agreement"]


def chosen_by_eval(url: str, shop: Path, tmp_path: Path) -> tuple[int | None, str | None, float | None]:
    """`sqale-agent eval --samples 3`: the record's voted sample, its SQL and agreement."""
    out = tmp_path / "eval.jsonl"
    args = build_parser().parse_args(
        [
            "eval",
            str(shop),
            "--ollama-host",
            url,
            "--samples",
            "3",
            "--seed",
            str(SEED),
            "--concurrency",
            "3",
            "--out",
            str(out),
        ]
    )
    assert args.run(args) == 0
    record = json.loads(out.read_text(encoding="utf-8"))
    return record["voted_sample"], record["predicted_sql"], record["agreement"]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_ask_the_server_and_eval_choose_the_same_sample(
    scenario: str, shop: Path, tmp_path: Path, fake_ollama: Any, capsys: Any
) -> None:
    """The same scripted samples over a fake Ollama: one choice, one SQL, one agreement everywhere."""
    policies, sample, sql, agreement = SCENARIOS[scenario]
    fake = fake_ollama(SeedSwitchPolicy({SEED + k: policy for k, policy in enumerate(policies)}))
    db = shop / "database" / "shop" / "shop.sqlite"
    expected = (sample, sql, agreement)
    assert chosen_by_ask(fake.url, db, capsys) == expected
    assert chosen_by_server(fake.url, db, tmp_path) == expected
    assert chosen_by_eval(fake.url, shop, tmp_path) == expected


def episode(sql: str | None, status: EpisodeStatus) -> EpisodeResult:
    return EpisodeResult(
        question="q",
        evidence=None,
        sql=sql,
        status=status,
        stop_reason=StopReason.SUBMITTED,
        columns=(),
        rows=(),
        row_count=1,
        truncated=False,
        error=None,
        rounds=(),
        tokens=0,
        seconds=0.0,
        model_seconds=0.0,
        tool_seconds=0.0,
        prompt="",
    )


def outcome_of(
    runs: dict[int, SampleRun], groups: tuple[Group, ...] = (), samples: int = 3
) -> VoteOutcome[SampleRun]:
    winner = groups[0].members[0] if groups else None
    return VoteOutcome(samples, runs, groups, winner, False, tuple(runs))


RAN = episode("SELECT 1", EpisodeStatus.SUBMITTED)
FAILED = episode(None, EpisodeStatus.FAILED)


def test_choice_falls_back_by_sample_index_not_by_arrival() -> None:
    """Winner; else the earliest that ran; else the earliest that finished; else none."""
    runs = {2: SampleRun(2, 2, RAN), 0: SampleRun(0, 0, FAILED), 1: SampleRun(1, 1, RAN)}
    assert choose(outcome_of(runs, (Group("k", (2,)),))) is runs[2]
    assert choose(outcome_of(runs)) is runs[1]
    timed_out = {1: SampleRun(1, 1, None), 2: SampleRun(2, 2, FAILED)}
    assert choose(outcome_of(timed_out)) is timed_out[2]
    assert choose(outcome_of({0: SampleRun(0, 0, None)})) is None


def test_agreement_is_none_when_the_answer_has_no_sql_that_ran() -> None:
    """1.0 for one sample that ran, votes/K with a vote, None for a failure or an uncompared result."""

    def agreement(runs: dict[int, SampleRun], groups: tuple[Group, ...] = (), samples: int = 3) -> float | None:
        outcome = outcome_of(runs, groups, samples)
        return SampledAnswer(outcome, choose(outcome)).agreement

    assert agreement({0: SampleRun(0, None, RAN)}, samples=1) == 1.0
    assert agreement({0: SampleRun(0, None, FAILED)}, samples=1) is None
    assert agreement({0: SampleRun(0, 0, RAN), 1: SampleRun(1, 1, RAN)}, (Group("k", (0, 1)),)) == 0.667
    assert agreement({0: SampleRun(0, 0, FAILED), 1: SampleRun(1, 1, RAN)}) is None
    assert agreement({0: SampleRun(0, 0, FAILED), 1: SampleRun(1, 1, FAILED)}) is None


def test_summary_text_says_what_the_vote_says() -> None:
    """Agreement, stopped and abstaining samples, other answers; and the two no-vote cases."""
    fence = partial("<{}>".format)
    voted = VoteSummary(
        4,
        3,
        (Candidate("SELECT 1", 2, 1, "submitted"), Candidate("SELECT 2", 1, 5, "fallback")),
        answer_ran=True,
    )
    assert summary_text(voted, fence=fence) == (
        "2 of 4 samples agree on this result. The other 1 was stopped once a majority agreed.\n"
        "Other answers:\n- 1 sample, 5 rows:\n<SELECT 2>"
    )
    alone = VoteSummary(3, 3, (Candidate("SELECT 1", 1, 1, "submitted"),), answer_ran=True)
    assert summary_text(alone) == (
        "No two samples agree: treat this answer as a guess.\n2 samples produced nothing runnable."
    )
    assert summary_text(VoteSummary(3, 3, (), answer_ran=False)) == (
        "None of the 3 samples produced SQL that ran."
    )
    assert summary_text(VoteSummary(2, 2, (), answer_ran=True)) == (
        "No sample's result could be compared with the others' (too many rows, or it failed when run "
        "again): treat this answer as a guess."
    )

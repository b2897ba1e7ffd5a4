"""The shared vote: groups by result, ties, abstentions, the early stop, errors, seeds."""

from __future__ import annotations

import json
from collections.abc import Hashable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.backends.base import SamplingSettings
from agent.commands.cli import main
from agent.demo import ensure_demo_database
from agent.errors import BackendUnreachable
from agent.evaluation.datasets import load_dataset, select_examples
from agent.evaluation.runner import EvalSettings, evaluate
from agent.sampling import SampleBackends, sample_seeds
from agent.sqlite import QueryResult, QueryStatus, create_database
from agent.voting import Group, MatchRule, Tally, answer_key, run_samples
from tests.support.mcp import BOOK_GOLD
from tests.support.policies import (
    OraclePolicy,
    PolicyBackend,
    ScriptedReply,
    ScriptPolicy,
    SeedSwitchPolicy,
    assistant_reply,
    tool_call,
)


def tally_of(keys: list[Hashable | None], order: list[int] | None = None) -> Tally:
    tally = Tally(len(keys))
    for k in order or range(len(keys)):
        tally.add(k, keys[k])
    return tally


def test_groups_most_votes_first_ties_to_the_earliest_sample() -> None:
    """Largest group first; equal groups in order of their first sample, whatever finished first."""
    tally = tally_of(["b", "a", None, "a", "b", "c"], order=[5, 4, 3, 2, 1, 0])
    assert tally.groups() == (Group("b", (0, 4)), Group("a", (1, 3)), Group("c", (5,)))
    assert (tally.winner(), tally.has_majority(), tally.arrivals) == (0, False, [5, 4, 3, 2, 1, 0])


def test_majority_is_strict_and_abstentions_count_in_k() -> None:
    """3 of 5 is a majority; 2 of 4 is not; None abstains but still counts in K."""
    assert tally_of(["x", "x", "x", None, None]).has_majority()
    assert not tally_of(["x", "x", "y", None]).has_majority()
    assert tally_of([None, None]).winner() is None


def test_answer_key_is_the_eval_comparison_and_skips_what_cannot_be_compared() -> None:
    """Equal multisets vote together in any order; failed, capped or missing results abstain."""
    ok = QueryResult(QueryStatus.OK, ("n",), ((1,), (2,), (2,)), 3)
    reordered = QueryResult(QueryStatus.OK, ("m",), ((2,), (1,), (2,)), 3)
    assert answer_key(ok, "a", MatchRule.MULTISET) == answer_key(reordered, "b", MatchRule.MULTISET)
    assert answer_key(ok, "a", MatchRule.MULTISET) != answer_key(
        QueryResult(QueryStatus.OK, ("n",), ((1,), (2,)), 2), "c", MatchRule.MULTISET
    )
    capped = QueryResult(QueryStatus.OK, ("n",), ((1,),), 2)
    failed = QueryResult(QueryStatus.SQL_ERROR, error="no such table")
    assert [
        answer_key(capped, "x", MatchRule.SET),
        answer_key(failed, "x", MatchRule.SET),
        answer_key(None, None, MatchRule.SET),
    ] == [None, None, None]


@pytest.mark.anyio
async def test_early_stop_cancels_the_samples_still_running() -> None:
    """Samples 0-2 agree at once, 3 and 4 would run for ever: they are cancelled, not awaited."""
    cancelled: list[int] = []

    async def one(k: int) -> tuple[str, Hashable | None]:
        if k >= 3:
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.append(k)
        await anyio.sleep(0.01 * k)
        return f"answer {k}", "same"

    with anyio.fail_after(5):
        outcome = await run_samples(5, one)
    assert (
        dict(outcome.results),
        outcome.winner,
        outcome.agreement,
        outcome.cancelled,
        outcome.stopped_early,
    ) == ({0: "answer 0", 1: "answer 1", 2: "answer 2"}, 0, 0.6, (3, 4), True)
    assert sorted(cancelled) == [3, 4]


@pytest.mark.anyio
async def test_without_early_stop_every_sample_runs() -> None:
    """early_stop=False waits for all K even after a majority."""

    async def one(k: int) -> tuple[int, Hashable | None]:
        await anyio.sleep(0.05 if k == 2 else 0)
        return k, "same" if k < 2 else "other"

    outcome = await run_samples(3, one, early_stop=False)
    assert (sorted(outcome.results), outcome.groups, outcome.stopped_early) == (
        [0, 1, 2],
        (Group("same", (0, 1)), Group("other", (2,))),
        False,
    )


@pytest.mark.anyio
async def test_our_error_in_one_sample_cancels_the_rest_and_comes_out_as_itself() -> None:
    """A BackendError is raised as itself (not an ExceptionGroup) and stops the other samples."""
    stopped: list[int] = []

    async def one(k: int) -> tuple[int, Hashable | None]:
        if k == 1:
            raise BackendUnreachable("Ollama is not reachable")
        try:
            await anyio.sleep_forever()
        finally:
            stopped.append(k)
        return k, None

    with pytest.raises(BackendUnreachable, match="Ollama is not reachable"), anyio.fail_after(5):
        await run_samples(3, one)
    assert sorted(stopped) == [0, 2]


@pytest.mark.anyio
async def test_on_finished_sees_each_sample_with_the_tally() -> None:
    """The callback runs once per finished sample, after its vote is counted."""
    seen: list[tuple[int, int]] = []

    async def one(k: int) -> tuple[int, Hashable | None]:
        await anyio.sleep(0.02 * k)
        return k, k % 2

    async def finished(k: int, value: int, tally: Tally) -> None:
        seen.append((k, len(tally.arrivals)))

    await run_samples(4, one, early_stop=False, on_finished=finished)
    assert seen == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_seeds_are_consecutive_and_one_sample_keeps_its_seed() -> None:
    """seed + k for K samples; K = 1 keeps the given seed (None: the runtime's own)."""
    assert sample_seeds(3, 40) == (40, 41, 42)
    assert sample_seeds(1, None) == (None,)
    drawn = sample_seeds(4, None)
    assert drawn == tuple(range(drawn[0], drawn[0] + 4))


def test_seeded_backends_share_the_original() -> None:
    """Each sample's backend samples with its seed and records into the original's request list."""
    backend = PolicyBackend(OraclePolicy({}), sampling=SamplingSettings(temperature=0.6))
    twins = SampleBackends.seeded(backend, 2, 7).backends
    assert [(t.sampling.seed, t.sampling.temperature, t.requests is backend.requests) for t in twins] == [
        (7, 0.6, True),
        (8, 0.6, True),
    ]
    assert SampleBackends.seeded(backend, 1, None).backends == (backend,)


STUCK = ScriptPolicy([ScriptedReply(tool_call("list_tables"), delay=60)])


def test_ask_votes_over_samples_and_stops_the_straggler(
    fake_ollama: Any, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ask --samples 3 --seed 10 on 3 Ollama slots: two agree, the third is stopped; text and JSON say so."""
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "3")
    question = "How many books are there?"
    fake = fake_ollama(SeedSwitchPolicy({10: OraclePolicy(BOOK_GOLD), 11: OraclePolicy(BOOK_GOLD), 12: STUCK}))
    demo = ensure_demo_database(tmp_path / "cache")
    argv = ["ask", "--db", str(demo), "--ollama-host", fake.url, "--samples", "3", "--seed", "10", question]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.endswith(
        "\n\n2 of 3 samples agree on this result. The other 1 was stopped once a majority agreed.\n"
    )
    assert main([*argv[:-1], "--json", question]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {k: data[k] for k in ("sql", "samples", "samples_finished", "agreement", "candidates")} == {
        "sql": BOOK_GOLD[question],
        "samples": 3,
        "samples_finished": 2,
        "agreement": 0.667,
        "candidates": [{"sql": BOOK_GOLD[question], "votes": 2, "row_count": 1, "status": "submitted"}],
    }
    assert fake.wait_for_disconnects(2, timeout=10)


@pytest.mark.parametrize("early_stop", [True, False])
def test_eval_uses_the_same_vote_with_early_stop_switchable(tmp_path: Path, early_stop: bool) -> None:
    """eval: two right samples decide; the slow third is cancelled, or with no early stop runs too."""
    question, gold = "How many customers are there?", "SELECT count(*) FROM customer"
    create_database(
        tmp_path / "database" / "shop" / "shop.sqlite",
        "CREATE TABLE customer (id INTEGER PRIMARY KEY); INSERT INTO customer VALUES (1), (2);",
    )
    (tmp_path / "dev.json").write_text(json.dumps([{"db_id": "shop", "question": question, "query": gold}]))
    dataset = load_dataset(tmp_path)
    # With the early stop the slow sample would take a minute: only cancelling it ends the test.
    slow = ScriptPolicy(
        [
            ScriptedReply(
                assistant_reply("wait", tool_call("submit_sql", sql="SELECT 5")),
                delay=60 if early_stop else 0.3,
            )
        ]
    )
    policy = SeedSwitchPolicy({0: OraclePolicy({question: gold}), 1: OraclePolicy({question: gold}), 2: slow})
    result = anyio.run(
        partial(
            evaluate,
            dataset,
            select_examples(dataset),
            lambda s: PolicyBackend(policy, sampling=s),
            model="m",
            out_path=tmp_path / "r.jsonl",
            settings=EvalSettings(samples=3, concurrency=3, early_stop=early_stop),
        )
    )
    record = result.records[0]
    assert (record.correct, record.voted_sample, record.stopped_early) == (True, 0, early_stop)
    assert [s.outcome.value for s in record.samples] == (
        ["correct", "correct", "cancelled"] if early_stop else ["correct", "correct", "wrong_result"]
    )
    assert (record.single_correct, record.vote_counts) == ((1.0, [2]) if early_stop else (2 / 3, [2, 1]))

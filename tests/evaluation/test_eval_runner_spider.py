"""Whole evaluation runs on Spider dev with scripted models: oracle, wrong SQL, voting, resume after a cut."""

from __future__ import annotations

import anyio
import pytest

from agent.evaluation.datasets import Dataset, Selection, load_dataset, select_examples
from agent.evaluation.records import read_records
from agent.evaluation.runner import EvalSettings, evaluate
from tests.conftest import SHARED_DATA
from tests.support.eval_runs import MODEL, backends_of, oracle_for, run_eval, submits, summary_of, verdicts
from tests.support.policies import SeedSwitchPolicy

SPIDER = SHARED_DATA / "spider_dev"
needs_spider = pytest.mark.needs_shared("spider_dev")


@pytest.fixture(scope="module")
def spider() -> Dataset:
    if not SPIDER.is_dir():
        pytest.skip("../shared/data/spider_dev is absent")
    return load_dataset(SPIDER)


def spider_slice(spider: Dataset) -> Selection:
    """The first 40 runnable questions plus three of each difficulty from later on."""
    runnable = select_examples(spider).examples
    chosen = {e.index: e for e in runnable[:40]}
    for level in ("easy", "medium", "hard", "extra"):
        chosen |= {e.index: e for e in [e for e in runnable[40:] if e.difficulty == level][:3]}
    return Selection(tuple(chosen[i] for i in sorted(chosen)), ())


@needs_spider
def test_oracle_scores_every_spider_question(spider, tmp_path):
    """An oracle submitting the gold SQL scores 100% overall and at every difficulty."""
    selection = spider_slice(spider)
    result = run_eval(spider, selection, backends_of(oracle_for(spider)), tmp_path / "r.jsonl", concurrency=4)
    summary = summary_of(result, spider)
    assert (summary.questions.scored, summary.accuracy.correct, summary.accuracy.ex) == (52, 52, 1.0)
    assert {level: acc.ex for level, acc in summary.by_difficulty.items()} == {
        "easy": 1.0,
        "medium": 1.0,
        "hard": 1.0,
        "extra": 1.0,
    }
    assert (summary.episodes.by_status, summary.episodes.outcomes) == ({"submitted": 52}, {"correct": 52})
    assert summary.gold_errors == {}
    assert len(read_records(tmp_path / "r.jsonl")) == 52


@needs_spider
def test_oracle_sees_every_gold_table(spider, tmp_path):
    """The oracle runs the gold SQL itself (repeated SQL included), so its episodes cover every gold table."""
    selection = select_examples(spider, limit=60)
    result = run_eval(spider, selection, backends_of(oracle_for(spider)), tmp_path / "r.jsonl")
    assert summary_of(result, spider).episodes.saw_gold_tables == 1.0


@needs_spider
def test_wrong_sql_scores_zero(spider, tmp_path):
    """A model that always submits an unrelated query scores 0%, each answer a wrong result."""
    selection = select_examples(spider, limit=30)
    result = run_eval(spider, selection, backends_of(submits("SELECT -987654321")), tmp_path / "r.jsonl")
    summary = summary_of(result, spider)
    assert (summary.accuracy.correct, summary.accuracy.ex) == (0, 0.0)
    assert summary.episodes.outcomes == {"wrong_result": 30}


@needs_spider
def test_voting_beats_single_samples(spider, tmp_path):
    """Right on samples 0 and 2, wrong (differently) on 1 and 3: voted 100%, single 50%."""
    selection = select_examples(spider, offset=100, limit=20)
    policy = SeedSwitchPolicy(
        {0: oracle_for(spider), 1: submits("SELECT -1"), 2: oracle_for(spider), 3: submits("SELECT -3")}
    )
    result = run_eval(spider, selection, backends_of(policy), tmp_path / "r.jsonl", samples=4, concurrency=3)
    summary = summary_of(result, spider, samples=4)
    assert (summary.accuracy.ex, summary.accuracy.single, summary.accuracy.any) == (1.0, 0.5, 1.0)
    record = result.records[0]
    assert ([s.seed for s in record.samples], [s.correct for s in record.samples]) == (
        [0, 1, 2, 3],
        [True, False, True, False],
    )
    assert (record.voted_sample, record.vote_counts, record.correct) == (0, [2, 1, 1], True)


@needs_spider
def test_vote_ties_go_to_the_earliest_sample(spider, tmp_path):
    """Wrong first, right second, one vote each: the earlier (wrong) answer is the voted one."""
    selection = select_examples(spider, limit=5)
    policy = SeedSwitchPolicy({7: submits("SELECT -1"), 8: oracle_for(spider)})
    result = run_eval(spider, selection, backends_of(policy), tmp_path / "r.jsonl", samples=2, seed=7)
    summary = summary_of(result, spider, samples=2)
    assert (summary.accuracy.ex, summary.accuracy.single, summary.accuracy.any) == (0.0, 0.5, 1.0)
    assert {(r.voted_sample, r.predicted_sql) for r in result.records} == {(0, "SELECT -1")}


class StopAfter:
    """A progress sink that cancels the run after `count` questions (an interrupted run)."""

    def __init__(self, scope: anyio.CancelScope, count: int) -> None:
        self.scope, self.count, self.seen = scope, count, 0

    def add_resumed(self, records) -> None:
        self.resumed = list(records)

    def update(self, record) -> None:
        self.seen += 1
        if self.seen == self.count:
            self.scope.cancel()

    def close(self) -> None:
        pass


@needs_spider
def test_resume_after_interruption_gives_the_same_summary(spider, tmp_path):
    """Cut a run after 12 questions (and mid-line), resume it: the summary equals an uninterrupted run's."""
    selection = select_examples(spider, offset=200, limit=30)
    policy = SeedSwitchPolicy({0: oracle_for(spider), 1: submits("SELECT 1")})
    whole = run_eval(spider, selection, backends_of(policy), tmp_path / "whole.jsonl", samples=2, concurrency=2)
    out = tmp_path / "cut.jsonl"

    async def interrupted() -> None:
        with anyio.CancelScope() as scope:
            await evaluate(
                spider,
                selection,
                backends_of(policy),
                model=MODEL,
                out_path=out,
                settings=EvalSettings(samples=2, concurrency=2),
                progress=StopAfter(scope, 12),
            )

    anyio.run(interrupted)
    assert len(read_records(out)) == 12
    with out.open("a", encoding="utf-8") as fh:
        fh.write('{"key": "torn')  # killed while writing a line
    resumed = run_eval(spider, selection, backends_of(policy), out, resume=True, samples=2, concurrency=2)
    assert (resumed.resumed, resumed.ran) == (12, 18)
    assert verdicts(summary_of(resumed, spider, 2)) == verdicts(summary_of(whole, spider, 2))
    assert len(out.read_text(encoding="utf-8").splitlines()) == 30

"""The HTML report's numbers, computed from runs of scripted policies whose outcomes are known.

Run A (report_runs.py): Q0 right, Q1 wrong result, Q2 no SQL after six list_tables rounds, Q3
right, Q4's gold SQL fails. Run B flips Q0 (wrong) and Q1 (right).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.evaluation.html_report.data import (
    DATABASE,
    DIFFICULTY,
    GoldTablesTable,
    GroupAccuracy,
    Run,
    ToolRounds,
    accuracy_by,
    align_groups,
    bin_edges,
    distributions,
    gold_tables_table,
    histogram,
    load_run,
    outcome_mix,
    pair_runs,
    sign_test,
    status_mix,
    stop_reason_mix,
    tool_rounds,
    unmatched_rows,
)
from agent.evaluation.html_report.sections import run_settings
from agent.evaluation.records import RowsPreview, TraceKind, read_records
from tests.support.report_runs import run, run_a_policy, run_b_policy, write_dataset


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Results files of run A, run B and run A without traces."""
    root = tmp_path_factory.mktemp("report-data")
    dataset = write_dataset(root / "set")
    return {
        "a": run(dataset, run_a_policy(), root / "a.jsonl"),
        "b": run(dataset, run_b_policy(), root / "b.jsonl"),
        "a-untraced": run(dataset, run_a_policy(), root / "a-none.jsonl", trace=TraceKind.NONE),
    }


@pytest.fixture(scope="module")
def run_a(runs: dict[str, Path]) -> Run:
    """Run A as the report loads it."""
    return load_run(runs["a"])


def test_accuracy_by_difficulty_in_benchmark_order(run_a):
    """Difficulty groups come in Spider's order with voted counts; the gold error is left out."""
    assert accuracy_by(run_a.records, DIFFICULTY) == [
        GroupAccuracy("easy", 1, 2),
        GroupAccuracy("medium", 1, 1),
        GroupAccuracy("hard", 0, 1),
    ]


def test_accuracy_by_database_best_first(run_a):
    """Databases are sorted by accuracy, then by size."""
    assert accuracy_by(run_a.records, DATABASE) == [GroupAccuracy("zoo", 1, 1), GroupAccuracy("shop", 1, 3)]


def test_episode_mixes(run_a):
    """Status, stop reason and outcome counts over the four scored episodes."""
    assert status_mix(run_a) == {"submitted": 3, "failed": 1}
    assert stop_reason_mix(run_a) == {"submit_sql": 3, "tool_turns_used": 1}
    assert outcome_mix(run_a) == {"correct": 2, "no_sql": 1, "wrong_result": 1}


def test_distributions_split_by_correct(run_a):
    """Rounds and tool calls per episode, right and wrong apart; tokens and seconds for the same episodes."""
    by_name = {d.name: d for d in distributions(run_a)}
    assert (by_name["rounds"].correct, by_name["rounds"].wrong) == ((3, 3), (2, 7))
    assert (by_name["tool_calls"].correct, by_name["tool_calls"].wrong) == ((3, 3), (2, 6))
    assert [(len(d.correct), len(d.wrong), d.discrete) for d in (by_name["tokens"], by_name["seconds"])] == [
        (2, 2, False),
        (2, 2, False),
    ]


def test_tools_by_round(run_a):
    """Calls per (round, tool) from the traces: oracle list/run/submit, a wrong submit, six list_tables."""
    assert tool_rounds(run_a) == ToolRounds(
        rounds=("1", "2", "3", "4", "5", "6"),
        tools=("list_tables", "submit_sql", "run_query"),
        counts={
            ("1", "list_tables"): 4,
            ("2", "run_query"): 2,
            ("2", "submit_sql"): 1,
            ("2", "list_tables"): 1,
            ("3", "submit_sql"): 2,
            ("3", "list_tables"): 1,
            ("4", "list_tables"): 1,
            ("5", "list_tables"): 1,
            ("6", "list_tables"): 1,
        },
        traced=4,
    )


def test_tools_by_round_without_traces(runs):
    """A run kept with --trace none has no tool chart data."""
    assert tool_rounds(load_run(runs["a-untraced"])) == ToolRounds((), (), {}, 0)


def test_gold_tables_against_correct(run_a):
    """The oracle and the wrong submit read customer/animal; listing tables alone sees none."""
    assert gold_tables_table(run_a) == GoldTablesTable(
        saw_correct=2, saw_wrong=1, missed_correct=0, missed_wrong=1
    )


def test_gold_failures_apart(run_a):
    """The question whose gold SQL fails is not scored and is listed apart."""
    assert [r.key for r in run_a.gold_failures] == ["4"]
    assert ([r.key for r in run_a.scored], run_a.samples) == (["0", "1", "2", "3"], 1)


def test_records_keep_first_rows_and_run_settings(runs):
    """Each line carries the gold and predicted first rows and how the run was set up."""
    record = read_records(runs["a"])["1"]
    assert record.gold.preview == RowsPreview(columns=["name"], rows=[["Ann"], ["Cy"]])
    assert record.samples[0].preview == RowsPreview(columns=["name"], rows=[["Bob"]])
    assert record.run is not None
    assert {k: record.run.settings[k] for k in ("samples", "seed", "trace", "max_tool_turns")} == {
        "samples": 1,
        "seed": 0,
        "trace": "full",
        "max_tool_turns": 6,
    }


def test_files_written_before_the_report_still_load(runs, tmp_path):
    """A line without previews or run settings (the old format) loads; the report has less to show."""
    old_lines = []
    for line in runs["a"].read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        data.pop("run")
        data["gold"].pop("preview")
        for sample in data["samples"]:
            sample.pop("preview")
        old_lines.append(json.dumps(data))
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join(old_lines) + "\n", encoding="utf-8")
    loaded = load_run(old)
    assert [(r.key, r.correct, r.run, r.gold.preview) for r in loaded.records] == [
        ("0", True, None, None),
        ("1", False, None, None),
        ("2", False, None, None),
        ("3", True, None, None),
        ("4", None, None, None),
    ]


def test_pairing_two_runs(run_a, runs):
    """Paired counts: Q3 right in both, Q0 right in A only, Q1 in B only, Q2 in neither."""
    pairing = pair_runs(run_a, load_run(runs["b"]))
    assert (pairing.both, pairing.a_only, pairing.b_only, pairing.neither) == (1, 1, 1, 1)
    assert (pairing.difference, pairing.p_value, pairing.only_a, pairing.only_b) == (0.0, 1.0, 0, 0)
    assert [(a.key, a.correct, b.correct) for a, b in pairing.flipped] == [
        ("0", True, False),
        ("1", False, True),
    ]


def test_runs_of_different_questions_do_not_pair(run_a):
    """Two runs with no question in common are refused with a message saying so."""
    renamed = tuple(r.model_copy(update={"question": r.question + "?"}) for r in run_a.records)
    other = Run("other.jsonl", renamed)
    with pytest.raises(ConfigError, match="share no scored question"):
        pair_runs(run_a, other)


@pytest.mark.parametrize(("x", "y", "p"), [(0, 0, 1.0), (3, 3, 1.0), (0, 6, 0.03125), (1, 9, 0.021484375)])
def test_sign_test(x, y, p):
    """Exact two-sided McNemar p-values."""
    assert sign_test(x, y) == pytest.approx(p)


def test_histogram_bins():
    """Whole-number data get one bin per value; the last bin includes its upper edge."""
    edges = bin_edges([2, 3, 3, 7], discrete=True)
    assert edges == [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5]
    assert histogram([2, 3, 3, 7], edges) == [1, 2, 0, 0, 0, 1]
    continuous = bin_edges([0.0, 1.0], discrete=False, bins=4)
    assert (continuous, histogram([0.0, 0.5, 1.0], continuous)) == ([0.0, 0.25, 0.5, 0.75, 1.0], [1, 0, 1, 1])


def test_unmatched_rows():
    """Rows marked when the other side lacks them: as a multiset, by position, or in any column order."""
    gold = RowsPreview(columns=["a", "b"], rows=[[1, "x"], [2, "y"], [2, "y"]])
    pred = RowsPreview(columns=["b", "a"], rows=[["y", 2.0], ["x", 1], ["z", 3]])
    assert unmatched_rows(pred, gold, ordered=False, any_column_order=True) == [False, False, True]
    assert unmatched_rows(gold, pred, ordered=False, any_column_order=True) == [False, False, True]
    assert unmatched_rows(pred, gold, ordered=False, any_column_order=False) == [True, True, True]
    assert unmatched_rows(pred, gold, ordered=True, any_column_order=True) == [True, True, True]
    same_order = RowsPreview(columns=["a", "b"], rows=[[1, "x"], [2, "z"]])
    assert unmatched_rows(same_order, gold, ordered=True, any_column_order=False) == [False, True]


def test_groups_aligned_for_two_runs():
    """Side-by-side charts list the same groups in one order; a group missing on one side is 0 of 0."""
    a = [GroupAccuracy("zoo", 1, 1), GroupAccuracy("shop", 1, 3)]
    b = [GroupAccuracy("shop", 2, 3), GroupAccuracy("farm", 0, 2)]
    assert align_groups(a, b) == (
        [GroupAccuracy("zoo", 1, 1), GroupAccuracy("shop", 1, 3), GroupAccuracy("farm", 0, 0)],
        [GroupAccuracy("zoo", 0, 0), GroupAccuracy("shop", 2, 3), GroupAccuracy("farm", 0, 2)],
    )


def test_early_stopped_samples_and_unset_slots_read_as_what_they_are(runs, tmp_path):
    """A sample cancelled because the vote was decided is `stopped early`, not a backend error; runtime
    slots left unset are the concurrency the run used, not `None`."""
    lines = []
    for line in runs["a"].read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        data["run"]["settings"].update(runtime_slots=None, concurrency=4)
        if data["key"] == "3":
            data["samples"][0].update(outcome="cancelled", status="cancelled", stop_reason=None)
        lines.append(json.dumps(data))
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n", encoding="utf-8")
    loaded = load_run(edited)
    assert stop_reason_mix(loaded) == {
        "submit_sql": 2,
        "tool_turns_used": 1,
        "stopped early (the vote was decided)": 1,
    }
    settings = run_settings(loaded)
    assert (settings["runtime slots"], settings["concurrency"]) == ("4 (the concurrency)", "4")

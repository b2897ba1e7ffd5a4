"""The run summary: computed from the result records alone, rendered as JSON and as a table.

Everything outside `timing` depends only on the records' verdicts and counts, so a run
resumed after an interruption summarises exactly like an uninterrupted one.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..text import plural
from .records import BACKEND_ERROR_STATUS, CANCELLED_STATUS, QuestionRecord

# Benchmarks' own difficulty orders; other labels follow alphabetically.
DIFFICULTY_ORDER = ("easy", "medium", "hard", "extra", "simple", "moderate", "challenging")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Accuracy(_Model):
    """Execution accuracy over scored questions (gold errors excluded)."""

    questions: int
    correct: int  # voted answers that were right
    ex: float | None  # correct / questions (the voted answer; with one sample, the answer)
    single: float | None  # mean share of right samples per question
    any: float | None  # share of questions with at least one right sample


class QuestionCounts(_Model):
    selected: int  # questions chosen to run
    missing_db: int  # questions matching the filters but left out: their database file is missing
    missing_db_ids: list[str]
    evaluated: int  # with a record
    gold_errors: int  # the gold SQL failed: reported apart, not scored
    scored: int  # the accuracy denominator


class EpisodeStats(_Model):
    total: int
    by_status: dict[str, int]  # submitted / final_answer / fallback / failed / backend_error
    outcomes: dict[str, int]  # correct, wrong_result and every error kind
    mean_rounds: float | None  # over episodes that ran (backend failures excluded)
    mean_tool_calls: float | None
    mean_tokens: float | None
    saw_gold_tables: float | None  # share of episodes that looked at every table the gold reads


class Timing(_Model):
    mean_question_seconds: float | None
    mean_episode_seconds: float | None
    mean_model_seconds: float | None
    mean_tool_seconds: float | None


class Asking(_Model):
    """The questions whose samples disagreed, where the server asks a person to choose (agent.choices):
    how often the right answer was among the options, against how often the vote's was right."""

    questions: int  # scored questions whose samples' results disagreed
    right_offered: int  # the right answer was among the options
    vote_right: int  # the vote's answer was right
    right_not_offered: int  # a sample was right, but not an option's (past the options shown)
    offered: float | None  # right_offered / questions
    vote: float | None  # vote_right / questions


class Summary(_Model):
    benchmark: str
    model: str
    samples: int
    environment: str | None  # the texts the model read (trained or rich; "trained / rich" if mixed)
    questions: QuestionCounts
    accuracy: Accuracy
    by_difficulty: dict[str, Accuracy]
    by_database: dict[str, Accuracy]
    # Accuracy by how many of the K samples agreed with the answer ("3 of 5 agree"), most first,
    # then "no SQL ran": how far agreement can be trusted on these questions. Empty with K = 1.
    by_agreement: dict[str, Accuracy]
    episodes: EpisodeStats
    mean_tokens_per_question: float | None
    gold_errors: dict[str, int]  # by the gold query's status
    backend_failures: int  # episodes that failed in the model runtime (counted wrong; --resume retries)
    timing: Timing
    asking: Asking | None = None  # with K > 1: what asking a person could have done when samples disagreed


def summarize(
    records: Sequence[QuestionRecord],
    *,
    benchmark: str,
    model: str,
    samples: int,
    selected: int,
    missing_db_ids: Sequence[str] = (),
    missing_db: int = 0,
) -> Summary:
    """Aggregate the records of one selection (any order) into the summary."""
    ordered = sorted(records, key=lambda r: r.index)
    scored = [r for r in ordered if not r.gold_error]
    episodes = [s for r in scored for s in r.samples]
    ran = [s for s in episodes if s.status not in (BACKEND_ERROR_STATUS, CANCELLED_STATUS)]
    backend_failed = sum(s.status == BACKEND_ERROR_STATUS for s in episodes)
    levels = sorted({lv for r in scored for lv in record_levels(r)}, key=_difficulty_rank)
    agreement_levels = sorted(
        {level for r in scored if (level := agreement_level(r)) is not None}, key=agreement_rank
    )
    return Summary(
        benchmark=benchmark,
        model=model,
        samples=samples,
        environment=_environment(ordered),
        questions=QuestionCounts(
            selected=selected,
            missing_db=missing_db,
            missing_db_ids=list(missing_db_ids),
            evaluated=len(ordered),
            gold_errors=len(ordered) - len(scored),
            scored=len(scored),
        ),
        accuracy=_accuracy(scored),
        by_difficulty={lv: _accuracy([r for r in scored if lv in record_levels(r)]) for lv in levels},
        by_database={
            db: _accuracy([r for r in scored if r.db_id == db]) for db in sorted({r.db_id for r in scored})
        },
        by_agreement={
            level: _accuracy([r for r in scored if agreement_level(r) == level]) for level in agreement_levels
        },
        episodes=EpisodeStats(
            total=len(episodes),
            by_status=_counts(s.status for s in episodes),
            outcomes=_counts(s.outcome.value for s in episodes),
            mean_rounds=_mean([s.rounds for s in ran]),
            mean_tool_calls=_mean([s.tool_calls for s in ran]),
            mean_tokens=_mean([s.tokens for s in ran]),
            saw_gold_tables=_mean([float(bool(s.saw_gold_tables)) for s in ran]),
        ),
        mean_tokens_per_question=_mean([r.tokens for r in scored]),
        gold_errors=_counts(r.gold.status for r in ordered if r.gold_error),
        backend_failures=backend_failed,
        timing=Timing(
            mean_question_seconds=_mean([r.seconds for r in scored]),
            mean_episode_seconds=_mean([s.seconds for s in ran]),
            mean_model_seconds=_mean([s.model_seconds for s in ran]),
            mean_tool_seconds=_mean([s.tool_seconds for s in ran]),
        ),
        asking=asking(scored) if samples > 1 else None,
    )


def asking(scored: Sequence[QuestionRecord]) -> Asking:
    """What asking a person could have done on the scored questions whose samples disagreed."""
    asked = [r for r in scored if r.choice is not None]
    offered = sum(r.choice is not None and r.choice.right is not None for r in asked)
    vote = sum(bool(r.correct) for r in asked)
    missed = sum(bool(r.any_correct) and r.choice is not None and r.choice.right is None for r in asked)
    n = len(asked)
    return Asking(
        questions=n,
        right_offered=offered,
        vote_right=vote,
        right_not_offered=missed,
        offered=offered / n if n else None,
        vote=vote / n if n else None,
    )


NO_SQL_RAN = "no SQL ran"


def agreement_level(record: QuestionRecord) -> str | None:
    """`4 of 5 agree`: how many of the K samples gave the answer's result; `no SQL ran` when the
    answer has none; None with one sample (nothing to agree on) or for a gold error."""
    k = len(record.samples)
    if record.gold_error or k < 2:
        return None
    if record.agreement is None:
        return NO_SQL_RAN
    return f"{round(record.agreement * k)} of {k} agree"


def agreement_rank(level: str) -> tuple[int, str]:
    """Most agreement first (a larger share), `no SQL ran` last."""
    if level == NO_SQL_RAN:
        return (1, "")
    votes, _, rest = level.partition(" of ")
    share = int(votes) / int(rest.split()[0])
    return (0, f"{1 - share:.6f}")


def _environment(records: Sequence[QuestionRecord]) -> str | None:
    seen = dict.fromkeys(
        str(r.run.settings["environment"])
        for r in records
        if r.run is not None and "environment" in r.run.settings
    )
    return " / ".join(seen) or None


def record_levels(record: QuestionRecord) -> tuple[str, ...]:
    """The groups a question counts in: its tags (golden questions), else its difficulty."""
    return tuple(record.tags) or ((record.difficulty,) if record.difficulty else ())


def write_summary(summary: Summary, path: Path) -> None:
    """Write the summary as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")


def render_summary(summary: Summary) -> str:
    """The console table."""
    q, ep = summary.questions, summary.episodes
    multi = summary.samples > 1
    lines = [f"{summary.benchmark} · model {summary.model} · {plural(summary.samples, 'sample')} per question"]
    lines.append(
        f"questions: {q.selected} selected, {q.evaluated} evaluated, "
        f"{q.gold_errors} gold errors, {q.scored} scored"
    )
    if q.missing_db:
        lines.append(
            f"left out: {q.missing_db} questions whose database is missing ({', '.join(q.missing_db_ids)})"
        )
    if summary.gold_errors:
        lines.append("gold errors: " + _pairs(summary.gold_errors))
    header = ["", "n", "voted EX", "single", f"any of {summary.samples}"] if multi else ["", "n", "EX"]
    table = [header, _row("overall", summary.accuracy, multi)]
    if summary.by_difficulty:
        table += [_row(level, acc, multi) for level, acc in summary.by_difficulty.items()]
    lines += ["", *_align(table)]
    if summary.by_database:
        lines += [
            "",
            *_align(
                [["database", *header[1:]], *(_row(db, acc, multi) for db, acc in summary.by_database.items())]
            ),
        ]
    lines += [
        "",
        f"episodes: {ep.total} ({_pairs(ep.by_status)})" if ep.total else "episodes: 0",
        f"outcomes: {_pairs(ep.outcomes)}" if ep.outcomes else "outcomes: -",
        f"per episode: {_num(ep.mean_rounds)} rounds, {_num(ep.mean_tool_calls)} tool calls, "
        f"{_num(ep.mean_tokens, 0)} tokens; looked at every gold table: {_pct(ep.saw_gold_tables)}",
        f"per question: {_num(summary.mean_tokens_per_question, 0)} tokens, "
        f"{_num(summary.timing.mean_question_seconds, 2)} s",
    ]
    if summary.asking is not None and summary.asking.questions:
        a = summary.asking
        lines.append(
            f"samples disagreed on {a.questions} of {q.scored} questions (a person would be asked): "
            f"the right answer was among the options on {a.right_offered} ({_pct(a.offered)}), the "
            f"vote's answer was right on {a.vote_right} ({_pct(a.vote)})"
        )
    if summary.backend_failures:
        lines.append(
            f"backend failures: {summary.backend_failures} episodes counted wrong; rerun "
            "with --resume to retry them"
        )
    return "\n".join(lines) + "\n"


def _accuracy(records: Sequence[QuestionRecord]) -> Accuracy:
    n = len(records)
    correct = sum(bool(r.correct) for r in records)
    return Accuracy(
        questions=n,
        correct=correct,
        ex=correct / n if n else None,
        single=_mean([r.single_correct or 0.0 for r in records]),
        any=_mean([float(bool(r.any_correct)) for r in records]),
    )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _counts(values: Iterable[str]) -> dict[str, int]:
    counted = Counter(values)
    return dict(sorted(counted.items(), key=lambda kv: (-kv[1], kv[0])))


def _difficulty_rank(level: str) -> tuple[int, str]:
    return (DIFFICULTY_ORDER.index(level), "") if level in DIFFICULTY_ORDER else (len(DIFFICULTY_ORDER), level)


def _row(label: str, acc: Accuracy, multi: bool) -> list[str]:
    cells = [label, str(acc.questions), _pct(acc.ex)]
    return [*cells, _pct(acc.single), _pct(acc.any)] if multi else cells


def _align(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


SUMMARY_SUFFIX = ".summary.json"


def summary_path_for(out_path: Path) -> Path:
    """results.jsonl -> results.summary.json, in the same folder."""
    return out_path.with_name(f"{out_path.stem}{SUMMARY_SUFFIX}")


def results_path_for(summary_path: Path) -> Path:
    """results.summary.json -> results.jsonl: the results file a summary was written beside."""
    return summary_path.with_name(f"{summary_path.name.removesuffix(SUMMARY_SUFFIX)}.jsonl")

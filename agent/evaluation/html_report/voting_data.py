"""What the report shows of the samples' vote (pure): each question's results with their votes,
the calibration (accuracy by how many of the K samples agreed), and what asking a person to
choose could have done where the samples disagreed."""

from __future__ import annotations

from dataclasses import dataclass

from ..records import QuestionRecord
from ..summary import agreement_level, agreement_rank
from .data import GroupAccuracy, Grouping, Run, accuracy_by

# How many of the K samples agreed with the answer: accuracy per level is the calibration chart.
AGREEMENT = Grouping("agreement", lambda r: (level,) if (level := agreement_level(r)) else (), agreement_rank)


def calibration(run: Run) -> list[GroupAccuracy]:
    """Accuracy by agreement level (`5 of 5 agree` first): how far to trust agreement on this data."""
    return accuracy_by(run.records, AGREEMENT)


def asking(run: Run) -> list[GroupAccuracy]:
    """On the scored questions whose samples disagreed (where the server asks a person): how often the
    vote's answer was right, the right answer was among the options, and any sample was right."""
    asked = [r for r in run.scored if r.choice is not None]
    n = len(asked)
    return [
        GroupAccuracy("the vote's answer", sum(bool(r.correct) for r in asked), n),
        GroupAccuracy(
            "among the options", sum(r.choice is not None and r.choice.right is not None for r in asked), n
        ),
        GroupAccuracy("any sample", sum(bool(r.any_correct) for r in asked), n),
    ]


def stopped_early(run: Run) -> int:
    """Scored questions whose other samples were stopped once a strict majority agreed."""
    return sum(r.stopped_early for r in run.scored)


@dataclass(frozen=True)
class CandidateView:
    """One distinct result among a question's samples, as its earliest sample gave it."""

    samples: tuple[int, ...]  # the samples that gave it
    sql: str | None
    rows: int | None
    correct: bool
    chosen: bool  # the answer's result

    @property
    def votes(self) -> int:
        """Samples that gave this result."""
        return len(self.samples)


def candidates(record: QuestionRecord) -> list[CandidateView]:
    """The question's results with their votes, most first (empty for files without vote groups)."""
    by_index = {s.sample: s for s in record.samples}
    out = []
    for members in record.vote_groups:
        first = by_index.get(members[0])
        if first is None:
            continue
        out.append(
            CandidateView(
                tuple(members), first.sql, first.result_rows, first.correct, record.voted_sample in members
            )
        )
    return out

"""What the report shows of the samples' vote (pure): each question's results with their votes,
and the calibration, accuracy by how many of the K samples agreed."""

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
        out.append(CandidateView(tuple(members), first.sql, first.result_rows, first.correct,
                                 record.voted_sample in members))
    return out

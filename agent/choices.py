"""What a person is asked when a question's samples disagree: one option per distinct result.

The one place the server's form, the answer view and `eval` get the options from (pure):
- whether to ask (`should_ask`): with K >= 2 samples whose results fall into more than one
  group (agent/sampling.py's groups), or into any group at all with `always`;
- the options: the vote's groups, most votes first, at most MAX_OPTIONS of them (the form adds
  "None of these"); each is one line a person can judge without reading SQL: the result in
  brief ("130 (1 row)", "50 rows, first: Iron Maiden, 213"), its votes, and what sets its SQL
  apart from the other options' (`sql_differences`: the differing filter, join, grouping...),
  computed from the SQL texts alone, never by another model call;
- every label is data from the database and the model: comments are never quoted, and the
  text is one plain line, bounded, with nothing a renderer could make markup or a link of
  (agent.text.plain_label).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .sql_differences import differences_text
from .text import plain_label, plural

if TYPE_CHECKING:  # the sampling loads the episode's loop; the settings read AskMode without it
    from .sampling import SampledAnswer

MAX_OPTIONS = 4  # distinct results offered; the rest are counted in the message
OPTION_CHARS = 200  # one option's line
BRIEF_CHARS = 90  # the result in brief, within it
CELL_CHARS = 40  # one cell of the first row
QUESTION_CHARS = 200  # the question quoted in the message
NONE_OF_THESE = "None of these"


class AskMode(StrEnum):
    """When the server asks the person to choose among the samples' results."""

    OFF = "off"
    DISAGREEMENT = "disagreement"  # the samples' results fall into more than one group
    ALWAYS = "always"  # every question with K >= 2 samples and a result to show


def should_ask(mode: AskMode, samples: int, groups: int) -> bool:
    """True when K = `samples` whose results form `groups` distinct results call for asking."""
    if mode is AskMode.OFF or samples < 2 or groups == 0:
        return False
    return mode is AskMode.ALWAYS or groups > 1


@dataclass(frozen=True)
class OptionSource:
    """One distinct result as its earliest sample gave it: what its option line is made of."""

    sql: str
    votes: int
    row_count: int  # rows the SQL produced
    columns: tuple[str, ...] = ()
    first_row: tuple[Any, ...] | None = None  # None: no rows, or not known


@dataclass(frozen=True)
class ChoiceOption:
    """One option of the choice: the vote's group `group` (0: the vote's answer), as one line."""

    group: int
    label: str


@dataclass(frozen=True)
class Choice:
    """What a person is asked about one question."""

    question: str
    samples: int
    options: tuple[ChoiceOption, ...]
    more: int = 0  # distinct results not offered (past MAX_OPTIONS)

    @property
    def message(self) -> str:
        """The form's message: how many answers the model found, and what the person is asked."""
        quoted = f'"{plain_label(self.question, QUESTION_CHARS)}"'
        found = len(self.options) + self.more
        if found == 1:
            head = (
                f"The model's {self.samples} attempts found one answer to {quoted}. Does it answer "
                "your question?"
            )
        else:
            head = f"The model found {found} different answers to {quoted}. Which one answers your question?"
        hidden = (
            (
                f" ({plural(self.more, 'other answer')} with fewer votes "
                f"{'is' if self.more == 1 else 'are'} not shown.)"
            )
            if self.more
            else ""
        )
        return (
            f"{head}{hidden} Each option is its result in brief and what sets its SQL apart; they "
            "quote the database and the model's SQL: data, not instructions."
        )


def choice_of(question: str, sources: Sequence[OptionSource], samples: int) -> Choice:
    """The options for the vote's groups (`sources`, most votes first), at most MAX_OPTIONS."""
    shown = tuple(sources[:MAX_OPTIONS])
    sqls = [s.sql for s in shown]
    options = tuple(
        ChoiceOption(k, option_label(s, samples, differences_text(k, sqls))) for k, s in enumerate(shown)
    )
    return Choice(question, samples, options, more=len(sources) - len(shown))


def sources_of(asked: SampledAnswer) -> tuple[OptionSource, ...]:
    """Each of the vote's groups as its earliest sample gave it (its SQL run whole for the vote)."""
    out = []
    for group in asked.outcome.groups:
        run = asked.outcome.results[group.members[0]]
        result = run.result
        assert result is not None and result.sql is not None  # only samples with SQL that ran vote
        compared = run.compared
        if compared is not None and compared.ok:
            columns, rows, count = compared.columns, compared.rows, compared.total_rows
        else:
            columns, rows, count = result.columns, result.rows, result.row_count
        out.append(OptionSource(result.sql, group.votes, count, tuple(columns), rows[0] if rows else None))
    return tuple(out)


def option_label(source: OptionSource, samples: int, difference: str | None) -> str:
    """One option's line: `130 (1 row) · 2 of 5 samples · filter Genre.Name = 'Jazz'`."""
    brief = result_brief(source.first_row, source.row_count, BRIEF_CHARS)
    parts = [brief, f"{source.votes} of {samples} samples"]
    if difference:
        parts.append(difference)
    return plain_label(" · ".join(parts), OPTION_CHARS)


def result_brief(first_row: Sequence[Any] | None, row_count: int, limit: int = BRIEF_CHARS) -> str:
    """A result in a few words: `130 (1 row)`, `Iron Maiden, 213 (1 row)`, `50 rows, first: ...`."""
    if row_count == 0 or first_row is None:
        return "no rows" if row_count == 0 else plural(row_count, "row")
    cells = ", ".join(cell_text(v) for v in first_row)
    if row_count == 1:
        return (
            plain_label(f"{cells} (1 row)", limit)
            if len(cells) + 8 <= limit
            else f"{plain_label(cells, limit - 8)} (1 row)"
        )
    head = f"{plural(row_count, 'row')}, first: "
    return head + plain_label(cells, max(10, limit - len(head)))


def cell_text(value: Any) -> str:
    """One cell for a person: NULL, a number as written, a blob's size, text clipped to CELL_CHARS."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"blob of {plural(len(value), 'byte')}"
    return plain_label(str(value), CELL_CHARS)

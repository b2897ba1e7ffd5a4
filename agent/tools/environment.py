"""Which environment's texts the model reads: the trained one (default) or our richer one.

The SQaLe authors publish three real episodes with their environment's own tool outputs,
budget lines and final-turn text (../shared/docs/agent-protocol.md, "What the
environment's text looks like"). A 2B model is sensitive to the exact shape of what it
reads, so by default we speak that language ("trained"). Our earlier, richer formats
(aligned grids, row counts, labelled calls, hints in every text) stay available as "rich"
so that the two can be compared with `sqale-agent eval` on a machine that has the model.
Only what the model reads differs: the answer returned to callers is the same.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from enum import StrEnum


class Environment(StrEnum):
    """The profile of texts the model reads in an episode."""

    TRAINED = "trained"  # the authors' environment as observed in their published episodes
    RICH = "rich"  # our own formats: grids with footers, row counts, call headers, hints


DEFAULT_ENVIRONMENT = Environment.TRAINED


@dataclass(frozen=True)
class TrainedTexts:
    """The authors' own templates for texts of the trained environment; None: ours.

    Filled from the string constants of their `sqale_agent.py` that `agent.prompt_files`
    recognises by content; each template's replacement fields are filled in order.
    """

    budget: str | None = None  # one field: the tool turns left
    final: str | None = None  # the final turn's opening; with one field, also the last query that ran
    last_query: str | None = None  # one field: the last query that ran without error
    result_label: str | None = None  # two fields: a result's position and the round's number of results
    more_rows: str | None = None  # one field: the rows shown before more exist
    error: str | None = None  # one field: SQLite's message for a statement that failed


DEFAULT_TRAINED_TEXTS = TrainedTexts()


def template_fields(template: str) -> int | None:
    """How many replacement fields a str.format template has; None when it is not one."""
    try:
        return sum(1 for _, name, _, _ in string.Formatter().parse(template) if name is not None)
    except ValueError:  # a stray brace
        return None


def fill_in_order(template: str, *values: str) -> str:
    """`template` with its replacement fields filled by position.

    Field names, conversions and format specifications are ignored: the authors' field names
    are theirs, and a format specification such as `{:>99999999}` is no business of a label.
    """
    out: list[str] = []
    remaining = iter(values)
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is not None:
            out.append(next(remaining, ""))
    return "".join(out)

"""The template tier: a question read into one verified template's slots, or why it is not.

A question is served from a template only when exactly one template fits it in exactly one way
(templates.TEMPLATE_RULE): its words fit the template's (templates.splits), and each slot's text
reads as one value of the slot's type (slot_types.read_slot), a `value` slot's as one value its
column holds, equal to the text but for the case of A-Z (looked up in the guarded worker under
the database's hide rules, so only visible data is ever a value). Anything else is a miss,
classified (TemplateMiss) so the caller can be told what to write, and a benchmark can count why:

- PARAPHRASE: no template's words fit the question;
- SLOT_NOT_READ: a template's words fit, but a slot's text reads as nothing of its type (not a
  month, outside its bounds, no value of its column);
- AMBIGUOUS: two templates fit, a slot's text reads two ways (`3/5/2024`), a text matches two
  values that differ only in case, or the words fit in more than one way that reads.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from ..golden_file import SlotType
from ..sqlite import Database
from ..text import quoted_text
from .library import LibraryEntry
from .slot_types import SlotValue, ascii_lower, read_slot
from .templates import VALUE_CANDIDATES, FoldedQuestion, fold_question, splits, value_lookup_sql

SHOWN_TEXT_CHARS = 80  # a slot's text, quoted in what the caller is told


class TemplateMiss(StrEnum):
    """Why no template answered a question."""

    PARAPHRASE = "paraphrase"
    SLOT_NOT_READ = "slot_not_read"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class BoundParam:
    """One slot's value as a verified answer used it: read from the question, bound to the SQL."""

    name: str
    type: str  # the slot's type (golden_file.SlotType)
    text: str  # the question's text it was read from
    value: SlotValue  # what the SQL was given as :name


@dataclass(frozen=True)
class TemplateFit:
    """The template that answers a question with its values, or the miss and what to tell the caller."""

    entry: LibraryEntry | None = None
    params: tuple[BoundParam, ...] = ()
    miss: TemplateMiss | None = None
    why: str | None = None  # a miss where a template's words fit: why it was not served
    remedy: str | None = None  # and what the caller can write instead


@dataclass(frozen=True)
class _Reading:
    """What one template made of the question: its distinct bindings, or why it read none."""

    bindings: tuple[tuple[BoundParam, ...], ...] = ()
    why_not: str | None = None
    too_many: bool = False  # the words fit in more than MAX_SPLITS ways


async def fit_template(templates: Sequence[LibraryEntry], database: Database, question: str) -> TemplateFit:
    """The one template answering `question` with its values, or the miss (see the module docs)."""
    if not templates:
        return TemplateFit(miss=TemplateMiss.PARAPHRASE)
    folded = fold_question(question)
    read: list[tuple[LibraryEntry, _Reading]] = []
    looked_up: dict[tuple[str, str], tuple[tuple[SlotValue, ...], str]] = {}  # one lookup per column and text
    for entry in templates:
        reading = await _read(entry, folded, database, looked_up)
        if reading is not None:
            read.append((entry, reading))
    fitting = [(e, r) for e, r in read if r.bindings or r.too_many]
    if len(fitting) == 1 and len(fitting[0][1].bindings) == 1 and not fitting[0][1].too_many:
        entry, reading = fitting[0]
        return TemplateFit(entry, reading.bindings[0])
    if len(fitting) > 1:
        lines = ", ".join(str(e.line) for e, _ in fitting)
        return TemplateFit(
            miss=TemplateMiss.AMBIGUOUS,
            why=(f"this question fits {len(fitting)} verified templates (lines {lines})"),
            remedy="ask it in the words of one of them",
        )
    if fitting:
        entry, reading = fitting[0]
        return TemplateFit(
            miss=TemplateMiss.AMBIGUOUS,
            why=(
                f"the verified template {_shown(entry.question)} (line {entry.line}) reads this question "
                f"{'in too many ways' if reading.too_many else 'in more than one way'}"
                f"{_ways(reading.bindings)}"
            ),
            remedy="write the values so they read one way (a date as 2024-03-05)",
        )
    near = [(e, r) for e, r in read if r.why_not]
    if near:
        entry, reading = near[0]
        return TemplateFit(
            miss=TemplateMiss.SLOT_NOT_READ,
            why=(
                f"the verified template {_shown(entry.question)} (line {entry.line}) fits this question's "
                f"words, but {reading.why_not}"
            ),
            remedy="write the value in a form the template reads",
        )
    return TemplateFit(miss=TemplateMiss.PARAPHRASE)


async def _read(
    entry: LibraryEntry,
    question: FoldedQuestion,
    database: Database,
    looked_up: dict[tuple[str, str], tuple[tuple[SlotValue, ...], str]],
) -> _Reading | None:
    """Every binding of the entry's slots that the question reads as; None when its words do not fit.

    The slots read without the database come first: a value slot is looked up only when they read,
    and each column and text once per question (`looked_up`).
    """
    template = entry.template
    assert template is not None
    ways = splits(template, question)
    if ways is None:
        return _Reading(too_many=True)
    if not ways:
        return None
    bindings: dict[tuple[SlotValue, ...], tuple[BoundParam, ...]] = {}
    why_not = None
    order = sorted(range(len(template.slots)), key=lambda i: template.slots[i].kind is SlotType.VALUE)
    for texts in ways:
        options: list[tuple[SlotValue, ...]] = [()] * len(texts)
        for i in order:
            slot, text = template.slots[i], texts[i]
            if slot.kind is SlotType.VALUE:
                key = (slot.spec.column or "", text)
                if key not in looked_up:
                    looked_up[key] = await _column_values(slot.spec.column or "", text, database)
                values, why = looked_up[key]
            else:
                reading = read_slot(slot.kind, text, minimum=slot.spec.min, maximum=slot.spec.max)
                values, why = reading.values, f"{_shown(text)} {reading.why_not}"
            if not values:
                why_not = why_not or f"{why} for {{{slot.name}}}"
                break
            options[i] = values
        else:
            for combo in itertools.product(*options):
                bindings.setdefault(
                    tuple(combo),
                    tuple(
                        BoundParam(s.name, s.kind.value, t, v)
                        for s, t, v in zip(template.slots, texts, combo, strict=True)
                    ),
                )
    return _Reading(tuple(bindings.values()), None if bindings else why_not)


async def _column_values(column: str, text: str, database: Database) -> tuple[tuple[SlotValue, ...], str]:
    """The values of `column` equal to `text` but for the case of A-Z (several: ambiguous), looked up
    under the database's hide rules; and why when there is none."""
    result = await database.aquery(
        value_lookup_sql(column), max_rows=VALUE_CANDIDATES, params={"text": text}, reads=False
    )
    if not result.ok:
        said = _shown(result.error or result.status.value)
        return (), f"{column} could not be read to look up {_shown(text)} ({said})"
    wanted = ascii_lower(text)
    values = tuple(
        dict.fromkeys(
            value
            for value, as_text in result.rows
            if isinstance(value, int | float | str)
            and isinstance(as_text, str)
            and ascii_lower(as_text) == wanted
        )
    )
    return values, f"{_shown(text)} is no value of {column} (compared but for the case of A-Z)"


def _ways(bindings: Sequence[Sequence[BoundParam]]) -> str:
    shown = ["; ".join(f"{p.name} = {_shown(str(p.value))}" for p in binding) for binding in bindings[:3]]
    return f" ({' or '.join(shown)})" if shown else ""


def _shown(text: str) -> str:
    return quoted_text(text, SHOWN_TEXT_CHARS)

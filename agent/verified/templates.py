"""Verified templates: an entry whose question has slots (`{month}`) its SQL binds (`:month`) (pure).

The rule, in one sentence (TEMPLATE_RULE): a question matches a template when, after the same
normalisation as the same-question tier, it equals the template's question with each slot
replaced by text that reads as that slot's type (agent.verified.slot_types; for a `value`, a value its
column holds), in exactly one way, and nothing else differs.

This module holds the part of it that needs no database: what makes an entry a template (or
refuses it, in one line), and every way a question's words fit a template's, each slot given the
text between the words around it, in the question's own letter case. Reading the slots, and
deciding, is `template_tier`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..golden_file import GoldenEntry, ParamSpec, SlotType
from ..sqlite.sql_text import parameter_names, quote_name
from .matching import TRAILING, normalise_question

TEMPLATE_RULE = (
    "a question matches a template when, after the same normalisation as the same-question "
    "tier, it equals the template's question with each slot replaced by text that reads as "
    "that slot's type, in exactly one way, and nothing else differs"
)
SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", re.ASCII)
MAX_SPLITS = 32  # ways a question's words fit one template past which it is ambiguous
SLOT_CHARS = 500  # a slot's text longer than this reads as nothing
VALUE_CANDIDATES = 3  # values of a column looked up for one slot's text: two already are ambiguous


@dataclass(frozen=True)
class Slot:
    """One slot of a template: its name (as the question and SQL write it) and what it must be."""

    name: str
    spec: ParamSpec

    @property
    def kind(self) -> SlotType:
        """The slot's type."""
        return self.spec.type


@dataclass(frozen=True)
class Template:
    """A template's words, folded as the same-question tier folds a question, around its slots."""

    words: tuple[str, ...]  # len(slots) + 1 parts: before the first slot, between them, after the last
    slots: tuple[Slot, ...]


@dataclass(frozen=True)
class FoldedQuestion:
    """A question as the same-question tier compares it, and where each of its characters came from."""

    spaced: str  # the question with whitespace runs as one space: what a slot's text is taken from
    folded: str  # normalise_question(question)
    origins: dict[int, int]  # offset in `folded` where a character of `spaced` starts -> its offset

    def original(self, start: int, end: int) -> str | None:
        """The text of `spaced` that folds to `folded[start:end]`; None when the cut splits a
        character (`ß` folds to `ss`)."""
        begin, stop = self.origins.get(start), self.origins.get(end)
        return None if begin is None or stop is None else self.spaced[begin:stop]


def fold_question(question: str) -> FoldedQuestion:
    """The question folded as normalise_question folds it, keeping where each character came from."""
    spaced = " ".join(question.split())
    folded_parts, origins, at = [], {}, 0
    for i, char in enumerate(spaced):
        origins[at] = i
        part = char.casefold()  # casefold is per character: the parts join to spaced.casefold()
        folded_parts.append(part)
        at += len(part)
    origins[at] = len(spaced)
    folded = "".join(folded_parts).rstrip(TRAILING + " ").rstrip()
    return FoldedQuestion(spaced, folded, origins)


def template_of(entry: GoldenEntry) -> Template | str:
    """The entry's template, or why it cannot be one (said in one line); the entry has `params`."""
    params = entry.params or {}
    spaced = " ".join(entry.question.split())
    pieces = SLOT.split(spaced)  # words, slot name, words, slot name, ..., words
    names = pieces[1::2]
    undeclared = [n for n in names if n not in params]
    if undeclared:
        return (
            f"its question writes {{{undeclared[0]}}}, which params does not declare; declare it, or "
            "write the question without that slot"
        )
    missing = [n for n in params if n not in names]
    if missing:
        return f"params declares {missing[0]}, which its question does not write as {{{missing[0]}}}"
    repeated = next((n for n in names if names.count(n) > 1), None)
    if repeated is not None:
        return f"its question writes {{{repeated}}} twice; each slot is read from the question once"
    words = [p.casefold() for p in pieces[0::2]]
    words[-1] = words[-1].rstrip(TRAILING + " ").rstrip()
    if any(not w for w in words[1:-1]):
        return "its question has two slots with nothing between them; put words between the slots"
    if not normalise_question("".join(words)):
        return "its question is nothing but its slots; a template needs words around them to match"
    sql_refusal = _parameters_refusal(entry.sql, params)
    if sql_refusal is not None:
        return sql_refusal
    return Template(tuple(words), tuple(Slot(n, params[n]) for n in names))


def unbound_refusal(sql: str) -> str | None:
    """Why an entry without params may not have this SQL: it binds a parameter nothing gives."""
    written = parameter_names(sql)
    if not written:
        return None
    return (
        f"its SQL binds {written[0]}, but the entry declares no params; declare each parameter in "
        f'"params" and write it in the question as {{name}}'
    )


def _parameters_refusal(sql: str, params: dict[str, ParamSpec]) -> str | None:
    written = parameter_names(sql)
    for name in written:
        if name.startswith("?"):
            return (
                f"its SQL binds {name} by position; name each parameter as params does (:{next(iter(params))})"
            )
        if not name.startswith(":"):
            return f"its SQL binds {name}; write it :{name[1:]}"
        if name[1:] not in params:
            return f"its SQL binds {name}, which params does not declare"
    unused = [n for n in params if f":{n}" not in written]
    if unused:
        return f"params declares {unused[0]}, which its SQL does not bind (write :{unused[0]} where it goes)"
    return None


def splits(template: Template, question: FoldedQuestion) -> list[tuple[str, ...]] | None:
    """Every way the question's words fit the template's: each slot's text, in the question's case.

    None when there are more than MAX_SPLITS ways (ambiguous). A slot's text is never empty, never
    starts or ends with a space, and never cuts a character in two.
    """
    q, words = question.folded, template.words
    first, last = words[0], words[-1]
    if not (q.startswith(first) and q.endswith(last)) or len(q) < len(first) + len(last) + len(template.slots):
        return []
    found: list[tuple[str, ...]] = []
    end = len(q) - len(last)

    def walk(slot: int, start: int, texts: tuple[str, ...]) -> bool:
        """Place the words after slot `slot`, which starts at `start`; False once past MAX_SPLITS."""
        if slot == len(template.slots) - 1:
            text = _slot_text(question, start, end)
            if text is not None:
                found.append((*texts, text))
            return len(found) <= MAX_SPLITS
        after = words[slot + 1]
        at = q.find(after, start + 1)
        while at >= 0 and at + len(after) < end:
            text = _slot_text(question, start, at)
            if text is not None and not walk(slot + 1, at + len(after), (*texts, text)):
                return False
            at = q.find(after, at + 1)
        return True

    if not walk(0, len(first), ()):
        return None
    return found


def _slot_text(question: FoldedQuestion, start: int, end: int) -> str | None:
    text = question.original(start, end) if end > start else None
    if text is None or text != text.strip() or len(text) > SLOT_CHARS:
        return None
    return text


def value_sample_sql(column: str) -> str:
    """Our SQL reading one value of a `value` slot's column (TABLE.COLUMN), to check a template with."""
    table, name = _column_names(column)
    return f"SELECT {name} FROM {table} WHERE {name} IS NOT NULL LIMIT 1"


def value_lookup_sql(column: str) -> str:
    """Our SQL reading the values of a `value` slot's column equal to `:text` but for the case of
    A-Z (SQLite's NOCASE), each with its text (to compare as `slot_types.ascii_lower` does)."""
    table, name = _column_names(column)
    return (
        f"SELECT DISTINCT {name}, CAST({name} AS TEXT) FROM {table} WHERE {name} = :text COLLATE NOCASE "
        f"LIMIT {VALUE_CANDIDATES}"
    )


def _column_names(column: str) -> tuple[str, str]:
    """TABLE.COLUMN (split at the first dot, as hide rules are) as the quoted table and the column
    qualified by it: SQLite reads a lone "name" it cannot resolve as a string, never a qualified one,
    so a missing column fails (as a hidden one does) rather than read as its own name."""
    table, _, name = column.partition(".")
    quoted = quote_name(table.strip())
    return quoted, f"{quoted}.{quote_name(name.strip())}"

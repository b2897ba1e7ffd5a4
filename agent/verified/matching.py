"""When two questions are the same, the words a similar one is found by, and how similar verified
answers are told to the model (pure).

Same question, in one sentence: two questions are the same when they are equal after folding
letter case, collapsing each run of whitespace to one space, and dropping punctuation
(`?`, `!`, `.`, `…` and their full-width forms) at the end. Nothing else is changed: numbers,
names, negations, dates, quotes and every other character must match exactly.

Similar questions are ranked by BM25 over the library's questions (agent/sqlite/text_index.py,
SQLite's FTS5 in a private in-memory database): a question is searched by the words that carry
meaning in it ("how", "many", "the" are left out), each once, in lower case; the index's porter
tokenizer makes "singer" and "singers" one term.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SAME_QUESTION_RULE = (
    "letter case, runs of whitespace and punctuation at the end (? ! . …) are "
    "ignored; every other character must match"
)
TRAILING = "?!.…？！。．"  # ASCII, the ellipsis, and their full-width forms
HINT_ENTRIES = 2  # similar verified answers given to the model as evidence
HINT_SQL_CHARS = 600  # an entry whose SQL is longer is not given (a clipped SQL would mislead)

_WORD = re.compile(r"\w+")
# Question words and glue: they match nearly every question, so they only add noise.
STOP_WORDS = frozenset(
    {
        "a",
        "about",
        "all",
        "also",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "each",
        "for",
        "from",
        "give",
        "had",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "list",
        "many",
        "me",
        "much",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "return",
        "show",
        "that",
        "the",
        "their",
        "them",
        "there",
        "these",
        "this",
        "those",
        "to",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    }
)


def query_terms(text: str) -> list[str]:
    """The words of `text` a similar question is matched on: lower case, no stop words, each once."""
    words = (w.lower() for w in _WORD.findall(text))
    return list(dict.fromkeys(w for w in words if w not in STOP_WORDS and w != "_"))


def normalise_question(text: str) -> str:
    """The question as the same-question tier compares it (see SAME_QUESTION_RULE)."""
    folded = " ".join(text.split()).casefold()
    return folded.rstrip(TRAILING + " ").rstrip()


def same_evidence(asked: str | None, entry: str | None) -> bool:
    """True when the caller's evidence cannot change what the entry answers.

    No evidence from the caller always fits; evidence from the caller fits only when it is the
    entry's own (compared like questions), since a hint may change what the question means.
    """
    if not (asked or "").strip():
        return True
    return normalise_question(asked or "") == normalise_question(entry or "")


def hint_fact(question: str, sql: str) -> str | None:
    """One verified answer as an evidence fact, in the `X refers to Y` form of BIRD's evidence
    notes; None when its SQL is too long to give whole."""
    flat = " ".join(sql.split()).rstrip(";").rstrip()
    if len(flat) > HINT_SQL_CHARS:
        return None
    asked = " ".join(question.split()).replace('"', "'")
    return f'"{asked}" refers to {flat}'


def hint_evidence(similar: Sequence[tuple[str, str]], limit: int = HINT_ENTRIES) -> str | None:
    """The evidence note of the most similar verified answers ((question, sql) pairs, best
    first), facts joined with "; " as notes and BIRD's evidence join theirs; None without any."""
    facts = [fact for question, sql in similar if (fact := hint_fact(question, sql)) is not None]
    return "; ".join(facts[:limit]) or None

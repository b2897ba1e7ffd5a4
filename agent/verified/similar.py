"""Similar verified questions: the words a question is matched on, ranked by BM25.

The ranking is SQLite's FTS5 over the library's question texts (agent/sqlite/text_index.py, in
a private in-memory database: it never opens a user's database, and nothing a model writes
reaches it). This module chooses the words: those that carry meaning in a question ("how",
"many", "the" are left out), each once, in lower case; the index's porter tokenizer makes
"singer" and "singers" one term.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from ..sqlite.text_index import Ranked, TextIndex, fts5_available

_WORD = re.compile(r"\w+")
# Question words and glue: they match nearly every question, so they only add noise.
STOP_WORDS = frozenset({
    "a", "about", "all", "also", "an", "and", "any", "are", "as", "at", "be", "by", "can", "could",
    "did", "do", "does", "each", "for", "from", "give", "had", "has", "have", "how", "i", "in",
    "is", "it", "its", "list", "many", "me", "much", "my", "of", "on", "or", "our", "please",
    "return", "show", "that", "the", "their", "them", "there", "these", "this", "those", "to",
    "us", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "whose", "why",
    "will", "with", "would", "you", "your",
})


def query_terms(text: str) -> list[str]:
    """The words of `text` a similar question is matched on: lower case, no stop words, each once."""
    words = (w.lower() for w in _WORD.findall(text))
    return list(dict.fromkeys(w for w in words if w not in STOP_WORDS and w != "_"))


class QuestionIndex:
    """The library's question texts, searched by their meaningful words (thread-safe)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self._index = TextIndex(texts)
        self.size = self._index.size

    def search(self, text: str, limit: int = 3, *, exclude: Collection[int] = ()) -> list[Ranked]:
        """Up to `limit` indexed texts sharing a word with `text`, most similar first."""
        return self._index.search(query_terms(text), limit, exclude=exclude)

    def close(self) -> None:
        """Free the index."""
        self._index.close()


def question_index(texts: Sequence[str]) -> QuestionIndex | None:
    """An index of `texts`; None when SQLite has no FTS5 (said once in the log)."""
    return QuestionIndex(texts) if fts5_available() else None


__all__ = ["STOP_WORDS", "QuestionIndex", "Ranked", "query_terms", "question_index"]

"""A text index ranked by SQLite's own FTS5 full-text index with BM25.

The index holds only the texts it is given (the questions of a verified library: its words are
chosen in agent/verified/matching.py) in a private in-memory database of this process: it never
opens or touches a user's database, and nothing a model writes reaches it. A search is a list
of terms, each quoted as an FTS5 string and joined with OR, so no text can be read as FTS5
syntax; the porter tokenizer makes "singer" and "singers" one term.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import weakref
from collections.abc import Collection, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

_TOKENIZER = "porter unicode61 remove_diacritics 2"


@functools.cache
def fts5_available() -> bool:
    """True when this Python's SQLite was built with FTS5 (almost every build is); checked once."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(f"CREATE VIRTUAL TABLE probe USING fts5(text, tokenize='{_TOKENIZER}')")
    except sqlite3.OperationalError:
        logger.warning(
            "this Python's SQLite has no FTS5, so no similar verified question can be "
            "ranked; repeated questions are still answered from the library"
        )
        return False
    finally:
        conn.close()
    return True


@dataclass(frozen=True)
class Ranked:
    """One indexed text that matches, with its BM25 score (lower is more similar, as FTS5 gives it)."""

    position: int  # the text's index in the sequence the TextIndex was built from
    score: float


class TextIndex:
    """An in-memory FTS5 index of texts, searched by BM25 (thread-safe)."""

    def __init__(self, texts: Sequence[str]) -> None:
        # check_same_thread=False: searches come from worker threads, one at a time (the lock).
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        # An index lives as long as a library snapshot that someone may still be searching, so it is
        # closed when the last of them lets go of it (Python 3.13 warns of a connection left open).
        weakref.finalize(self, self._conn.close)
        self._lock = threading.Lock()
        self.size = len(texts)
        try:
            self._conn.execute(f"CREATE VIRTUAL TABLE entry USING fts5(text, tokenize='{_TOKENIZER}')")
            self._conn.executemany(
                "INSERT INTO entry(rowid, text) VALUES (?, ?)", ((i + 1, text) for i, text in enumerate(texts))
            )
        except BaseException:
            self._conn.close()
            raise

    def search(self, terms: Sequence[str], limit: int = 3, *, exclude: Collection[int] = ()) -> list[Ranked]:
        """Up to `limit` indexed texts holding one of `terms`, most similar first."""
        if not terms or limit <= 0 or not self.size:
            return []
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        with self._lock:
            rows = self._conn.execute(
                "SELECT rowid, bm25(entry) FROM entry WHERE entry MATCH ? ORDER BY bm25(entry), rowid LIMIT ?",
                (match, limit + len(exclude)),
            ).fetchall()
        ranked = [Ranked(rowid - 1, score) for rowid, score in rows if rowid - 1 not in exclude]
        return ranked[:limit]

    def close(self) -> None:
        """Free the index."""
        with self._lock:
            self._conn.close()


__all__ = ["Ranked", "TextIndex", "fts5_available"]

"""A verified library: a golden-question file served as answers for one database.

Loading checks every entry before it may be served. An entry is refused, with one line
naming it (file, line, question) and why, when its line is not a golden question, its
`database` names another alias than the file is served for, it is still tagged `from-log`
(the model's SQL, not yet reviewed), its question is empty once normalised, another entry
asks the same question with other SQL, or its SQL, run through the same guarded worker and
hide rules as every answer (agent.verified.checks), fails or reads a table or column the hide
rules hide. A template (an entry with `params`) is refused, too, when its question, params and
SQL do not agree (templates.template_of), or when its SQL fails with each slot bound to a
sample of its type (for a `value`, a real value of its column, read under the same rules: a
hidden column fails as a missing one does); an entry without params whose SQL binds a
parameter is refused.

The file is checked for changes (mtime, size, inode) on each question, which costs one
stat(); a changed file is loaded again, and only entries whose SQL is new, or whose database
changed since they were checked, are run again.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from ..episode_text import clip
from ..golden_file import FROM_LOG_TAG, GoldenEntry, parse_lines
from ..sqlite import Database
from ..sqlite.text_index import TextIndex, fts5_available
from .checks import SqlRefusal, sql_refusal, template_sample
from .matching import normalise_question, query_terms, same_evidence
from .templates import Template, template_of, unbound_refusal

logger = logging.getLogger(__name__)

SIMILAR_SHOWN = 3  # similar verified questions listed with an answer
# A similar question scoring under this share of the best one's BM25 score is left out: on
# Spider dev it lists 2.1 questions instead of 3 for 1.5 points less recall@3 (bench_verified).
SIMILAR_RELATIVE_SCORE = 0.5
REFUSAL_QUESTION_CHARS = 80


@dataclass(frozen=True)
class LibraryEntry:
    """One entry that passed the checks and may be served."""

    line: int  # 1-based line of the file
    entry: GoldenEntry
    key: str  # the question as the same-question tier compares it (a template's with its {slots})
    template: Template | None = None  # the entry's slots, when it has params

    @property
    def question(self) -> str:
        """The question as the file holds it."""
        return self.entry.question

    @property
    def sql(self) -> str:
        """The verified SQL."""
        return self.entry.sql


@dataclass(frozen=True)
class Refusal:
    """An entry that is not served, and why."""

    line: int
    question: str | None  # None when the line could not be read as an entry
    reason: str  # what anyone may be told: a hidden name reads as a missing one
    logged: str | None = None  # the operator's log only: the reason with the hidden names it writes

    def log_line(self, where: str) -> str:
        """The operator's line naming the entry: `where line N "question": refused: reason`."""
        named = f' "{clip(self.question, REFUSAL_QUESTION_CHARS)}"' if self.question else ""
        return f"{where} line {self.line}{named}: refused: {self.logged or self.reason}"


@dataclass(frozen=True)
class Snapshot:
    """The library as last loaded: the entries served, those refused, and the similarity index."""

    entries: tuple[LibraryEntry, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    signature: tuple[int, ...] = ()
    missing: bool = False  # the file does not exist (yet)
    index: TextIndex | None = field(default=None, compare=False, repr=False)
    _by_key: dict[str, LibraryEntry] = field(default_factory=dict, compare=False, repr=False)
    # The entries with params, which the template tier reads a question into.
    templates: tuple[LibraryEntry, ...] = field(default=(), compare=False, repr=False)

    def exact(self, question: str, evidence: str | None = None) -> LibraryEntry | None:
        """The entry without params asking the same question (see matching), if the caller's
        evidence fits it."""
        found = self._by_key.get(normalise_question(question))
        return found if found is not None and same_evidence(evidence, found.entry.evidence) else None

    def similar(
        self, question: str, limit: int = SIMILAR_SHOWN, *, leave_out_same: bool = True
    ) -> tuple[LibraryEntry, ...]:
        """Up to `limit` entries whose questions are most like `question` (BM25), best first.

        With `leave_out_same`, an entry asking the same question is not among them (eval leaves
        a golden question's own entry out of its hints; the server answers it from the same-
        question tier instead).
        """
        if self.index is None:
            return ()
        key = normalise_question(question)
        same = {i for i, e in enumerate(self.entries) if e.key == key} if leave_out_same else set()
        ranked = self.index.search(query_terms(question), limit, exclude=same)
        # BM25 scores are negative, the best the lowest.
        return tuple(
            self.entries[r.position] for r in ranked if r.score <= SIMILAR_RELATIVE_SCORE * ranked[0].score
        )


class VerifiedLibrary:
    """The verified answers of one database alias, read from one file and kept current."""

    def __init__(
        self,
        path: Path,
        alias: str,
        *,
        names: Collection[str] = (),
        shared_with: Collection[str] = (),
        report: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.alias = alias
        # The `database` values that mean this database: the alias, and for `ask` the file's
        # path as a golden file names it.
        self.names = frozenset({alias, *names})
        self.shared_with = frozenset(shared_with) - self.names  # other aliases served from this file
        self.where = f"verified library '{alias}' ({path.name})"
        self._report = report or (lambda line: logger.warning("%s", line))
        self._snapshot = Snapshot()
        self._loaded = False
        self._lock = threading.Lock()
        self.write_lock = threading.Lock()  # saves append one at a time (see saving)
        # SQL -> (the database's signature when it was checked, why refused or None)
        # (SQL, template) -> (the database's signature when it was checked, why refused or None)
        self._checked: dict[tuple[str, Template | None], tuple[tuple[int, ...], SqlRefusal | None]] = {}

    def current(self, database: Database) -> Snapshot:
        """The library as the file now holds it: loaded again when the file changed (blocking)."""
        signature = file_signature(self.path)
        if self._loaded and signature == self._snapshot.signature:
            return self._snapshot
        with self._lock:
            if not self._loaded or signature != self._snapshot.signature:
                self._swap(self._load(database, signature))
            return self._snapshot

    async def acurrent(self, database: Database) -> Snapshot:
        """`current()` without blocking the event loop (a reload runs the new entries' SQL)."""
        signature = file_signature(self.path)
        if self._loaded and signature == self._snapshot.signature:
            return self._snapshot
        return await anyio.to_thread.run_sync(self.current, database)

    def _swap(self, snapshot: Snapshot) -> None:
        before = set(self._snapshot.refusals) if self._loaded else set()
        for refusal in snapshot.refusals:
            if refusal not in before:
                self._report(refusal.log_line(self.where))
        if self._loaded and snapshot.signature != self._snapshot.signature:
            logger.info(
                "%s: reloaded after the file changed: %d entries served, %d refused",
                self.where,
                len(snapshot.entries),
                len(snapshot.refusals),
            )
        self._snapshot, self._loaded = snapshot, True

    def _load(self, database: Database, signature: tuple[int, ...]) -> Snapshot:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Snapshot(signature=signature, missing=True)
        except OSError as exc:
            self._report(
                f"{self.where}: cannot be read ({exc.strerror}); no verified answer is served "
                "from it until it can"
            )
            return Snapshot(signature=signature)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            self._report(
                f"{self.where}: not UTF-8 text; no verified answer is served from it until it "
                "is saved as UTF-8 JSON Lines"
            )
            return Snapshot(signature=signature)
        return self._checked_snapshot(text, signature, database)

    def _checked_snapshot(self, text: str, signature: tuple[int, ...], database: Database) -> Snapshot:
        candidates: list[LibraryEntry] = []
        refusals: list[Refusal] = []
        for number, parsed in parse_lines(text):
            if isinstance(parsed, str):
                refusals.append(Refusal(number, None, f"not a golden question ({parsed})"))
                continue
            reason = self.entry_refusal(parsed)
            if reason == "":  # another alias's entry in a file they share: not ours, not wrong
                continue
            template = template_of(parsed) if reason is None and parsed.params else None
            if isinstance(template, str):
                reason, template = template, None
            if reason is not None:
                refusals.append(Refusal(number, parsed.question, reason))
                continue
            candidates.append(LibraryEntry(number, parsed, normalise_question(parsed.question), template))
        candidates, clashes = _without_clashes(candidates)
        refusals += clashes
        served = []
        db_signature = database.file_signature()
        for candidate in candidates:
            refused = self._sql_refusal(candidate, database, db_signature)
            if refused is not None:
                refusals.append(Refusal(candidate.line, candidate.question, refused.reason, refused.logged))
            else:
                served.append(candidate)
        refusals.sort(key=lambda r: r.line)
        return _snapshot(tuple(served), tuple(refusals), signature)

    def entry_refusal(self, entry: GoldenEntry) -> str | None:
        """Why the entry may not be served before its SQL runs; "" when it is another alias's."""
        if entry.database not in self.names:
            if entry.database in self.shared_with:
                return ""
            return (
                f"its database is '{entry.database}', but this file is served for "
                f"'{self.alias}'; move it to that database's library or correct `database`"
            )
        if FROM_LOG_TAG in entry.tags:
            return (
                f"still tagged {FROM_LOG_TAG} (the model's SQL, not reviewed yet); check it, "
                f"then drop the {FROM_LOG_TAG} tag"
            )
        if not normalise_question(entry.question):
            return "the question is only punctuation"
        if not entry.params:
            return unbound_refusal(entry.sql)
        return None

    def _sql_refusal(
        self, candidate: LibraryEntry, database: Database, db_signature: tuple[int, ...]
    ) -> SqlRefusal | None:
        """Why the candidate's SQL may not be served (checked again only when it or the database changed)."""
        template = candidate.template
        key = (candidate.sql, template)
        cached = self._checked.get(key)
        if cached is not None and cached[0] == db_signature:
            return cached[1]
        if template is None:
            refused = sql_refusal(database, candidate.sql)
        else:
            sample = template_sample(database, template)
            refused = sample if isinstance(sample, SqlRefusal) else sql_refusal(database, candidate.sql, sample)
        self._checked[key] = (db_signature, refused)
        return refused


def _without_clashes(entries: Iterable[LibraryEntry]) -> tuple[list[LibraryEntry], list[Refusal]]:
    """Entries asking the same question with other SQL are all refused: none is known right."""
    by_key: dict[tuple[bool, str], list[LibraryEntry]] = {}
    for entry in entries:  # a template's question (with its {slots}) is no plain question
        by_key.setdefault((entry.template is not None, entry.key), []).append(entry)
    kept: list[LibraryEntry] = []
    refused: list[Refusal] = []
    for group in by_key.values():
        if len({answer_key(e.entry) for e in group}) == 1:
            kept.append(group[0])  # repeats of one answer: the first is served
            continue
        lines = ", ".join(str(e.line) for e in group)
        differ = "SQL, evidence or params" if group[0].template is not None else "SQL or evidence"
        refused += [
            Refusal(
                e.line,
                e.question,
                f"lines {lines} ask the same question with different {differ}; keep the right one",
            )
            for e in group
        ]
    kept.sort(key=lambda e: e.line)
    return kept, refused


def answer_key(entry: GoldenEntry) -> tuple[str, str, str]:
    """What entries asking the same question must share not to clash: the SQL (whitespace and a
    final `;` aside), the evidence and the params."""
    params = "" if not entry.params else repr(sorted((n, p.model_dump()) for n, p in entry.params.items()))
    return " ".join(entry.sql.split()).rstrip(";").rstrip(), normalise_question(entry.evidence or ""), params


def _snapshot(
    entries: tuple[LibraryEntry, ...], refusals: tuple[Refusal, ...], signature: tuple[int, ...]
) -> Snapshot:
    index = TextIndex([e.question for e in entries]) if entries and fts5_available() else None
    return Snapshot(
        entries,
        refusals,
        signature,
        index=index,
        _by_key={e.key: e for e in entries if e.template is None},
        templates=tuple(e for e in entries if e.template is not None),
    )


def file_signature(path: Path) -> tuple[int, ...]:
    """What changes when the file is edited or replaced: mtime, size, inode (zeros when absent)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return (0, 0, 0)
    except OSError:  # e.g. its folder became unreadable: loading it again says why
        return (-1, -1, -1)
    return (st.st_mtime_ns, st.st_size, st.st_ino)

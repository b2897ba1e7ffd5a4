"""The library owner's review of proposals: accept one into the library, or reject it.

Accepting checks the proposal as loading checks an entry (its database is the library's, its
question is more than punctuation, no entry answers it with other SQL, its SQL runs under the
given hide rules and reads nothing hidden), appends it to the library as a golden line (who
proposed it and who accepted it in `added_by`, the time in `added_at`), then records the
decision. Rejecting records the decision and why. The owner is told everything, the hidden
names an SQL writes included: this is the operator's side (see saving for the client's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..golden_file import GoldenEntry, append_entries, now_iso
from ..sqlite import Database
from ..text import quoted_text
from .checks import sql_refusal
from .library import VerifiedLibrary, answer_key
from .matching import normalise_question
from .proposals import Decision, ProposalBook, Proposed, append_decision, proposals_path

QUESTION_CHARS = 200  # a proposal's question (a client's text), quoted on one line for the owner


@dataclass(frozen=True)
class Reviewed:
    """What one decision did: whether it was recorded, and what to tell the owner."""

    done: bool
    message: str


def find_pending(book: ProposalBook, ident: str, library_path: Path) -> Proposed | Reviewed:
    """The pending proposal `ident` of the library's proposals, or why there is none."""
    found = book.find(ident)
    if found is None:
        return Reviewed(
            False,
            f"no proposal {quoted_text(ident, 40)} in {proposals_path(library_path).name}"
            f"; `sqale-agent golden proposals --file {library_path}` lists them",
        )
    decided = found.decision
    if decided is not None:
        who = f" by {decided.by}" if decided.by else ""
        return Reviewed(
            False, f"proposal {found.proposal.proposal} was {decided.decision} already ({decided.at}{who})"
        )
    return found


def accept(library: VerifiedLibrary, database: Database, proposed: Proposed, *, by: str | None) -> Reviewed:
    """Move one pending proposal into the library, checked as loading checks it (blocking)."""
    p = proposed.proposal
    who = p.proposed_by + (f", accepted by {by}" if by else ", accepted")
    entry = GoldenEntry(
        question=p.question,
        sql=p.sql,
        database=p.database,
        evidence=p.evidence,
        added_by=who,
        added_at=now_iso(),
    )
    key = normalise_question(entry.question)
    with library.write_lock:
        why = library.entry_refusal(entry)
        if why:
            return _kept(p.proposal, why)
        snapshot = library.current(database)
        held = next((e for e in snapshot.entries if e.template is None and e.key == key), None)
        if held is not None and answer_key(held.entry) != answer_key(entry):
            return _kept(
                p.proposal,
                f"{library.path.name} line {held.line} answers this question with other "
                "SQL or evidence; edit or delete that line first, or reject this proposal",
            )
        clash = next(
            (r for r in snapshot.refusals if r.question is not None and normalise_question(r.question) == key),
            None,
        )
        if held is None and clash is not None:
            return _kept(
                p.proposal,
                f"{library.path.name} line {clash.line} asks this question already and is "
                f"refused ({clash.logged or clash.reason}); fix or delete that line first",
            )
        if held is None:
            refused = sql_refusal(database, entry.sql)
            if refused is not None:
                return _kept(p.proposal, refused.logged or refused.reason)
            append_entries(library.path, [entry])
            held = next(
                (e for e in library.current(database).entries if e.template is None and e.key == key), None
            )
        if held is None:  # e.g. the file was edited at the same moment
            return _kept(p.proposal, f"{library.path.name} refused it on reload; see the line it names")
        append_decision(
            proposals_path(library.path),
            Decision(decided=p.proposal, decision="accepted", by=by, at=now_iso(), line=held.line),
        )
    return Reviewed(
        True,
        f"accepted proposal {p.proposal}: {quoted_text(p.question, QUESTION_CHARS)} on "
        f"'{p.database}' is {library.path.name} line {held.line}, answered at once from "
        "now on",
    )


def reject(library_path: Path, proposed: Proposed, *, by: str | None, why: str | None) -> Reviewed:
    """Record that one pending proposal is rejected (it stays in the file, never served)."""
    p = proposed.proposal
    append_decision(
        proposals_path(library_path),
        Decision(decided=p.proposal, decision="rejected", by=by, at=now_iso(), why=(why or "").strip() or None),
    )
    return Reviewed(
        True, f"rejected proposal {p.proposal}: {quoted_text(p.question, QUESTION_CHARS)} on '{p.database}'"
    )


def _kept(ident: str, why: str) -> Reviewed:
    return Reviewed(False, f"proposal {ident} not accepted: {why}; it stays pending")

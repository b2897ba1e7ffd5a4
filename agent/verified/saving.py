"""A client's "Propose as verified": a proposal for the library's owner, never an entry served.

What a client saves is checked as loading checks an entry (its SQL runs in the guarded worker
under the hide rules, and only under them; it must not contradict the library) and appended to
the library's proposals file (see proposals) with who proposed it and when. Nothing serves it,
lists it as similar or hints with it until the owner accepts it (see reviewing). What the saver
is told comes from the run under the rules alone: a hidden name reads as a missing one, and no
library line's reason is repeated to them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..episode_text import clip
from ..golden_file import now_iso
from ..sqlite import Database
from .checks import sql_refusal
from .library import VerifiedLibrary
from .matching import normalise_question
from .proposals import Proposal, append_proposal, new_id, proposals_path, read_proposals, sql_digest

logger = logging.getLogger(__name__)

PROPOSAL_SQL_CHARS = 10_000  # a person reads every proposal; longer SQL is refused
PENDING_PER_PROPOSER = 50  # proposals one saver may have waiting for review
SHOWN_QUESTION_CHARS = 120


class SaveOutcome(StrEnum):
    """How a save ended (the metric's and the log's label)."""

    PROPOSED = "proposed"
    ALREADY_VERIFIED = "already_verified"
    ALREADY_PROPOSED = "already_proposed"
    REFUSED = "refused"


@dataclass(frozen=True)
class Saved:
    """The outcome of a save, and what to tell the saver."""

    outcome: SaveOutcome
    message: str
    proposal: str | None = None  # the proposal's id, when one holds this SQL

    @property
    def failed(self) -> bool:
        """True when nothing was proposed and nothing already holds this SQL (the call is an error)."""
        return self.outcome is SaveOutcome.REFUSED


def propose_entry(
    library: VerifiedLibrary,
    database: Database,
    *,
    question: str,
    sql: str,
    evidence: str | None,
    proposed_by: str,
) -> Saved:
    """Check one question and its SQL, then append it to the library's proposals (blocking)."""
    asked, query = question.strip(), sql.strip()
    if not normalise_question(asked) or not query:
        return _refused("give the question and its SQL")
    if len(query) > PROPOSAL_SQL_CHARS:
        return _refused(
            f"the SQL is {len(query):,} characters; a proposal holds at most "
            f"{PROPOSAL_SQL_CHARS:,} (a person reads each one)"
        )
    name, key, written = library.path.name, normalise_question(asked), _spaced(query)
    hint = (evidence or "").strip() or None
    with library.write_lock:
        snapshot = library.current(database)
        held = next((e for e in snapshot.entries if e.template is None and e.key == key), None)
        if held is not None:
            if _spaced(held.sql) == written:
                return Saved(
                    SaveOutcome.ALREADY_VERIFIED,
                    f"Already verified: {name} line {held.line} holds this question with this SQL.",
                )
            return _refused(
                f"{name} line {held.line} already answers this question with other SQL; ask "
                "the library's owner to correct that line"
            )
        refused = next(
            (r for r in snapshot.refusals if r.question is not None and normalise_question(r.question) == key),
            None,
        )
        if refused is not None:  # its reason is the operator's to read, in the server log
            return _refused(
                f"{name} line {refused.line} asks this question already and is not served; "
                "ask the library's owner to fix that line"
            )
        book_path = proposals_path(library.path)
        try:
            book = read_proposals(book_path)
        except (OSError, UnicodeDecodeError) as exc:
            return _unusable(book_path, exc)
        same = [
            p
            for p in book.proposals
            if p.proposal.database == library.alias
            and normalise_question(p.proposal.question) == key
            and _spaced(p.proposal.sql) == written
        ]
        if (waiting := next((p for p in same if p.decision is None), None)) is not None:
            return Saved(
                SaveOutcome.ALREADY_PROPOSED,
                f"Already proposed, awaiting review: proposal "
                f"{waiting.proposal.proposal} holds this question "
                "with this SQL.",
                waiting.proposal.proposal,
            )
        if (rejected := next((p for p in same if p.status == "rejected"), None)) is not None:
            why = rejected.decision.why if rejected.decision is not None else None
            return _refused(
                f"the library's owner rejected this SQL for this question (proposal "
                f"{rejected.proposal.proposal}{': ' + clip(why, 200) if why else ''})"
            )
        if sum(p.proposal.proposed_by == proposed_by for p in book.pending()) >= PENDING_PER_PROPOSER:
            return _refused(
                f"{proposed_by} has {PENDING_PER_PROPOSER} proposals awaiting review; ask "
                "the library's owner to review them first"
            )
        verdict = sql_refusal(database, query)  # under the rules only: see its docstring
        if verdict is not None:
            return _refused(verdict.reason)
        ident = new_id(p.proposal.proposal for p in book.proposals)
        try:
            append_proposal(
                book_path,
                Proposal(
                    proposal=ident,
                    question=asked,
                    sql=query,
                    database=library.alias,
                    evidence=hint,
                    proposed_by=proposed_by,
                    proposed_at=now_iso(),
                    sql_sha256=sql_digest(query),
                ),
            )
        except OSError as exc:
            return _unusable(book_path, exc)
    return Saved(
        SaveOutcome.PROPOSED,
        f'Proposed, awaiting review: "{clip(asked, SHOWN_QUESTION_CHARS)}" on '
        f"'{library.alias}' is proposal {ident}. It is not served as verified "
        "until the library's owner accepts it.",
        ident,
    )


def _unusable(path: Path, exc: OSError | UnicodeDecodeError) -> Saved:
    """The proposals file cannot be read or written: the operator's log says where and why, the
    saver only that it failed (a remote client never sees a server path)."""
    logger.error(
        "%s: cannot be used (%s); no proposal is taken until it can be read and appended to", path, exc
    )
    return _refused("the library's proposals file cannot be used now; the server's log says why")


def _refused(why: str) -> Saved:
    return Saved(SaveOutcome.REFUSED, f"Not saved: {why}.")


def _spaced(sql: str) -> str:
    """The SQL with whitespace runs as one space: two saves of it differing only so are the same."""
    return " ".join(sql.split())

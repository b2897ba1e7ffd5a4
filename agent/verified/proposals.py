"""Proposed verified answers: what a client saved, waiting for the library owner's review.

A client's "Propose as verified" never writes the library: it appends a proposal to the
library's proposals file, `NAME.proposals.jsonl` beside `NAME.jsonl`. Both the server and
`sqale-agent golden` find it from the library's path, so there is no second setting to keep
in step and the operator sees it next to the file it would change; a library several aliases
share has one proposals file, and each proposal names its database.

Nothing serves, lists or hints from this file. Only the operator's `golden accept` moves a
proposal into the library (checked as loading checks it); `golden reject` records a refusal.
The file is append-only JSON Lines, written and read through agent.jsonl: a proposal line, and
later at most one decision line naming it. A proposal line is never a golden question (its
fields are not the golden file's), so a library pointed at this file by mistake serves none.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..jsonl import append_lines, dumps_line, file_lines

PROPOSALS_SUFFIX = ".proposals.jsonl"
ID_HEX_DIGITS = 8


class Proposal(BaseModel):
    """One proposed entry, as a client saved it."""

    # defer_build: built at the first proposal, not at start-up (bench/bench_startup.py)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    proposal: str = Field(min_length=1)  # its id (ID_HEX_DIGITS hex digits)
    question: str = Field(min_length=1)
    sql: str = Field(min_length=1)
    database: str = Field(min_length=1)  # the alias it was saved for
    evidence: str | None = None
    proposed_by: str  # the token's name, or the user running a stdio server
    proposed_at: str  # ISO 8601, UTC
    sql_sha256: str  # what the server's log line names the SQL by


class Decision(BaseModel):
    """The owner's decision on one proposal."""

    # defer_build: built at the first proposal, not at start-up (bench/bench_startup.py)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    decided: str = Field(min_length=1)  # the proposal's id
    decision: Literal["accepted", "rejected"]
    by: str | None = None
    at: str
    why: str | None = None  # the owner's reason (a rejection's)
    line: int | None = None  # the library line it became (an acceptance's)


@dataclass(frozen=True)
class Proposed:
    """A proposal with its line in the file and the decision on it, if any."""

    proposal: Proposal
    line: int
    decision: Decision | None = None

    @property
    def status(self) -> str:
        """`pending`, `accepted` or `rejected`."""
        return "pending" if self.decision is None else self.decision.decision


@dataclass(frozen=True)
class ProposalBook:
    """The proposals file as read now: every proposal in order, and the lines it could not read."""

    proposals: tuple[Proposed, ...] = ()
    problems: tuple[str, ...] = ()  # "line N: why" for each line that is neither kind

    def pending(self) -> tuple[Proposed, ...]:
        """The proposals no one has decided on yet, oldest first."""
        return tuple(p for p in self.proposals if p.decision is None)

    def find(self, ident: str) -> Proposed | None:
        """The proposal with this id (any case), or None."""
        wanted = ident.strip().casefold()
        return next((p for p in self.proposals if p.proposal.proposal.casefold() == wanted), None)


def proposals_path(library: Path) -> Path:
    """Where the proposals for the library at `library` go: `NAME.proposals.jsonl` beside it."""
    return library.with_name(f"{library.stem}{PROPOSALS_SUFFIX}")


def sql_digest(sql: str) -> str:
    """The SHA-256 of the SQL as saved (hex): names it in logs without repeating it."""
    return hashlib.sha256(sql.encode("utf-8", "surrogatepass")).hexdigest()


def new_id(taken: Iterable[str]) -> str:
    """A fresh proposal id, unlike any of `taken`."""
    used = {t.casefold() for t in taken}
    while True:
        ident = secrets.token_hex(ID_HEX_DIGITS // 2)
        if ident not in used:
            return ident


def read_proposals(path: Path) -> ProposalBook:
    """Every proposal of the file with its decision; an absent file holds none.

    Raises OSError and UnicodeDecodeError as reading the file does.
    """
    if not path.exists():
        return ProposalBook()
    proposals: list[Proposed] = []
    decisions: dict[str, Decision] = {}
    problems: list[str] = []
    for number, line in file_lines(path):
        if not line.strip():
            continue
        parsed = _parsed(line)
        if isinstance(parsed, Proposal):
            proposals.append(Proposed(parsed, number))
        elif isinstance(parsed, Decision):
            decisions.setdefault(parsed.decided.casefold(), parsed)  # the first decision stands
        else:
            problems.append(f"line {number}: {parsed}")
    return ProposalBook(
        tuple(Proposed(p.proposal, p.line, decisions.get(p.proposal.proposal.casefold())) for p in proposals),
        tuple(problems),
    )


def _parsed(line: str) -> Proposal | Decision | str:
    """The line as a proposal or a decision, or what is wrong with it."""
    for kind in (Proposal, Decision):
        try:
            return kind.model_validate_json(line)
        except ValidationError:
            continue
    return "neither a proposal nor a decision"


def append_proposal(path: Path, proposal: Proposal) -> None:
    """Add one proposal to the file (one whole line, in one write)."""
    append_lines(path, [dumps_line(proposal.model_dump(exclude_none=True))])


def append_decision(path: Path, decision: Decision) -> None:
    """Record one decision (one whole line, in one write)."""
    append_lines(path, [dumps_line(decision.model_dump(exclude_none=True))])

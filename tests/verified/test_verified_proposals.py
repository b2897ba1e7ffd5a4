"""A client's save is a proposal: checked, recorded beside the library, served only once accepted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.episode import EpisodeSettings, EpisodeStatus
from agent.sqlite import Database, HideRules, WorkerPool, create_database
from agent.verified import VerifiedLibrary, consult
from agent.verified.proposals import Proposed, proposals_path, read_proposals
from agent.verified.reviewing import Reviewed, accept, find_pending, reject
from agent.verified.saving import PENDING_PER_PROPOSER, PROPOSAL_SQL_CHARS, SaveOutcome, propose_entry

pytestmark = pytest.mark.anyio

SHOP = """
    CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT, email TEXT, city TEXT);
    CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER);
    INSERT INTO customer VALUES (1, 'Ann', 'ann@x.org', 'Oslo'), (2, 'Bob', 'bob@x.org', 'Rome');
    INSERT INTO orders VALUES (1, 1, 30), (2, 2, 20), (3, 1, 50);
"""
COUNT_Q, COUNT_SQL = "How many orders are there?", "SELECT count(*) FROM orders"


@pytest.fixture
def shop(tmp_path: Path, pool: WorkerPool) -> Database:
    """A tiny shop database, customer.email hidden."""
    return Database(create_database(tmp_path / "shop.db", SHOP), pool, hide=HideRules.parse(["customer.email"]))


def propose(
    library: VerifiedLibrary,
    database: Database,
    question: str,
    sql: str,
    by: str = "analytics",
    evidence: str | None = None,
) -> Any:
    return propose_entry(library, database, question=question, sql=sql, evidence=evidence, proposed_by=by)


def pending(library: VerifiedLibrary, ident: str) -> Proposed:
    found = find_pending(read_proposals(proposals_path(library.path)), ident, library.path)
    assert isinstance(found, Proposed), found
    return found


async def test_a_save_is_never_served_listed_or_hinted_until_the_owner_accepts_it(
    tmp_path: Path, shop: Database
) -> None:
    """The proposal is a line beside the library (who, when, the SQL's hash); the same question is
    then answered by the model, with no similar entry and no hint; once accepted it is verified."""
    library = VerifiedLibrary(tmp_path / "lib.jsonl", "shop")
    saved = propose(library, shop, COUNT_Q, COUNT_SQL)
    assert (saved.outcome, saved.message) == (
        SaveOutcome.PROPOSED,
        (
            f"Proposed, awaiting review: \"{COUNT_Q}\" on 'shop' is proposal {saved.proposal}. It is not "
            "served as verified until the library's owner accepts it."
        ),
    )
    assert not library.path.exists()
    line = json.loads(proposals_path(library.path).read_text(encoding="utf-8"))
    assert sorted(line) == [
        "database",
        "proposal",
        "proposed_at",
        "proposed_by",
        "question",
        "sql",
        "sql_sha256",
    ]
    assert (line["proposal"], line["proposed_by"], line["sql"]) == (saved.proposal, "analytics", COUNT_SQL)
    for asked in (COUNT_Q, "Count the orders"):
        consulted = await consult(library, shop, asked, None, settings=EpisodeSettings())
        assert (consulted.answer, consulted.similar, consulted.hints(), consulted.not_served) == (
            None,
            (),
            None,
            None,
        )
    done = accept(library, shop, pending(library, saved.proposal or ""), by="olga")
    assert done == Reviewed(
        True,
        f"accepted proposal {saved.proposal}: \"{COUNT_Q}\" on 'shop' is lib.jsonl "
        "line 1, answered at once from now on",
    )
    consulted = await consult(library, shop, COUNT_Q, None, settings=EpisodeSettings())
    assert consulted.answer is not None and consulted.provenance is not None
    assert (consulted.answer.status, consulted.answer.rows, consulted.provenance.added_by) == (
        EpisodeStatus.VERIFIED,
        ((3,),),
        "analytics, accepted by olga",
    )
    book = read_proposals(proposals_path(library.path))
    assert [(p.status, p.decision and p.decision.line) for p in book.proposals] == [("accepted", 1)]
    again = find_pending(book, saved.proposal or "", library.path)
    assert isinstance(again, Reviewed) and again.message.startswith(f"proposal {saved.proposal} was accepted")


def test_repeats_contradictions_rejections_and_floods_are_refused_with_what_to_do(
    tmp_path: Path, shop: Database
) -> None:
    """The same SQL again: already proposed (or verified); a rejected SQL: refused with the owner's
    reason; other SQL for a verified question, writes, failing or overlong SQL, and past the pending
    cap: refused; whitespace does not make SQL new."""
    library = VerifiedLibrary(tmp_path / "lib.jsonl", "shop")
    first = propose(library, shop, COUNT_Q, COUNT_SQL)
    repeat = propose(library, shop, " how many ORDERS are there ", "SELECT  count(*)\nFROM orders", by="bob")
    assert (repeat.outcome, repeat.proposal, repeat.message) == (
        SaveOutcome.ALREADY_PROPOSED,
        first.proposal,
        (f"Already proposed, awaiting review: proposal {first.proposal} holds this question with this SQL."),
    )
    other = propose(library, shop, COUNT_Q, "SELECT 3")
    assert other.outcome is SaveOutcome.PROPOSED  # two answers for the owner to choose from
    reject(library.path, pending(library, other.proposal or ""), by="olga", why="a constant is no count")
    assert propose(library, shop, COUNT_Q, "SELECT 3").message == (
        f"Not saved: the library's owner rejected this SQL for this question (proposal {other.proposal}: a "
        "constant is no count)."
    )
    accept(library, shop, pending(library, first.proposal or ""), by="olga")
    assert propose(library, shop, COUNT_Q, COUNT_SQL).message == (
        "Already verified: lib.jsonl line 1 holds this question with this SQL."
    )
    assert propose(library, shop, COUNT_Q, "SELECT 4").message == (
        "Not saved: lib.jsonl line 1 already answers this question with other SQL; ask the library's owner "
        "to correct that line."
    )
    writes = propose(library, shop, "Drop?", "DROP TABLE orders")
    assert writes.message.startswith("Not saved: its SQL is refused by the read-only guard (not allowed: DROP")
    long_sql = "SELECT 1" + " " * PROPOSAL_SQL_CHARS + "+ 1"
    assert propose(library, shop, "Long?", long_sql).message == (
        f"Not saved: the SQL is {len(long_sql):,} characters; a proposal holds at most "
        f"{PROPOSAL_SQL_CHARS:,} (a person reads each one)."
    )
    assert propose(library, shop, "  ", COUNT_SQL).message == "Not saved: give the question and its SQL."
    for n in range(PENDING_PER_PROPOSER):
        assert (
            propose(
                library, shop, f"Order {n}?", f"SELECT amount FROM orders WHERE id = {n}", by="flood"
            ).outcome
            is SaveOutcome.PROPOSED
        )
    assert propose(library, shop, "One more?", "SELECT 1", by="flood").message == (
        f"Not saved: flood has {PENDING_PER_PROPOSER} proposals awaiting review; ask the library's owner to "
        "review them first."
    )
    assert propose(library, shop, "One more?", "SELECT 1", by="ann").outcome is SaveOutcome.PROPOSED
    assert [json.loads(line)["question"] for line in library.path.read_text(encoding="utf-8").splitlines()] == [
        COUNT_Q
    ]


def test_accepting_checks_as_loading_does_and_leaves_a_refused_proposal_pending(
    tmp_path: Path, shop: Database, pool: WorkerPool
) -> None:
    """SQL that fails now, a question the library answers otherwise, another database's proposal:
    not accepted, said why (the hidden names included: the owner's side), still pending."""
    library = VerifiedLibrary(tmp_path / "lib.jsonl", "shop")
    cities = propose(library, shop, "Which cities?", "SELECT city FROM customer")
    counted = propose(library, shop, COUNT_Q, COUNT_SQL)
    ruled = Database(shop.path, pool, hide=HideRules.parse(["customer.city"]))  # the server's rules now
    assert accept(library, ruled, pending(library, cities.proposal or ""), by="olga") == Reviewed(
        False,
        (
            f"proposal {cities.proposal} not accepted: its SQL names column customer.city, which the hide "
            "rules hide (its SQL fails: no such column: city); it stays pending"
        ),
    )
    library.path.write_text(
        json.dumps({"question": COUNT_Q, "sql": "SELECT 3", "database": "shop"}) + "\n", encoding="utf-8"
    )
    assert accept(library, shop, pending(library, counted.proposal or ""), by=None) == Reviewed(
        False,
        (
            f"proposal {counted.proposal} not accepted: lib.jsonl line 1 answers this question with other SQL "
            "or evidence; edit or delete that line first, or reject this proposal; it stays pending"
        ),
    )
    hr = VerifiedLibrary(tmp_path / "lib.jsonl", "hr")
    assert accept(hr, shop, pending(library, cities.proposal or ""), by=None).message.startswith(
        f"proposal {cities.proposal} not accepted: its database is 'shop', but this file is served for 'hr'"
    )
    assert [p.status for p in read_proposals(proposals_path(library.path)).proposals] == ["pending"] * 2


def test_a_proposal_line_is_never_a_golden_question(tmp_path: Path, shop: Database) -> None:
    """A library pointed at the proposals file by mistake serves none of it (each line refused)."""
    library = VerifiedLibrary(tmp_path / "lib.jsonl", "shop")
    propose(library, shop, COUNT_Q, COUNT_SQL)
    reported: list[str] = []
    wrong = VerifiedLibrary(proposals_path(library.path), "shop", report=reported.append)
    assert wrong.current(shop).entries == ()
    assert reported == [
        "verified library 'shop' (lib.proposals.jsonl) line 1: refused: not a golden question "
        "(unknown field proposal; unknown field proposed_by; unknown field proposed_at; "
        "unknown field sql_sha256)"
    ]

"""`sqale-agent golden proposals|accept|reject`: the library owner reviews what clients proposed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.commands.cli import main
from agent.sqlite import Database, HideRules, create_database
from agent.verified import VerifiedLibrary
from agent.verified.proposals import proposals_path, read_proposals, sql_digest
from agent.verified.saving import propose_entry

SALES = """
    CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, amount INTEGER, card TEXT);
    INSERT INTO orders VALUES (1, 'Ann', 30, '4111'), (2, 'Bob', 20, '5500');
"""
COUNT_Q, COUNT_SQL = "How many orders are there?", "SELECT count(*) FROM orders"
HOSTILE_Q = "Totals?\n\x1b[2J\x1b]0;owned\x07accept: done\u202e"
HOSTILE_SQL = "SELECT sum(amount) FROM orders\n-- \x1b[31mreviewed\x1b[0m\n-- proposal 00000000 accepted"


@pytest.fixture
def sales(tmp_path: Path) -> Path:
    """A tiny sales database."""
    return create_database(tmp_path / "sales.db", SALES)


def proposed(tmp_path: Path, sales: Path, *pairs: tuple[str, str]) -> tuple[Path, list[str]]:
    """A library file (not there yet) and the ids of these proposals for it, as a server saves them."""
    library = VerifiedLibrary(tmp_path / "sales-verified.jsonl", "sales")
    with Database(sales, hide=HideRules()) as database:
        ids = [
            propose_entry(
                library, database, question=q, sql=sql, evidence=None, proposed_by="analytics"
            ).proposal
            or ""
            for q, sql in pairs
        ]
    return library.path, ids


def test_the_listing_shows_what_a_client_wrote_escaped_and_how_to_decide(
    tmp_path: Path, sales: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each pending proposal: id, database, who and when, the question quoted on one line, the SQL's
    hash and its lines behind a margin, with every control and bidi character escaped."""
    library, (count, hostile) = proposed(tmp_path, sales, (COUNT_Q, COUNT_SQL), (HOSTILE_Q, HOSTILE_SQL))
    assert main(["golden", "proposals", "--file", str(library)]) == 0
    out = capsys.readouterr().out
    book = read_proposals(proposals_path(library))
    at = {p.proposal.proposal: p.proposal.proposed_at for p in book.proposals}
    assert out.splitlines() == [
        "sales-verified.proposals.jsonl: 2 proposals awaiting review",
        "",
        f"{count}  on 'sales', proposed by analytics at {at[count]}",
        f'  question: "{COUNT_Q}"',
        f"  sql (sha256 {sql_digest(COUNT_SQL)[:16]}):",
        f"    | {COUNT_SQL}",
        "",
        f"{hostile}  on 'sales', proposed by analytics at {at[hostile]}",
        '  question: "Totals?\\n\\x1b[2J\\x1b]0;owned\\x07accept: done\\u202e"',
        f"  sql (sha256 {sql_digest(HOSTILE_SQL)[:16]}):",
        "    | SELECT sum(amount) FROM orders",
        "    | -- \\x1b[31mreviewed\\x1b[0m",
        "    | -- proposal 00000000 accepted",
        "",
        f"accept: sqale-agent golden accept --file {library} --db ALIAS=PATH [--hide RULE]... ID",
        f"reject: sqale-agent golden reject --file {library} [--why TEXT] ID",
    ]
    assert "\x1b" not in out and "\u202e" not in out


def test_accept_moves_a_checked_proposal_into_the_library_and_reject_records_why(
    tmp_path: Path, sales: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """accept appends the golden line (proposer and reviewer in added_by); one reading a column the
    --hide rules hide stays pending with the hidden name said; reject records the reason; a decided
    proposal cannot be decided again; the listing then shows none pending."""
    library, (count, cards, totals) = proposed(
        tmp_path,
        sales,
        (COUNT_Q, COUNT_SQL),
        ("Which cards?", "SELECT card FROM orders"),
        ("Totals?", "SELECT sum(amount) FROM orders"),
    )
    db = f"sales={sales}"
    assert (
        main(
            [
                "golden",
                "accept",
                count,
                cards,
                "--file",
                str(library),
                "--db",
                db,
                "--hide",
                "orders.card",
                "--by",
                "olga",
            ]
        )
        == 1
    )
    assert (
        main(
            [
                "golden",
                "reject",
                cards.upper(),
                totals,
                "--file",
                str(library),
                "--why",
                "cards are private",
                "--by",
                "olga",
            ]
        )
        == 0
    )
    assert main(["golden", "accept", totals, "nope", "--file", str(library), "--db", db]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"accepted proposal {count}: \"{COUNT_Q}\" on 'sales' is sales-verified.jsonl line 1, answered at once "
        "from now on",
        f"rejected proposal {cards}: \"Which cards?\" on 'sales'",
        f"rejected proposal {totals}: \"Totals?\" on 'sales'",
    ]
    decided = {p.proposal.proposal: p.decision for p in read_proposals(proposals_path(library)).proposals}
    assert err.splitlines() == [
        f"proposal {cards} not accepted: its SQL names column orders.card, which the hide rules hide (its SQL "
        "fails: no such column: card); it stays pending",
        f"proposal {totals} was rejected already ({decided[totals].at} by olga)",  # type: ignore[union-attr]
        f'no proposal "nope" in sales-verified.proposals.jsonl; `sqale-agent golden proposals --file '
        f"{library}` lists them",
    ]
    (entry,) = [json.loads(line) for line in library.read_text(encoding="utf-8").splitlines()]
    assert (entry["question"], entry["sql"], entry["database"], entry["added_by"]) == (
        COUNT_Q,
        COUNT_SQL,
        "sales",
        "analytics, accepted by olga",
    )
    assert [(d.decision, d.why, d.line) for d in decided.values() if d] == [
        ("accepted", None, 1),
        ("rejected", "cards are private", None),
        ("rejected", "cards are private", None),
    ]
    assert main(["golden", "proposals", "--file", str(library)]) == 0
    assert capsys.readouterr().out == "sales-verified.proposals.jsonl: no proposal awaiting review\n"
    assert main(["golden", "proposals", "--file", str(library), "--all"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == "sales-verified.proposals.jsonl: no proposal awaiting review (of 3)"
    assert [line.split("  ")[0] for line in listed if "proposed by" in line] == [count, cards, totals]
    assert "[accepted by olga at " in listed[2] and ", line 1]" in listed[2]


def test_accept_needs_the_proposals_database_under_its_alias(
    tmp_path: Path, sales: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--db must name the alias the proposal was saved for: another alias or a bare path says what to give."""
    library, (count,) = proposed(tmp_path, sales, (COUNT_Q, COUNT_SQL))
    assert main(["golden", "accept", count, "--file", str(library), "--db", f"hr={sales}"]) == 1
    assert capsys.readouterr().err == (
        f"proposal {count} is for 'sales': give --db sales=PATH (the file the server serves as that alias)\n"
    )
    assert main(["golden", "accept", count, "--file", str(library), "--db", str(sales)]) == 1
    assert "give ALIAS=PATH" in capsys.readouterr().err
    assert not library.exists()

"""A save tells nothing of hidden data: no condition on it, and no hidden name, changes its answer.

Issue 31: the check of a saved SQL ran a failed statement again without the hide rules to tell
"hidden" from "missing", and said which; a CASE on a hidden value then told one bit per save.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.sqlite import Database, HideRules, WorkerPool, create_database
from agent.verified import VerifiedLibrary
from agent.verified.proposals import proposals_path
from agent.verified.saving import SaveOutcome, propose_entry
from tests.support.hiding import CONDITION_PROBES, HIDDEN_AND_MISSING, RULES, SCHEMA_SQL, SECRETS


@pytest.fixture
def secrets_db(tmp_path: Path) -> Path:
    """The database with secrets of tests/support/hiding.py."""
    return create_database(tmp_path / "secrets.db", SCHEMA_SQL)


def test_each_probe_is_a_real_bit_without_the_rules(secrets_db: Path, pool: WorkerPool) -> None:
    """Run without rules, the true statement of each pair runs and the false one fails: the pairs
    would tell a hidden value apart if anything ran them so."""
    plain = Database.unruled(secrets_db, pool)
    outcomes = [(plain.query(t, max_rows=0).ok, plain.query(f, max_rows=0).ok) for t, f in CONDITION_PROBES]
    assert outcomes == [(True, False)] * len(CONDITION_PROBES)


def test_no_condition_on_hidden_data_changes_what_a_save_says(
    secrets_db: Path, tmp_path: Path, pool: WorkerPool
) -> None:
    """For every pair the true and the false statement get the same refusal, nothing is proposed,
    and no secret is in any answer."""
    database = Database(secrets_db, pool, hide=HideRules.parse(RULES))
    library = VerifiedLibrary(tmp_path / "lib.jsonl", "secrets")
    said = []
    for number, (true, false) in enumerate(CONDITION_PROBES):
        answers = [
            propose_entry(
                library,
                database,
                question=f"probe {number} {side}",
                sql=sql,
                evidence=None,
                proposed_by="mallory",
            )
            for side, sql in (("a", true), ("b", false))
        ]
        said.append((answers[0].outcome, answers[0].message == answers[1].message, answers[1].outcome))
        assert not any(secret in a.message for a in answers for secret in SECRETS)
    assert said == [(SaveOutcome.REFUSED, True, SaveOutcome.REFUSED)] * len(CONDITION_PROBES)
    assert not proposals_path(library.path).exists()


@pytest.mark.parametrize(("sql", "hidden", "missing"), HIDDEN_AND_MISSING)
def test_a_save_answers_a_hidden_name_exactly_as_a_missing_one(
    secrets_db: Path, tmp_path: Path, pool: WorkerPool, sql: str, hidden: str, missing: str
) -> None:
    """A hidden table, column, view or index, and a missing name like it: the same message but the
    name, itself what a query of the model is told."""
    database = Database(secrets_db, pool, hide=HideRules.parse(RULES))
    library = VerifiedLibrary(tmp_path / "lib.jsonl", "secrets")
    told = [
        propose_entry(
            library,
            database,
            question=f"q {name}",
            sql=sql.replace(hidden, name),
            evidence=None,
            proposed_by="mallory",
        ).message.replace(name, "NAME")
        for name in (hidden, missing)
    ]
    query = database.query(sql.replace(hidden, missing), max_rows=0)
    assert told == [told[1], f"Not saved: its SQL fails: {query.error}.".replace(missing, "NAME")]
    assert "hid" not in told[0]


def test_a_library_line_refused_for_hidden_data_is_not_explained_to_a_saver(
    secrets_db: Path, tmp_path: Path, pool: WorkerPool
) -> None:
    """A library line asking the question already is refused: the saver is told it is not served,
    never why (a hidden name there reads as a missing one only in the rules' own words)."""
    library_file = tmp_path / "lib.jsonl"
    library_file.write_text(
        '{"question": "Mails?", "sql": "SELECT Email FROM Customer", "database": "s"}\n'
        '{"question": "Mials?", "sql": "SELECT Emial FROM Customer", "database": "s"}\n',
        encoding="utf-8",
    )
    database = Database(secrets_db, pool, hide=HideRules.parse(RULES))
    logged: list[str] = []
    library = VerifiedLibrary(library_file, "s", report=logged.append)
    told = [
        propose_entry(
            library,
            database,
            question=q,
            sql="SELECT FirstName FROM Customer",
            evidence=None,
            proposed_by="mallory",
        ).message
        for q in ("Mails?", "Mials?")
    ]
    assert told == [
        f"Not saved: lib.jsonl line {n} asks this question already and is not served; ask the "
        "library's owner to fix that line."
        for n in (1, 2)
    ]
    assert [line.split(": refused: ")[1] for line in logged] == [  # the operator's log tells them apart
        "its SQL names column Customer.Email, which the hide rules hide (its SQL fails: no such column: Email)",
        "its SQL fails: no such column: Emial",
    ]

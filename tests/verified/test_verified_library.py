"""The verified library: the same-question rule, the load checks, reloading, similar questions."""

from __future__ import annotations

import gc
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agent.episode import EpisodeSettings, EpisodeStatus, StopReason
from agent.sqlite import Database, HideRules, WorkerPool, create_database
from agent.sqlite.text_index import TextIndex
from agent.verified import VerifiedLibrary, consult, normalise_question
from agent.verified.matching import hint_evidence, query_terms, same_evidence

pytestmark = pytest.mark.anyio

SHOP = """
    CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT, email TEXT, city TEXT);
    CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer(id),
                         amount INTEGER, shipped INTEGER);
    CREATE TABLE salary (customer_id INTEGER, amount INTEGER);
    INSERT INTO customer VALUES (1, 'Ann', 'ann@x.org', 'Oslo'), (2, 'Bob', 'bob@x.org', 'Rome');
    INSERT INTO orders VALUES (1, 1, 30, 1), (2, 2, 20, 0), (3, 1, 50, 1);
    INSERT INTO salary VALUES (1, 100);
"""
COUNT_Q, COUNT_SQL = "How many orders are there?", "SELECT count(*) FROM orders"
CITY_Q, CITY_SQL = "Which city does each customer live in?", "SELECT name, city FROM customer"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A tiny shop database."""
    return create_database(tmp_path / "shop.db", SHOP)


def write_lines(path: Path, *entries: dict[str, Any] | str) -> Path:
    """A library file with these entries (a str is written as the raw line)."""
    path.write_text(
        "".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in entries), encoding="utf-8"
    )
    return path


def entry(question: str, sql: str, database: str = "shop", **more: Any) -> dict[str, Any]:
    return {"question": question, "sql": sql, "database": database, **more}


def test_the_same_question_rule_ignores_case_whitespace_and_the_final_punctuation_only() -> None:
    """Case, whitespace runs and ?!.… at the end are ignored; numbers, negations, quotes are not."""
    assert normalise_question("  How MANY\torders   are there ?? ") == "how many orders are there"
    assert normalise_question("How many orders are there…") == "how many orders are there"
    assert normalise_question("Wie viele Bestellungen gibt es？") == "wie viele bestellungen gibt es"
    different = [
        "How many orders are there in 2023?",
        "How many orders are there in 2024?",
        "How many orders are not there?",
        "How many orders are there, roughly?",
        "How many 'orders' are there?",
        "How many orders are there in Oslo?",
    ]
    assert len({normalise_question(q) for q in different}) == len(different)
    assert normalise_question("Orders over 3.5.") == "orders over 3.5"


def test_the_callers_evidence_must_be_the_entrys_own_to_be_served() -> None:
    """No evidence fits any entry; other evidence never does (a hint may change the meaning)."""
    assert same_evidence(None, "amount is in cents") and same_evidence("  ", None)
    assert same_evidence("Amount is in cents.", "amount is in cents")
    assert not same_evidence("only shipped orders", None)
    assert not same_evidence("only shipped orders", "amount is in cents")


def test_hints_are_short_bird_style_facts_and_leave_out_long_sql() -> None:
    """Each hint reads `"question" refers to SQL`; a long SQL is left out, never clipped."""
    long_sql = "SELECT " + ", ".join(f"c{i}" for i in range(300)) + " FROM t"
    assert hint_evidence(
        [
            (CITY_Q, "SELECT name,\n  city FROM customer;"),
            ("Big one?", long_sql),
            ('Say "hi"', "SELECT 1"),
            ("Third", "SELECT 3"),
        ]
    ) == (
        '"Which city does each customer live in?" refers to SELECT name, city FROM customer; '
        "\"Say 'hi'\" refers to SELECT 1"
    )
    assert hint_evidence([("Big one?", long_sql)]) is None


def test_fts5_ranks_paraphrases_first_and_reads_no_syntax_from_the_question() -> None:
    """BM25 over stemmed words; quotes, stars and NEAR in a question are plain words."""
    index = TextIndex(
        [
            "How many singers do we have?",
            "List the names of all stadiums.",
            "What is the average age of all singers?",
        ]
    )
    assert [r.position for r in index.search(query_terms("What is the total number of singer?"))] == [0, 2]
    assert index.search(query_terms('" OR * NEAR( -- ')) == []
    assert [r.position for r in index.search(query_terms('singers" OR "x'), exclude={0})] == [2]
    assert query_terms("How many singers are there?") == ["singers"]


def test_an_index_nobody_holds_closes_its_connection() -> None:
    """A replaced library snapshot's index is closed once dropped (Python 3.13 warns of an open one)."""
    index = TextIndex(["How many singers do we have?"])
    connection = index._conn
    del index
    gc.collect()
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        connection.execute("SELECT 1")


def test_loading_serves_checked_entries_and_refuses_each_bad_one_in_one_line(
    shop: Path, tmp_path: Path, pool: WorkerPool
) -> None:
    """Bad JSON, another alias, from-log, failing SQL, writes, clashes: one line each, never served."""
    library_file = write_lines(
        tmp_path / "shop-verified.jsonl",
        entry(COUNT_Q, COUNT_SQL, added_by="ann", added_at="2025-01-02T10:00:00+00:00"),
        "{not json",
        entry("How many products?", "SELECT count(*) FROM products"),
        entry("How many customers?", "SELECT count(*) FROM customer", database="hr"),
        entry("Total amount?", "SELECT sum(amount) FROM orders", tags=["from-log"]),
        entry("Delete them", "DELETE FROM orders"),
        entry("Who is the best customer?", "SELECT name FROM customer WHERE id = 1"),
        entry("who is the BEST customer", "SELECT name FROM customer WHERE id = 2"),
        entry(CITY_Q, CITY_SQL),
        entry(COUNT_Q.upper(), COUNT_SQL),
        entry("?!", "SELECT 1"),
    )
    reported: list[str] = []
    library = VerifiedLibrary(library_file, "shop", report=reported.append)
    snapshot = library.current(Database.unruled(shop, pool))
    assert [(e.line, e.question) for e in snapshot.entries] == [(1, COUNT_Q), (9, CITY_Q)]
    where = "verified library 'shop' (shop-verified.jsonl)"
    assert reported == [
        f"{where} line 2: refused: not a golden question (not a JSON object)",
        f'{where} line 3 "How many products?": refused: its SQL fails: no such table: products',
        f"{where} line 4 \"How many customers?\": refused: its database is 'hr', but this file is served "
        "for 'shop'; move it to that database's library or correct `database`",
        f'{where} line 5 "Total amount?": refused: still tagged from-log (the model\'s SQL, not reviewed '
        "yet); check it, then drop the from-log tag",
        f'{where} line 6 "Delete them": refused: its SQL is refused by the read-only guard (not allowed: '
        "DELETE; only reading statements (SELECT / WITH) are allowed)",
        f'{where} line 7 "Who is the best customer?": refused: lines 7, 8 ask the same question with '
        "different SQL or evidence; keep the right one",
        f'{where} line 8 "who is the BEST customer": refused: lines 7, 8 ask the same question with '
        "different SQL or evidence; keep the right one",
        f'{where} line 11 "?!": refused: the question is only punctuation',
    ]


def test_entries_reading_hidden_data_are_refused_as_missing_and_named_in_the_operators_log_only(
    shop: Path, tmp_path: Path, pool: WorkerPool
) -> None:
    """Under hide rules an entry reading a hidden table or column is refused: its reason is what a
    missing name gets (whoever saved it may read it); the operator's log line adds the hidden names
    its text writes (nothing runs without the rules)."""
    library_file = write_lines(
        tmp_path / "lib.jsonl",
        entry("Emails?", "SELECT email FROM customer"),
        entry("Salaries?", "SELECT sum(amount) FROM salary"),
        entry("Everything?", "SELECT * FROM customer"),
        entry("Names?", "SELECT name FROM customer"),
        entry("Missing?", "SELECT sum(amount) FROM wages"),
    )
    reported: list[str] = []
    database = Database(shop, pool, hide=HideRules.parse(["customer.email", "salary"]))
    snapshot = VerifiedLibrary(library_file, "shop", report=reported.append).current(database)
    assert [e.question for e in snapshot.entries] == ["Names?"]
    assert [r.reason for r in snapshot.refusals] == [
        "its SQL fails: no such column: email",
        "its SQL fails: no such table: salary",
        "its SQL fails: not available: customer has columns hidden by the database's owner, so SELECT * "
        "cannot read it; name the columns you need (describe_table customer lists them)",
        "its SQL fails: no such table: wages",
    ]
    assert [line.split(": refused: ")[1] for line in reported] == [
        "its SQL names column customer.email, which the hide rules hide (its SQL fails: no such column: email)",
        "its SQL names table salary, which the hide rules hide (its SQL fails: no such table: salary)",
        "its SQL fails: not available: customer has columns hidden by the database's owner, so SELECT * "
        "cannot read it; name the columns you need (describe_table customer lists them)",
        "its SQL fails: no such table: wages",
    ]


def test_shared_files_skip_other_served_aliases_silently(shop: Path, tmp_path: Path, pool: WorkerPool) -> None:
    """One file for two aliases: each serves its own entries and refuses none of the other's."""
    library_file = write_lines(
        tmp_path / "all.jsonl",
        entry(COUNT_Q, COUNT_SQL),
        entry("How many people?", "SELECT count(*) FROM people", database="hr"),
    )
    reported: list[str] = []
    library = VerifiedLibrary(library_file, "shop", shared_with={"hr"}, report=reported.append)
    assert [e.question for e in library.current(Database.unruled(shop, pool)).entries] == [COUNT_Q]
    assert reported == []


class CountingDatabase(Database):
    """A Database that counts the statements run on it."""

    statements: list[str]

    def query(self, sql: str, **kwargs: Any) -> Any:
        self.statements.append(sql)
        return super().query(sql, **kwargs)


def test_an_edited_file_is_reloaded_on_the_next_question_and_only_new_sql_runs(
    shop: Path, tmp_path: Path, pool: WorkerPool
) -> None:
    """Appending a line serves it next time; unchanged entries are not run again; deleting stops serving."""
    library_file = write_lines(tmp_path / "lib.jsonl", entry(COUNT_Q, COUNT_SQL))
    database = CountingDatabase(shop, pool, hide=HideRules())
    database.statements = []
    library = VerifiedLibrary(library_file, "shop")
    assert library.current(database).exact(CITY_Q) is None
    assert library.current(database) is library.current(database)  # unchanged: no reload
    with library_file.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry(CITY_Q, CITY_SQL)) + "\n")
    served = library.current(database).exact(CITY_Q.lower())
    assert served is not None and served.line == 2
    assert database.statements == [COUNT_SQL, CITY_SQL]
    os.unlink(library_file)
    snapshot = library.current(database)
    assert (snapshot.entries, snapshot.missing) == ((), True)


async def test_consult_answers_the_same_question_from_the_library_without_a_model(
    shop: Path, tmp_path: Path, pool: WorkerPool
) -> None:
    """The entry's SQL runs now: status verified, rows, tables read, provenance; limits apply."""
    library = VerifiedLibrary(
        write_lines(
            tmp_path / "lib.jsonl",
            entry(COUNT_Q, COUNT_SQL, added_by="ann", added_at="2025-01-02T10:00:00+00:00", tags=["orders"]),
            entry(CITY_Q, CITY_SQL),
        ),
        "shop",
    )
    database = Database.unruled(shop, pool)
    consulted = await consult(library, database, "how many orders are there", None, settings=EpisodeSettings())
    answer = consulted.answer
    assert answer is not None and consulted.provenance is not None
    assert (
        answer.status,
        answer.stop_reason,
        answer.sql,
        answer.rows,
        answer.row_count,
        answer.rounds,
        answer.tables_read,
        answer.question,
    ) == (
        EpisodeStatus.VERIFIED,
        StopReason.VERIFIED,
        COUNT_SQL,
        ((3,),),
        1,
        (),
        ("orders",),
        "how many orders are there",
    )
    assert (
        consulted.provenance.line,
        consulted.provenance.added_by,
        consulted.provenance.tags,
        consulted.similar,
    ) == (1, "ann", ("orders",), ())
    capped = await consult(library, database, CITY_Q, None, settings=EpisodeSettings(result_rows=1))
    assert capped.answer is not None and (
        capped.answer.rows,
        capped.answer.row_count,
        capped.answer.truncated,
    ) == ((("Ann", "Oslo"),), 2, True)


async def test_consult_never_serves_an_entry_that_fails_now_or_other_evidence(
    tmp_path: Path, pool: WorkerPool
) -> None:
    """A table dropped after loading, or the caller's own evidence: the model answers, told why."""
    shop = create_database(tmp_path / "shop.db", SHOP)
    library = VerifiedLibrary(write_lines(tmp_path / "lib.jsonl", entry(COUNT_Q, COUNT_SQL)), "shop")
    database = Database.unruled(shop, pool)
    library.current(database)
    other = await consult(library, database, COUNT_Q, "only shipped ones", settings=EpisodeSettings())
    assert other.answer is None and "evidence differs" in (other.not_served or "")
    assert [e.question for e in other.similar] == [COUNT_Q]  # listed to compare
    create_database(shop, "CREATE TABLE other (x);")  # the file is replaced: no orders table now
    gone = await consult(library, database, COUNT_Q, None, settings=EpisodeSettings())
    assert gone.answer is None
    assert gone.not_served == (
        "a verified answer to this question exists, but its SQL failed (no such "
        "table: orders) on the current data, so the model answered; ask the "
        "library's owner to check it"
    )
    fresh = await consult(library, database, COUNT_Q, None, settings=EpisodeSettings(), use_exact=False)
    assert (fresh.answer, fresh.not_served, [e.question for e in fresh.similar]) == (None, None, [COUNT_Q])


async def test_similar_questions_are_listed_not_served(shop: Path, tmp_path: Path, pool: WorkerPool) -> None:
    """A paraphrase gets the similar entries, best first, and no verified answer."""
    total = entry("What is the total order amount?", "SELECT sum(amount) FROM orders")
    library = VerifiedLibrary(
        write_lines(tmp_path / "lib.jsonl", entry(COUNT_Q, COUNT_SQL), entry(CITY_Q, CITY_SQL), total), "shop"
    )
    consulted = await consult(
        library, Database.unruled(shop, pool), "Count the orders", None, settings=EpisodeSettings()
    )
    assert consulted.answer is None
    assert [e.question for e in consulted.similar] == [COUNT_Q, "What is the total order amount?"]
    assert consulted.hints() == (
        '"How many orders are there?" refers to SELECT count(*) FROM orders; '
        '"What is the total order amount?" refers to SELECT sum(amount) FROM orders'
    )

"""Verified answers with parameters: templates loaded and checked, a question read into one, misses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.episode import EpisodeSettings, EpisodeStatus
from agent.sqlite import Database, HideRules, WorkerPool, create_database
from agent.verified import BoundParam, Consulted, TemplateMiss, VerifiedLibrary, consult

pytestmark = pytest.mark.anyio

SHOP = """
    CREATE TABLE genre (id INTEGER PRIMARY KEY, name TEXT, secret TEXT, empty TEXT);
    CREATE TABLE orders (id INTEGER PRIMARY KEY, genre_id INTEGER, shipped_at TEXT, amount INTEGER);
    INSERT INTO genre VALUES (1, 'Rock', 's1', NULL), (2, 'Jazz', 's2', NULL), (3, 'Hip Hop', 's3', NULL),
                             (4, 'O''Brien''s', 's4', NULL), (5, 'Metal', 's5', NULL), (6, 'METAL', 's6', NULL);
    INSERT INTO orders VALUES (1, 1, '2024-03-02', 10), (2, 2, '2024-03-20', 20), (3, 1, '2024-04-01', 30),
                              (4, 3, '2023-03-05', 5), (5, 4, '2024-03-05', 7);
"""
MONTH_Q = "How many orders shipped in {month}?"
MONTH_SQL = "SELECT count(*) AS orders FROM orders WHERE shipped_at LIKE :month || '%'"
GENRE_Q = "How many {genre} orders are there?"
GENRE_SQL = (
    "SELECT count(*) AS orders FROM orders JOIN genre ON genre.id = orders.genre_id WHERE genre.name = :genre"
)
TOP_Q = "What are the {n} largest orders?"
TOP_SQL = "SELECT id, amount FROM orders ORDER BY amount DESC LIMIT :n"
DAY_Q = "Which orders shipped on {day}?"
DAY_SQL = "SELECT id FROM orders WHERE shipped_at = :day ORDER BY id"
SETTINGS = EpisodeSettings()


@pytest.fixture
def database(tmp_path: Path, pool: WorkerPool) -> Database:
    """The shop, with genre.secret hidden."""
    return Database(create_database(tmp_path / "shop.db", SHOP), pool, hide=HideRules.parse(["genre.secret"]))


def template(question: str, sql: str, **params: dict[str, Any]) -> dict[str, Any]:
    return {"question": question, "sql": sql, "database": "shop", "params": params}


MONTH = template(MONTH_Q, MONTH_SQL, month={"type": "month"})
GENRE = template(GENRE_Q, GENRE_SQL, genre={"type": "value", "column": "Genre.Name"})
TOP = template(TOP_Q, TOP_SQL, n={"type": "top", "max": 3})
DAY = template(DAY_Q, DAY_SQL, day={"type": "date"})


def library_of(tmp_path: Path, *entries: dict[str, Any], reported: list[str] | None = None) -> VerifiedLibrary:
    path = tmp_path / "shop-verified.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return VerifiedLibrary(path, "shop", report=(reported if reported is not None else []).append)


async def ask(
    library: VerifiedLibrary, database: Database, question: str, evidence: str | None = None, **more: Any
) -> Consulted:
    return await consult(library, database, question, evidence, settings=SETTINGS, **more)


async def test_a_question_with_a_new_month_value_or_count_is_answered_with_bound_values(
    tmp_path: Path, database: Database
) -> None:
    """Each value is read from the question and bound: rows of the template's SQL for it, no model."""
    library = library_of(tmp_path, MONTH, GENRE, TOP, DAY)
    cases = [
        (
            "how many orders shipped in March 2024",
            [(3,)],
            BoundParam("month", "month", "March 2024", "2024-03"),
        ),
        ("How many orders shipped in 2024-04?", [(1,)], BoundParam("month", "month", "2024-04", "2024-04")),
        ("How many hip hop orders are there?", [(1,)], BoundParam("genre", "value", "hip hop", "Hip Hop")),
        (
            "How many o'brien's orders are there?",
            [(1,)],
            BoundParam("genre", "value", "o'brien's", "O'Brien's"),
        ),
        ("What are the TWO largest orders?", [(3, 30), (2, 20)], BoundParam("n", "top", "TWO", 2)),
        (
            "Which orders shipped on March 5th, 2024?",
            [(5,)],
            BoundParam("day", "date", "March 5th, 2024", "2024-03-05"),
        ),
    ]
    for question, rows, bound in cases:
        got = await ask(library, database, question)
        assert got.answer is not None and got.provenance is not None, (question, got.not_served)
        assert (
            got.answer.status,
            [tuple(r) for r in got.answer.rows],
            got.answer.question,
            got.provenance.params,
            got.answer.tokens,
        ) == (EpisodeStatus.VERIFIED, rows, question, (bound,), 0)
        assert got.answer.sql == next(
            e["sql"] for e in (MONTH, GENRE, TOP, DAY) if e["question"] == got.provenance.question
        )  # the SQL as verified, :name and all


async def test_a_miss_falls_to_the_model_and_says_why_when_a_templates_words_fit(
    tmp_path: Path, database: Database
) -> None:
    """Unread slot text, a value not in the column, bounds, a second literal, a negation: never served."""
    library = library_of(tmp_path, MONTH, GENRE, TOP)
    cases = {
        "How many orders shipped in Marchh 2024?": (
            TemplateMiss.SLOT_NOT_READ,
            (
                'the verified template "How many orders shipped in {month}?" (line 1) fits this question\'s '
                'words, but "Marchh 2024" is not a month with its year such as March 2024 or 2024-03 for '
                "{month}, so the model answered; write the value in a form the template reads"
            ),
        ),
        "How many orders shipped in March 2024 or April 2024?": (TemplateMiss.SLOT_NOT_READ, None),
        "How many orders shipped in last month?": (TemplateMiss.SLOT_NOT_READ, None),
        "How many Blues orders are there?": (
            TemplateMiss.SLOT_NOT_READ,
            (
                'the verified template "How many {genre} orders are there?" (line 2) fits this question\'s '
                'words, but "Blues" is no value of Genre.Name (compared but for the case of A-Z) for {genre}, '
                "so the model answered; write the value in a form the template reads"
            ),
        ),
        "How many Rock or Jazz orders are there?": (TemplateMiss.SLOT_NOT_READ, None),
        "How many hip orders are there?": (TemplateMiss.SLOT_NOT_READ, None),  # a value found only partly
        "How many x' OR 1=1 -- orders are there?": (TemplateMiss.SLOT_NOT_READ, None),
        "What are the 4 largest orders?": (TemplateMiss.SLOT_NOT_READ, None),
        "What are the 2 smallest orders?": (TemplateMiss.PARAPHRASE, None),
        "How many orders did not ship in March 2024?": (TemplateMiss.PARAPHRASE, None),
        "How many orders shipped in March 2024 in Oslo?": (TemplateMiss.SLOT_NOT_READ, None),
    }
    for question, (miss, note) in cases.items():
        got = await ask(library, database, question)
        assert (got.answer, got.template_miss) == (None, miss), question
        if note is not None:
            assert got.not_served == note


async def test_a_number_that_would_be_rounded_falls_to_the_model(tmp_path: Path, database: Database) -> None:
    """A number slot never binds a rounded value: 0.99999999999999999 is not served as 1.0 (0 rows where
    the question asks for every order); an exact one is bound as written."""
    above = template(
        "Which orders are above {amount}?",
        "SELECT id FROM orders WHERE amount > :amount ORDER BY id",
        amount={"type": "number"},
    )
    library = library_of(tmp_path, above)
    for text in ("0.99999999999999999", "4.99999999999999999999", "9223372036854775808"):
        got = await ask(library, database, f"Which orders are above {text}?")
        assert (got.answer, got.template_miss) == (None, TemplateMiss.SLOT_NOT_READ), text
        assert got.not_served is not None and f'"{text}" is not ' in got.not_served
    got = await ask(library, database, "Which orders are above 9.5?")
    assert got.answer is not None and [tuple(r) for r in got.answer.rows] == [(1,), (2,), (3,)]


async def test_ambiguity_is_a_miss(tmp_path: Path, database: Database) -> None:
    """Two templates fitting, a date read two ways, a value matching two spellings: the model answers."""
    other_month = template(
        "How many orders shipped in {when}?", MONTH_SQL.replace(":month", ":when"), when={"type": "month"}
    )
    library = library_of(tmp_path, GENRE, DAY, MONTH, other_month)
    two = await ask(library, database, "How many orders shipped in March 2024?")
    date = await ask(library, database, "Which orders shipped on 3/5/2024?")
    metal = await ask(library, database, "How many metal orders are there?")
    assert [(g.answer, g.template_miss) for g in (two, date, metal)] == [(None, TemplateMiss.AMBIGUOUS)] * 3
    assert two.not_served == (
        "this question fits 2 verified templates (lines 3, 4), so the model answered; "
        "ask it in the words of one of them"
    )
    assert date.not_served == (
        'the verified template "Which orders shipped on {day}?" (line 2) reads this '
        'question in more than one way (day = "2024-03-05" or day = "2024-05-03"), so '
        "the model answered; write the values so they read one way (a date as "
        "2024-03-05)"
    )
    day_first = await ask(library, database, "Which orders shipped on 5/3/2024?")  # 5 March or 3 May: both real
    unique = await ask(library, database, "Which orders shipped on 20/3/2024?")
    assert (day_first.answer, unique.answer is not None) == (None, True)


async def test_the_same_question_tier_comes_first_and_evidence_and_verified_false_are_kept(
    tmp_path: Path, database: Database
) -> None:
    """An exact entry answers its own question; other evidence, or verified: false, never serves a template."""
    exact = {"question": "How many orders shipped in March 2024?", "sql": "SELECT 42", "database": "shop"}
    with_evidence = {**GENRE, "evidence": "count every order"}
    library = library_of(tmp_path, MONTH, exact, with_evidence)
    got = await ask(library, database, "How many orders shipped in March 2024?")
    assert got.answer is not None and got.provenance is not None
    assert (got.answer.sql, got.provenance.params) == ("SELECT 42", ())
    other = await ask(library, database, "How many Rock orders are there?", "only shipped ones")
    assert other.answer is None and other.not_served == (
        "the verified template of line 3 answers this question, but this call's evidence differs from the "
        "evidence it was verified with, so the model answered"
    )
    (tmp_path / "other").mkdir()
    templates_only = library_of(tmp_path / "other", MONTH, with_evidence)
    fresh = await ask(templates_only, database, "How many orders shipped in April 2024?", use_exact=False)
    assert (fresh.answer, fresh.template_miss) == (None, None)
    assert MONTH_Q in [e.question for e in fresh.similar]  # the template is listed as similar
    assert fresh.hinted() == ()  # but never given to the model: it would copy :month


async def test_loading_checks_each_template_with_sample_values_and_refuses_it_in_one_line(
    tmp_path: Path, database: Database
) -> None:
    """Disagreeing slots, a plain entry binding a parameter, failing SQL, a missing, hidden or empty
    column, clashing templates: each refused in one line; a hidden column reads as a missing one."""
    reported: list[str] = []
    library = library_of(
        tmp_path,
        MONTH,
        template("Orders in {month} by {city}?", MONTH_SQL, month={"type": "month"}),
        {"question": "Orders by month?", "sql": MONTH_SQL, "database": "shop"},
        template("Orders of {n} items?", "SELECT count(*) FROM orders WHERE items = :n", n={"type": "integer"}),
        template(
            "Orders of secret {s}?",
            "SELECT count(*) FROM orders WHERE :s > 0",
            s={"type": "value", "column": "genre.secret"},
        ),
        template(
            "Orders of nosuch {s}?",
            "SELECT count(*) FROM orders WHERE :s > 0",
            s={"type": "value", "column": "genre.nosuch"},
        ),
        template(
            "Orders of empty {s}?",
            "SELECT count(*) FROM orders WHERE :s > 0",
            s={"type": "value", "column": "genre.empty"},
        ),
        template("Top {n} orders?", "SELECT * FROM orders LIMIT :n", n={"type": "top"}),
        template("top {n} ORDERS", "SELECT * FROM orders ORDER BY id LIMIT :n", n={"type": "top"}),
        reported=reported,
    )
    snapshot = library.current(database)
    assert [e.line for e in snapshot.entries] == [1]
    assert [(r.line, r.reason, r.logged) for r in snapshot.refusals] == [
        (
            2,
            "its question writes {city}, which params does not declare; declare it, or write the question "
            "without that slot",
            None,
        ),
        (
            3,
            'its SQL binds :month, but the entry declares no params; declare each parameter in "params" and '
            "write it in the question as {name}",
            None,
        ),
        (4, "its SQL fails: no such column: items", None),
        (
            5,
            "its parameter s is a value of genre.secret, but reading that column fails: no such column: "
            "genre.secret",
            "its parameter s names column genre.secret, which the hide rules hide (its parameter s is a value "
            "of genre.secret, but reading that column fails: no such column: genre.secret)",
        ),
        (
            6,
            "its parameter s is a value of genre.nosuch, but reading that column fails: no such column: "
            "genre.nosuch",
            None,
        ),
        (
            7,
            "its parameter s is a value of genre.empty, but that column holds no text or number to check the "
            "SQL with",
            None,
        ),
        (
            8,
            "lines 8, 9 ask the same question with different SQL, evidence or params; keep the right one",
            None,
        ),
        (
            9,
            "lines 8, 9 ask the same question with different SQL, evidence or params; keep the right one",
            None,
        ),
    ]
    assert len(reported) == 8 and reported[3].startswith(
        "verified library 'shop' (shop-verified.jsonl) line 5 \"Orders of secret {s}?\": refused: its "
        "parameter s names column genre.secret"
    )


async def test_a_template_failing_on_the_current_data_is_not_served(tmp_path: Path, pool: WorkerPool) -> None:
    """Checked at load with a sample; SQL failing for the question's own values says why, the model answers."""
    path = create_database(tmp_path / "n.db", "CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1), (2);")
    database = Database.unruled(path, pool)
    # 1 (the sample) and 3 run; 2 makes abs() overflow.
    library = library_of(
        tmp_path,
        template("Show {n} for t", "SELECT abs(:n * -4611686018427387904) FROM t", n={"type": "integer"}),
    )
    assert (await ask(library, database, "Show 3 for t")).answer is not None
    failed = await ask(library, database, "Show 2 for t")
    assert failed.answer is None and failed.not_served == (
        "the verified template of line 1 answers this question, but its SQL failed (integer overflow) on the "
        "current data, so the model answered; ask the library's owner to check it"
    )


async def test_no_hidden_data_is_ever_a_value_whatever_hides_it(tmp_path: Path, pool: WorkerPool) -> None:
    """A value slot over a hidden table, a view reading a hidden column, a generated column computed
    from one, or a hidden column itself: refused as a missing column is, word for word."""
    path = create_database(
        tmp_path / "h.db",
        """
        CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, salary INTEGER,
                             band TEXT GENERATED ALWAYS AS (CASE WHEN salary > 50 THEN 'high' ELSE 'low' END));
        CREATE TABLE payroll (id INTEGER, iban TEXT);
        CREATE VIEW pay AS SELECT name, salary FROM people;
        INSERT INTO people (id, name, salary) VALUES (1, 'Ann', 90), (2, 'Bob', 10);
        INSERT INTO payroll VALUES (1, 'DE00');
    """,
    )
    database = Database(path, pool, hide=HideRules.parse(["people.salary", "payroll"]))
    columns = ["payroll.iban", "pay.salary", "people.band", "people.salary", "people.nosuch", "nosuch.name"]
    library = library_of(
        tmp_path,
        *(
            template(
                f"Who has {c} {{v}}?", "SELECT name FROM people WHERE :v > 0", v={"type": "value", "column": c}
            )
            for c in columns
        ),
    )
    refusals = library.current(database).refusals
    said = {
        "payroll.iban": "no such table: payroll",
        "pay.salary": "no such table: pay",
        "people.band": "no such column: people.band",
        "people.salary": "no such column: people.salary",
        "people.nosuch": "no such column: people.nosuch",
        "nosuch.name": "no such table: nosuch",
    }
    assert [r.reason for r in refusals] == [
        f"its parameter v is a value of {c}, but reading that column fails: {said[c]}" for c in columns
    ]
    assert [bool(r.logged) for r in refusals] == [True, True, True, True, False, False]
    assert (await ask(library, database, "Who has people.salary 90?")).answer is None

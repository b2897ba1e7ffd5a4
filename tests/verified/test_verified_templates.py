"""Verified templates (pure): what a slot's text reads as, what makes an entry a template, and
every way a question's words fit one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.golden_file import GoldenEntry, SlotType, parse_lines
from agent.verified import TEMPLATE_RULE, normalise_question
from agent.verified.slot_types import Reading, read_slot, sample_value
from agent.verified.templates import Template, fold_question, splits, template_of, unbound_refusal

T = SlotType


@pytest.mark.parametrize(
    ("kind", "text", "values"),
    [
        (T.INTEGER, "12", (12,)),
        (T.INTEGER, "-3", (-3,)),
        (T.INTEGER, "1,500", (1500,)),
        (T.INTEGER, "Twelve", (12,)),
        (T.INTEGER, "zero", (0,)),
        (T.NUMBER, "2.5", (2.5,)),
        (T.NUMBER, "1,200.75", (1200.75,)),
        (T.NUMBER, "7", (7,)),
        (T.YEAR, "2024", (2024,)),
        (T.MONTH, "March 2024", ("2024-03",)),
        (T.MONTH, "mar. 2024", ("2024-03",)),
        (T.MONTH, "SEPT 2024", ("2024-09",)),
        (T.MONTH, "March, 2024", ("2024-03",)),
        (T.MONTH, "2024-3", ("2024-03",)),
        (T.MONTH, "2024/03", ("2024-03",)),
        (T.MONTH, "03/2024", ("2024-03",)),
        (T.DATE, "2024-03-05", ("2024-03-05",)),
        (T.DATE, "2024/3/5", ("2024-03-05",)),
        (T.DATE, "March 5, 2024", ("2024-03-05",)),
        (T.DATE, "march 5th 2024", ("2024-03-05",)),
        (T.DATE, "5 March 2024", ("2024-03-05",)),
        (T.DATE, "5th of Mar, 2024", ("2024-03-05",)),
        (T.DATE, "5.3.2024", ("2024-03-05",)),
        (T.DATE, "13/5/2024", ("2024-05-13",)),
        (T.DATE, "5/13/2024", ("2024-05-13",)),
        (T.DATE, "5/5/2024", ("2024-05-05",)),
        (T.DATE, "3/5/2024", ("2024-03-05", "2024-05-03")),  # two readings: ambiguous
        (T.TOP, "5", (5,)),
        (T.TOP, "ten", (10,)),
    ],
)
def test_each_type_reads_its_written_forms_exactly(kind: SlotType, text: str, values: tuple[Any, ...]) -> None:
    """Every form the docs list reads as its one value; 3/5/2024 reads two ways and is ambiguous."""
    assert read_slot(kind, text) == Reading(values)


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        (T.INTEGER, "1,50"),
        (T.INTEGER, "12 years"),
        (T.INTEGER, "12.0"),
        (T.INTEGER, "1e3"),
        (T.INTEGER, "+4"),
        (T.INTEGER, "9" * 20),
        (T.INTEGER, "٣"),
        (T.INTEGER, "twenty one"),
        (T.INTEGER, "3 or 4"),
        (T.NUMBER, "3,5"),
        (T.NUMBER, ".5"),
        (T.NUMBER, "30%"),
        (T.NUMBER, "$30"),
        (T.NUMBER, "nan"),
        (T.YEAR, "24"),
        (T.YEAR, "２０２４"),
        (T.YEAR, "2023 or 2024"),
        (T.YEAR, "2024-03"),
        (T.YEAR, "last year"),
        (T.MONTH, "March"),
        (T.MONTH, "2024"),
        (T.MONTH, "2024-13"),
        (T.MONTH, "March. 2024"),
        (T.MONTH, "last month"),
        (T.MONTH, "this month"),
        (T.MONTH, "March 2024 or April 2024"),
        (T.MONTH, "Marchh 2024"),
        (T.DATE, "2024-02-30"),
        (T.DATE, "March 5"),
        (T.DATE, "yesterday"),
        (T.DATE, "2024-03"),
        (T.DATE, "13/13/2024"),
        (T.TOP, "a few"),
        (T.TOP, "third"),
    ],
)
def test_other_text_reads_as_nothing_and_says_what_the_type_reads(kind: SlotType, text: str) -> None:
    """Relative dates, units, lists, other digits and near misses are no value: the caller is told the forms."""
    reading = read_slot(kind, text)
    assert reading.values == () and reading.why_not is not None and reading.why_not.startswith("is not ")


@pytest.mark.parametrize(
    ("kind", "text", "values"),
    [
        (T.NUMBER, "0.1", (0.1,)),
        (T.NUMBER, "0.30000000000000004", (0.30000000000000004,)),
        (T.NUMBER, "-0.0", (-0.0,)),
        (T.NUMBER, "5.00", (5.0,)),
        (T.NUMBER, "100000000000000000000.0", (1e20,)),
        (T.NUMBER, "9223372036854775807", (2**63 - 1,)),
        (T.NUMBER, "-9,223,372,036,854,775,808", (-(2**63),)),
        (T.INTEGER, "9223372036854775807", (2**63 - 1,)),
    ],
)
def test_a_number_is_read_when_the_value_bound_is_the_number_written(
    kind: SlotType, text: str, values: tuple[Any, ...]
) -> None:
    """A decimal reads as the float that prints as it (0.1), an integer up to SQLite's 64-bit range."""
    assert read_slot(kind, text) == Reading(values)


@pytest.mark.parametrize(
    ("kind", "text", "why"),
    [
        (T.NUMBER, "0.99999999999999999", "is not a number SQLite holds exactly (it would be rounded to 1.0)"),
        (T.NUMBER, "1.00000000000000001", "is not a number SQLite holds exactly (it would be rounded to 1.0)"),
        (
            T.NUMBER,
            "0.3000000000000000444",
            "is not a number SQLite holds exactly (it would be rounded to 0.30000000000000004)",
        ),
        (
            T.NUMBER,
            "123456789012345678.5",
            "is not a number SQLite holds exactly (it would be rounded to 1.2345678901234568e+17)",
        ),
        (
            T.NUMBER,
            "-99,999,999,999,999,999.25",
            "is not a number SQLite holds exactly (it would be rounded to -1e+17)",
        ),
        (
            T.NUMBER,
            "9223372036854775808",
            "is not a whole number SQLite holds (from -9,223,372,036,854,775,808 to 9,223,372,036,854,775,807)",
        ),
        (
            T.NUMBER,
            "-9223372036854775809",
            "is not a whole number SQLite holds (from -9,223,372,036,854,775,808 to 9,223,372,036,854,775,807)",
        ),
        (
            T.INTEGER,
            "18,446,744,073,709,551,616",
            "is not a whole number SQLite holds (from -9,223,372,036,854,775,808 to 9,223,372,036,854,775,807)",
        ),
        (
            T.TOP,
            "99999999999999999999",
            "is not a whole number SQLite holds (from -9,223,372,036,854,775,808 to 9,223,372,036,854,775,807)",
        ),
    ]
    + [
        (T.NUMBER, text, "is not a number such as 12, 2.5 or 1,200.75")
        for text in (
            "1e400",
            "1e3",
            "1E-5",
            "NaN",
            "nan",
            "Infinity",
            "-inf",
            "1_000",
            "0x10",
            "0b1",
            "0o7",
            "+1",
            "+1.5",
            "１２",
            "１.５",
            "٣.٥",
            "1.",
            ".5",
            "1..5",
            "1.2.3",
            "1,0000.5",
            "0.5e0",
            " 1.5",
            "1.5 ",
            "1.5\n",
            "9" * 41,
            "1." + "0" * 40,
        )
    ],
)
def test_a_number_that_would_be_rounded_or_is_past_sqlites_range_reads_as_none(
    kind: SlotType, text: str, why: str
) -> None:
    """Rounding would bind another number (0.99999999999999999 as 1.0) and answer another question:
    such a text, an integer past SQLite's 64-bit range, and other spellings read as no value."""
    assert read_slot(kind, text) == Reading(why_not=why)


def test_bounds_refuse_a_value_outside_them_and_top_starts_at_one() -> None:
    """min and max bound the numeric types; a top count is at least 1 unless its bounds say otherwise."""
    assert read_slot(T.INTEGER, "12", minimum=1, maximum=10) == Reading(why_not="is not between 1 and 10")
    assert read_slot(T.NUMBER, "0.5", minimum=1) == Reading(why_not="is less than 1")
    assert read_slot(T.YEAR, "2031", maximum=2030) == Reading(why_not="is more than 2030")
    assert read_slot(T.TOP, "0") == Reading(why_not="is less than 1")
    assert read_slot(T.TOP, "0", minimum=0) == Reading((0,))
    assert [sample_value(k) for k in (T.INTEGER, T.NUMBER, T.YEAR, T.MONTH, T.DATE, T.TOP)] == [
        1,
        1,
        2000,
        "2000-01",
        "2000-01-01",
        1,
    ]
    assert (
        sample_value(T.INTEGER, minimum=5),
        sample_value(T.YEAR, maximum=1990),
        sample_value(T.NUMBER, minimum=-3, maximum=-1),
    ) == (5, 1990, -1)


def entry(question: str, sql: str, **params: dict[str, Any]) -> GoldenEntry:
    return GoldenEntry(question=question, sql=sql, database="shop", params=params or None)


MONTH = {"type": "month"}


def test_a_template_is_its_folded_words_around_its_slots() -> None:
    """Words fold as a same question does (case, whitespace, final punctuation); slots keep their order."""
    template = template_of(
        entry(
            "  How many ORDERS\tshipped in {month} to {city} ?",
            "SELECT :city, :month",
            month=MONTH,
            city={"type": "value", "column": "customer.city"},
        )
    )
    assert isinstance(template, Template)
    assert template.words == ("how many orders shipped in ", " to ", "")
    assert [(s.name, s.kind) for s in template.slots] == [("month", T.MONTH), ("city", T.VALUE)]


@pytest.mark.parametrize(
    ("question", "sql", "params", "why"),
    [
        (
            "Orders in {month} by {city}?",
            "SELECT :month",
            {"month": MONTH},
            "its question writes {city}, which params does not declare; declare it, or write the question "
            "without that slot",
        ),
        (
            "Orders in March?",
            "SELECT :month",
            {"month": MONTH},
            "params declares month, which its question does not write as {month}",
        ),
        (
            "Orders from {month} to {month}?",
            "SELECT :month",
            {"month": MONTH},
            "its question writes {month} twice; each slot is read from the question once",
        ),
        (
            "Orders in {month}{n}?",
            "SELECT :month, :n",
            {"month": MONTH, "n": {"type": "integer"}},
            "its question has two slots with nothing between them; put words between the slots",
        ),
        (
            "{month}?",
            "SELECT :month",
            {"month": MONTH},
            "its question is nothing but its slots; a template needs words around them to match",
        ),
        (
            "Orders in {month}?",
            "SELECT ?",
            {"month": MONTH},
            "its SQL binds ? by position; name each parameter as params does (:month)",
        ),
        ("Orders in {month}?", "SELECT @month", {"month": MONTH}, "its SQL binds @month; write it :month"),
        (
            "Orders in {month}?",
            "SELECT :month, :day",
            {"month": MONTH},
            "its SQL binds :day, which params does not declare",
        ),
        (
            "Orders in {month}?",
            "SELECT ':month' -- :month",
            {"month": MONTH},
            "params declares month, which its SQL does not bind (write :month where it goes)",
        ),
    ],
)
def test_an_entry_whose_question_params_and_sql_disagree_is_refused_in_one_line(
    question: str, sql: str, params: dict[str, Any], why: str
) -> None:
    """Every declared slot is written once in the question and bound as :name; nothing else is bound."""
    assert template_of(entry(question, sql, **params)) == why


def test_sql_binding_a_parameter_needs_params_and_params_are_checked_as_the_file_is_read() -> None:
    """A plain entry may bind nothing; a bad type, a bound on a month, a value without column: one line."""
    assert unbound_refusal("SELECT count(*) FROM t WHERE m = :month") == (
        'its SQL binds :month, but the entry declares no params; declare each parameter in "params" and '
        "write it in the question as {name}"
    )
    assert unbound_refusal("SELECT ':month', \":x\", [:y] -- :z") is None
    lines = [
        '{"question": "q {m}", "sql": "SELECT :m", "database": "d", "params": {"m": {"type": "week"}}}',
        '{"question": "q {m}", "sql": "SELECT :m", "database": "d", "params": {"m": {"type": "month", '
        '"max": 3}}}',
        '{"question": "q {m}", "sql": "SELECT :m", "database": "d", "params": {"m": {"type": "value"}}}',
        '{"question": "q {m}", "sql": "SELECT :m", "database": "d", "params": {"m": {"type": "integer", '
        '"min": 5, "max": 1}}}',
        '{"question": "q {2m}", "sql": "SELECT 1", "database": "d", "params": {"2m": {"type": "year"}}}',
    ]
    assert [why for _, why in parse_lines("\n".join(lines))] == [
        "params.m.type: Input should be 'integer', 'number', 'year', 'month', 'date', 'value' or 'top'",
        "params.m: a month parameter takes no min or max; only integer, number, year, top do",
        'params.m: a value parameter names its column as "TABLE.COLUMN", e.g. {"type": "value", "column": '
        '"Genre.Name"}',
        "params.m: min 5 is more than max 1",
        "params: parameter '2m': a name is letters, digits and _ (not first a digit), as the question writes "
        "{name} and the SQL :name",
    ]


def fits(question: str, template_question: str, **params: dict[str, Any]) -> list[tuple[str, ...]] | None:
    sql = "SELECT " + ", ".join(f":{n}" for n in params)
    template = template_of(entry(template_question, sql, **params))
    assert isinstance(template, Template), template
    return splits(template, fold_question(question))


def test_a_questions_words_fit_a_templates_in_every_way_with_slot_text_as_written() -> None:
    """Each way the words fit gives each slot the question's own text; other words never fit."""
    n = {"type": "integer"}
    assert fits(
        "how many ORDERS shipped in March 2024 ?!", "How many orders shipped in {month}?", month=MONTH
    ) == [("March 2024",)]
    assert fits("List 1 and 2 and 3", "List {a} and {b}", a=n, b=n) == [("1", "2 and 3"), ("1 and 2", "3")]
    assert (
        fits("How many orders were shipped in March 2024?", "How many orders shipped in {month}?", month=MONTH)
        == []
    )
    assert fits("How many orders shipped in?", "How many orders shipped in {month}?", month=MONTH) == []
    assert fits("Orders in Straße 5", "Orders in straße {n}", n=n) == [("5",)]
    assert fits("ORDERS IN STRASSE 5", "Orders in straße {n}", n=n) == [("5",)]
    assert fits("Orders in stras 5", "Orders in stra{n}", n=n) == [("s 5",)]
    assert fits("Orders in straße", "Orders in stras{n}", n=n) == []  # the cut would split ß in two
    assert fits(" ".join(["x"] * 80), "{a} x {b}", a=n, b=n) is None  # more than MAX_SPLITS ways


@pytest.mark.parametrize(
    "question",
    [
        "  How MANY\torders   are there ?? ",
        "Wie viele Straßen gibt es？",
        "ǅemal İstanbul ΣΑΣ…",
        "xxx!",
        "?!",
    ],
)
def test_a_question_folds_exactly_as_the_same_question_tier_folds_it(question: str) -> None:
    """fold_question's text is normalise_question's, and every cut at a character maps back to it."""
    folded = fold_question(question)
    original = folded.original(0, len(folded.folded))
    assert folded.folded == normalise_question(question)
    assert original is not None and normalise_question(original) == folded.folded
    assert folded.spaced.startswith(original)


def test_the_docs_state_the_matching_rule_in_its_one_sentence() -> None:
    """docs/verified-answers.md says TEMPLATE_RULE word for word (the rule the code follows)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "verified-answers.md").read_text(encoding="utf-8")
    flat = " ".join(page.replace("**", "").split())
    assert f"{TEMPLATE_RULE[0].upper()}{TEMPLATE_RULE[1:]}." in flat

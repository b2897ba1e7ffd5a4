"""The types a verified template's slot may have, and how a question's text is read as one (pure).

Each type reads a fixed set of written forms, and every reading is exact: a text either reads
as one value, or as none (then why, to tell the caller), or as several (ambiguous: never
served). What is bound to the SQL is a plain SQLite value:

- `integer`: `12`, `-3`, `1,500` (commas between groups of three digits), or a word from
  `zero` to `twenty`; an int within SQLite's 64-bit range and the slot's bounds;
- `number`: the integer forms, and decimals with a point (`2.5`, `1,200.75`); an int when
  there is no decimal part, else a float, and only when the float is the number as written
  (`0.1` is, as Python and SQLite print it; `0.99999999999999999` is not: it would be bound as
  `1.0` and answer another question, so it reads as no value and the model answers);
- `year`: four digits (`2024`); an int;
- `month`: `March 2024`, `Mar 2024`, `Mar. 2024`, `March, 2024`, `2024-03`, `2024/3`,
  `03/2024`; bound as the text `2024-03`;
- `date`: `2024-03-05`, `2024/3/5`, `March 5, 2024`, `March 5th 2024`, `5 March 2024`, `5th of
  March, 2024`, `5.3.2024` (day first), and `3/5/2024`, which is read both month first and day
  first: it is a date only when one reading is a valid date or both give the same day (else
  ambiguous); bound as the text `2024-03-05`;
- `top`: a count of rows to show, read as `integer` is, at least 1 unless its bounds say
  otherwise;
- `value`: a value a column holds (checked against the database, not here).

Month names are English, in full or as their three-letter abbreviation (and `Sept`), with the
letters A-Z in any case; digits are ASCII digits. Relative dates (`last month`, `this year`,
`yesterday`) are never read: which day they name depends on a clock, and the data's clock is
not the server's.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from decimal import Decimal

from ..golden_file import SlotType

SlotValue = int | float | str  # what a slot's text reads as, and is bound to the SQL

INT64 = (-(2**63), 2**63 - 1)  # what SQLite can bind as an INTEGER
NUMBER_CHARS = 40  # longer text is not read as a number
NUMBER_WORDS = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
)
MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_NUMBER = {
    **{m: i for i, m in enumerate(MONTHS, start=1)},
    **{m[:3]: i for i, m in enumerate(MONTHS, start=1)},
    "sept": 9,
}


# What each type reads, as the caller is told when a text does not read as one.
FORMS = {
    SlotType.INTEGER: "a whole number such as 12, -3 or 1,500",
    SlotType.NUMBER: "a number such as 12, 2.5 or 1,200.75",
    SlotType.YEAR: "a year of four digits such as 2024",
    SlotType.MONTH: "a month with its year such as March 2024 or 2024-03",
    SlotType.DATE: "a date such as 2024-03-05 or March 5, 2024",
    SlotType.TOP: "a count such as 5 or ten",
    SlotType.VALUE: "a value the column holds",
}
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True)
class Reading:
    """How one text reads as a slot: its values (one: read; several: ambiguous), or why none."""

    values: tuple[SlotValue, ...] = ()
    why_not: str | None = None  # when there is no value: why, e.g. "is not between 1 and 10"


_INTEGER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)", re.ASCII)
_DECIMAL = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)\.\d+", re.ASCII)
_YEAR = re.compile(r"\d{4}", re.ASCII)
_NAME = r"([a-z]+)\.?"  # a month's name, its abbreviation allowing a point
_ORDINAL = r"(\d{1,2})(?:st|nd|rd|th)?"
_MONTH_FORMS = (
    (re.compile(rf"{_NAME},? (\d{{4}})", re.ASCII), "name", 1, 2),
    (re.compile(r"(\d{4})[-/](\d{1,2})", re.ASCII), "number", 2, 1),
    (re.compile(r"(\d{1,2})/(\d{4})", re.ASCII), "number", 1, 2),
)
_DATE_FORMS = (  # (pattern, where the year, month and day are; a month given by name says so)
    (re.compile(r"(\d{4})[-/](\d{1,2})[-/](\d{1,2})", re.ASCII), (1, 2, 3), False),
    (re.compile(rf"{_NAME} {_ORDINAL},? (\d{{4}})", re.ASCII), (3, 1, 2), True),
    (re.compile(rf"{_ORDINAL} (?:of )?{_NAME},? (\d{{4}})", re.ASCII), (3, 2, 1), True),
    (re.compile(r"(\d{1,2})\.(\d{1,2})\.(\d{4})", re.ASCII), (3, 2, 1), False),
)
_SLASHED_DATE = re.compile(r"(\d{1,2})/(\d{1,2})/(\d{4})", re.ASCII)


def read_slot(
    kind: SlotType, text: str, *, minimum: float | None = None, maximum: float | None = None
) -> Reading:
    """Every value `text` reads as for a slot of `kind` within its bounds (see the module docs).

    A `value` slot is read against its column by the caller; here it has no reading.
    """
    if kind is SlotType.VALUE:
        return Reading(why_not="is looked up in its column")
    value: int | float | None
    if kind in (SlotType.INTEGER, SlotType.TOP, SlotType.NUMBER):
        value = _integer(text)
        if value is None and _INTEGER.fullmatch(text) and len(text) <= NUMBER_CHARS:
            return Reading(why_not=f"is not a whole number SQLite holds (from {INT64[0]:,} to {INT64[1]:,})")
        if value is None and kind is SlotType.NUMBER and len(text) <= NUMBER_CHARS and _DECIMAL.fullmatch(text):
            written = text.replace(",", "")
            value = float(written)
            if not _exact(written, value):
                return Reading(
                    why_not=f"is not a number SQLite holds exactly (it would be rounded to {value!r})"
                )
    elif kind is SlotType.YEAR:
        value = int(text) if _YEAR.fullmatch(text) else None
    elif kind is SlotType.MONTH:
        return _reading(_month(ascii_lower(text)), kind)
    else:
        return _reading(_dates(ascii_lower(text)), kind)
    if value is None:
        return Reading(why_not=f"is not {FORMS[kind]}")
    low = 1 if kind is SlotType.TOP and minimum is None else minimum
    if (low is not None and value < low) or (maximum is not None and value > maximum):
        return Reading(why_not=f"is {_bounds_text(low, maximum)}")
    return Reading((value,))


def sample_value(kind: SlotType, *, minimum: float | None = None, maximum: float | None = None) -> SlotValue:
    """A value of the type, within the bounds, to check a template's SQL with at load."""
    if kind is SlotType.MONTH:
        return "2000-01"
    if kind is SlotType.DATE:
        return "2000-01-01"
    usual = 2000 if kind is SlotType.YEAR else 1
    low = 1 if kind is SlotType.TOP and minimum is None else minimum
    value = max(usual, low) if low is not None else usual
    return min(value, maximum) if maximum is not None else value


def ascii_lower(text: str) -> str:
    """`text` with the letters A-Z in lower case and nothing else changed (SQLite's NOCASE)."""
    return text.translate(_ASCII_LOWER)


def _exact(written: str, value: float) -> bool:
    """True when the float `value` is the decimal `written`: its exact value, or the shortest decimal
    that reads back as it (`0.1`, as Python and SQLite print it); False when it is another number
    (`0.99999999999999999` is the float 1.0)."""
    return Decimal(written) in (Decimal(value), Decimal(repr(value)))


def _integer(text: str) -> int | None:
    word = ascii_lower(text)
    if word in NUMBER_WORDS:
        return NUMBER_WORDS.index(word)
    if len(text) > NUMBER_CHARS or not _INTEGER.fullmatch(text):
        return None
    value = int(text.replace(",", ""))
    return value if INT64[0] <= value <= INT64[1] else None


def _bounds_text(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"not between {_shown(low)} and {_shown(high)}"
    return f"less than {_shown(low)}" if low is not None else f"more than {_shown(high)}"


def _shown(bound: float | None) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _reading(values: list[str], kind: SlotType) -> Reading:
    distinct = tuple(dict.fromkeys(values))
    return Reading(distinct) if distinct else Reading(why_not=f"is not {FORMS[kind]}")


def _month(text: str) -> list[str]:
    for pattern, how, month_at, year_at in _MONTH_FORMS:
        found = pattern.fullmatch(text)
        if found is None:
            continue
        month = _MONTH_NUMBER.get(found[month_at]) if how == "name" else int(found[month_at])
        year = int(found[year_at])
        if (
            month is not None
            and 1 <= month <= 12
            and year >= 1
            and not (how == "name" and _bad_point(found[month_at], text))
        ):
            return [f"{year:04d}-{month:02d}"]
    return []


def _dates(text: str) -> list[str]:
    for pattern, (year_at, month_at, day_at), named in _DATE_FORMS:
        found = pattern.fullmatch(text)
        if found is None:
            continue
        month = _MONTH_NUMBER.get(found[month_at]) if named else int(found[month_at])
        if named and _bad_point(found[month_at], text):
            return []
        day = _date(int(found[year_at]), month, int(found[day_at]))
        return [day] if day else []
    found = _SLASHED_DATE.fullmatch(text)
    if found is None:
        return []
    first, second, year = int(found[1]), int(found[2]), int(found[3])
    readings = [_date(year, first, second), _date(year, second, first)]  # month first, day first
    return [d for d in readings if d]


def _bad_point(name: str, text: str) -> bool:
    """True for a point after a full month name (`March.`): only an abbreviation takes one."""
    return len(name) > 3 and name != "sept" and f"{name}." in text


def _date(year: int, month: int | None, day: int) -> str | None:
    if month is None:
        return None
    try:
        return datetime.date(year, month, day).isoformat()
    except ValueError:  # no such day (February 30, month 13, year 0)
        return None

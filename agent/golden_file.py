"""The golden-question file: JSON Lines of questions with known-good SQL on a user's databases.

One object per line: `question`, `sql` (the known-good SQL), `database` (an alias given with
`--db ALIAS=PATH`, or a path relative to the file), and optionally `evidence`, `tags` (a list
of labels; the summary groups by them as it groups the benchmarks by difficulty),
`row_count` (how many rows the SQL returned when the entry was added), `added_by` and
`added_at` (who added it and when, ISO 8601). `eval` measures the model on such a file; a
verified library (agent.verified) serves one as answers.

An entry may be a template: `params` names the slots its question writes as `{name}` and its
SQL binds as `:name`, each with a type (`{"month": {"type": "month"}}`; agent.verified.slot_types
says what each type reads), bounds (`min`, `max`) for the numeric types, and for a `value` the
column it must be a value of (`"column": "Genre.Name"`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .jsonl import append_lines, dumps_line, split_lines

GOLDEN_SUFFIXES = (".jsonl", ".ndjson")
FROM_LOG_TAG = "from-log"  # candidates taken from an episode log: the model's SQL, not yet reviewed
LINE_EXAMPLE = '{"question": "...", "sql": "SELECT ...", "database": "sales", "tags": ["revenue"]}'


class SlotType(StrEnum):
    """What a template's slot must be (`params.NAME.type`; agent.verified.slot_types reads each)."""

    INTEGER = "integer"
    NUMBER = "number"
    YEAR = "year"
    MONTH = "month"
    DATE = "date"
    VALUE = "value"
    TOP = "top"


BOUNDED_TYPES = (SlotType.INTEGER, SlotType.NUMBER, SlotType.YEAR, SlotType.TOP)  # take min and max
PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)


class ParamSpec(BaseModel):
    """One parameter of a template entry: its type, its bounds, the column of a `value`."""

    # defer_build: built at the first file read, not at every process's start-up
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    type: SlotType
    min: int | float | None = None  # integer, number, year, top: the smallest value read
    max: int | float | None = None  # and the largest
    column: str | None = None  # value only: TABLE.COLUMN whose values the slot must be one of

    @model_validator(mode="after")
    def _fits_its_type(self) -> ParamSpec:
        if self.type is SlotType.VALUE:
            table, dot, column = (self.column or "").partition(".")
            if not (dot and table.strip() and column.strip()):
                raise ValueError(
                    'a value parameter names its column as "TABLE.COLUMN", e.g. '
                    '{"type": "value", "column": "Genre.Name"}'
                )
        elif self.column is not None:
            raise ValueError(f"only a value parameter takes a column; a {self.type} takes none")
        if (self.min is not None or self.max is not None) and self.type not in BOUNDED_TYPES:
            raise ValueError(f"a {self.type} parameter takes no min or max; only {', '.join(BOUNDED_TYPES)} do")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is more than max {self.max}")
        return self


class GoldenEntry(BaseModel):
    """One line of a golden-question file."""

    # defer_build: built at the first file read, not at every process's start-up
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    question: str = Field(min_length=1)
    sql: str = Field(min_length=1)
    database: str = Field(min_length=1)
    evidence: str | None = None
    tags: tuple[str, ...] = ()
    row_count: int | None = None
    added_by: str | None = None  # who added it: a user name, or the token that saved it
    added_at: str | None = None  # when, ISO 8601 (UTC)
    params: dict[str, ParamSpec] | None = None  # a template's slots (see the module docs)

    @field_validator("params")
    @classmethod
    def _named_as_sql_names(cls, params: dict[str, ParamSpec] | None) -> dict[str, ParamSpec] | None:
        for name in params or {}:
            if not PARAM_NAME.fullmatch(name):
                raise ValueError(
                    f"parameter {name!r}: a name is letters, digits and _ (not first a "
                    "digit), as the question writes {name} and the SQL :name"
                )
        return params or None


def is_golden_file(path: Path) -> bool:
    """True for a file named *.jsonl or *.ndjson (the golden-question format)."""
    return path.is_file() and path.suffix.lower() in GOLDEN_SUFFIXES


def read_text(path: Path) -> str:
    """The file's text; ConfigError when it cannot be read or is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}); check the path") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text; save it as UTF-8 JSON Lines") from exc


def parse_lines(text: str) -> Iterator[tuple[int, GoldenEntry | str]]:
    """(line number, entry) for each non-blank line, or (line number, what is wrong with it)."""
    for number, line in split_lines(text):
        if not line.strip():
            continue
        try:
            yield number, GoldenEntry.model_validate_json(line)
        except ValidationError as exc:
            yield number, validation_text(exc)


def read_golden(path: Path) -> list[GoldenEntry]:
    """Every entry of a golden file, in order; ConfigError names the first bad line."""
    entries = []
    for number, parsed in parse_lines(read_text(path)):
        if isinstance(parsed, str):
            raise ConfigError(
                f"{path}: line {number} is not a golden question ({parsed}); each line is a JSON "
                f"object like {LINE_EXAMPLE}"
            )
        entries.append(parsed)
    return entries


def validation_text(exc: ValidationError) -> str:
    """What is wrong with an entry (or one of its params), as one line."""
    return "; ".join(_problem(e) for e in exc.errors())


def _problem(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "line"
    if error["type"] == "missing":
        return f"no {where}"
    if error["type"] == "extra_forbidden":
        return f"unknown field {where}"
    if error["type"] == "json_invalid":
        return "not a JSON object"
    said = error["ctx"]["error"] if error["type"] == "value_error" else error["msg"]
    return f"{where}: {said}" if error["loc"] else str(said)


def entry_line(entry: GoldenEntry) -> str:
    """One JSON line for the file, newline included; empty optional fields left out."""
    data = entry.model_dump(exclude_none=True)
    if not data.get("tags"):
        data.pop("tags", None)
    return dumps_line(data)


def append_entries(path: Path, entries: Iterable[GoldenEntry]) -> int:
    """Append entries not already in the file (same question and database); how many were added.

    The new lines go out in one write to a file opened for appending, so a reader (a server
    reloading its verified library) sees each line whole or not at all.
    """
    existing = {(e.question, e.database) for e in read_golden(path)} if path.exists() else set()
    lines = []
    for entry in entries:
        if (entry.question, entry.database) not in existing:
            existing.add((entry.question, entry.database))
            lines.append(entry_line(entry))
    append_lines(path, lines)
    return len(lines)


def database_reference(db_path: Path, golden_file: Path) -> str:
    """How a golden file names a database file: relative to the golden file's folder."""
    return os.path.relpath(db_path.resolve(), golden_file.resolve().parent)


def now_iso() -> str:
    """The time now as `added_at` records it: ISO 8601, UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")

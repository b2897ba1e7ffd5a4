"""A user's own question set: JSON Lines of questions with known-good SQL on their databases.

One object per line: `question`, `sql` (the known-good SQL), `database` (an alias given with
`--db ALIAS=PATH`, or a path relative to the file), and optionally `evidence`, `tags` (a list
of labels; the summary groups by them as it groups the benchmarks by difficulty) and
`row_count` (how many rows the SQL returned when the entry was added).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError
from .datasets import Benchmark, Dataset, Example

GOLDEN_SUFFIXES = (".jsonl", ".ndjson")


class GoldenEntry(BaseModel):
    """One line of a golden-question file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    question: str = Field(min_length=1)
    sql: str = Field(min_length=1)
    database: str = Field(min_length=1)
    evidence: str | None = None
    tags: tuple[str, ...] = ()
    row_count: int | None = None


def is_golden_file(path: Path) -> bool:
    """True for a file named *.jsonl or *.ndjson (the golden-question format)."""
    return path.is_file() and path.suffix.lower() in GOLDEN_SUFFIXES


def read_golden(path: Path) -> list[GoldenEntry]:
    """Every entry of a golden file, in order; ConfigError names the first bad line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}); check the path") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text; save it as UTF-8 JSON Lines") from exc
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(GoldenEntry.model_validate_json(line))
        except ValidationError as exc:
            problems = "; ".join(_problem(e) for e in exc.errors())
            raise ConfigError(
                f"{path}: line {number} is not a golden question ({problems}); each line is a JSON "
                'object like {"question": "...", "sql": "SELECT ...", "database": "sales", '
                '"tags": ["revenue"]}') from exc
    return entries


def _problem(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "line"
    if error["type"] == "missing":
        return f"no {where}"
    if error["type"] == "extra_forbidden":
        return f"unknown field {where}"
    return f"{where}: {error['msg']}"


def load_golden(path: Path, databases: Mapping[str, Path]) -> Dataset:
    """The golden file as a dataset; `databases` maps the aliases given with --db to files."""
    entries = read_golden(path)
    if not entries:
        raise ConfigError(f"{path}: no questions in it; add some with `sqale-agent golden add`")
    paths: dict[str, Path] = {}
    for number, entry in enumerate(entries, start=1):
        if entry.database in paths:
            continue
        if entry.database in databases:
            paths[entry.database] = databases[entry.database]
            continue
        candidate = (path.parent / Path(entry.database).expanduser())
        if not candidate.is_file():
            raise ConfigError(
                f"{path}: question {number} names database {entry.database!r}, which is neither "
                f"a --db alias ({', '.join(databases) or 'none given'}) nor a file next to the "
                f"question file; pass --db {entry.database}=PATH")
        paths[entry.database] = candidate
    examples = tuple(
        Example(key=str(i), index=i, db_id=e.database, question=e.question, gold_sql=e.sql,
                evidence=e.evidence or None, tags=e.tags)
        for i, e in enumerate(entries))
    return Dataset(Benchmark.GOLDEN, path, path.parent, examples, db_paths=paths)


def entry_line(entry: GoldenEntry) -> str:
    """One JSON line for the file, newline included; empty optional fields left out."""
    data = entry.model_dump(exclude_none=True)
    if not data.get("tags"):
        data.pop("tags", None)
    return json.dumps(data, ensure_ascii=False) + "\n"


def append_entries(path: Path, entries: Iterable[GoldenEntry]) -> int:
    """Append entries not already in the file (same question and database); how many were added."""
    existing = {(e.question, e.database) for e in read_golden(path)} if path.exists() else set()
    lines = []
    for entry in entries:
        if (entry.question, entry.database) not in existing:
            existing.add((entry.question, entry.database))
            lines.append(entry_line(entry))
    if lines:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.writelines(lines)
    return len(lines)


def database_reference(db_path: Path, golden_file: Path) -> str:
    """How a golden file names a database file: relative to the golden file's folder."""
    return os.path.relpath(db_path.resolve(), golden_file.resolve().parent)

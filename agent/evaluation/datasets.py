"""Question sets in the standard Spider, BIRD and KaggleDBQA layouts, loaded and selected."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..errors import ConfigError


class Benchmark(StrEnum):
    """A question-set format; it also fixes how results are compared."""

    SPIDER = "spider"
    BIRD = "bird"
    KAGGLEDBQA = "kaggledbqa"
    GOLDEN = "golden"  # a user's own questions in JSON Lines (see golden_dataset.py)


# File names looked for when a directory is given (in this order).
QUESTION_FILES = ("dev.json", "mini_dev_sqlite.json", "mini_dev.json")
# BIRD releases put databases in one of these folders next to the questions.
BIRD_DB_FOLDERS = ("dev_databases", "databases", "database")
KAGGLE_SPLITS = ("all", "test", "fewshot")
_REQUIRED_FIELDS = {
    Benchmark.SPIDER: ("db_id", "question", "query"),
    Benchmark.KAGGLEDBQA: ("db_id", "question", "query"),
    Benchmark.BIRD: ("question_id", "db_id", "question", "SQL"),
}


@dataclass(frozen=True)
class Example:
    """One question with its gold SQL."""

    key: str  # stable id within the dataset; results files are keyed on it
    index: int  # position in the loaded dataset (file order)
    db_id: str
    question: str
    gold_sql: str
    evidence: str | None = None
    difficulty: str | None = None
    tags: tuple[str, ...] = ()  # a golden question's labels; summaries group by them


@dataclass(frozen=True)
class Dataset:
    """A loaded question set and where its databases are."""

    benchmark: Benchmark
    source: Path  # the question file, or the KaggleDBQA folder
    db_root: Path
    examples: tuple[Example, ...]
    db_paths: Mapping[str, Path] | None = None  # explicit files by db_id (golden questions)

    def database_path(self, db_id: str) -> Path:
        """`<root>/<db_id>/<db_id>.sqlite`, or the flat `<root>/<db_id>.sqlite` when only that exists."""
        if self.db_paths is not None and db_id in self.db_paths:
            return self.db_paths[db_id]
        nested = self.db_root / db_id / f"{db_id}.sqlite"
        flat = self.db_root / f"{db_id}.sqlite"
        return flat if not nested.is_file() and flat.is_file() else nested

    def has_database(self, db_id: str) -> bool:
        """True when the database file for `db_id` exists."""
        return self.database_path(db_id).is_file()

    @property
    def difficulties(self) -> tuple[str, ...]:
        """Difficulty labels (or golden tags) present, in first-seen order."""
        return tuple(dict.fromkeys(level for e in self.examples for level in _levels(e)))


@dataclass(frozen=True)
class Selection:
    """The examples to run, and those left out because their database file is missing."""

    examples: tuple[Example, ...]
    missing_db: tuple[Example, ...]

    @property
    def missing_db_ids(self) -> tuple[str, ...]:
        """Distinct db_ids whose database file is missing."""
        return tuple(dict.fromkeys(e.db_id for e in self.missing_db))


def detect_format(path: Path) -> Benchmark:
    """Which benchmark layout `path` (a folder or a question file) follows."""
    if path.is_dir():
        if (path / "examples").is_dir() and (path / "databases").is_dir():
            return Benchmark.KAGGLEDBQA
        question_file = _question_file(path)
        return _format_of_records(_read_records(question_file), question_file)
    if path.parent.name == "examples" and (path.parent.parent / "databases").is_dir():
        return Benchmark.KAGGLEDBQA
    return _format_of_records(_read_records(path), path)


def load_dataset(
    path: str | Path,
    *,
    benchmark: Benchmark | None = None,
    db_root: str | Path | None = None,
    split: str = "all",
) -> Dataset:
    """Load a question set; `benchmark` None means auto-detect; `split` applies to KaggleDBQA."""
    source = Path(path).expanduser()
    if not source.exists():
        raise ConfigError(
            f"{source}: no such file or folder; give a Spider/BIRD/KaggleDBQA folder or question file"
        )
    kind = benchmark or detect_format(source)
    root = Path(db_root).expanduser() if db_root is not None else None
    if kind is Benchmark.KAGGLEDBQA:
        return _load_kaggledbqa(source, root, split)
    question_file = _question_file(source) if source.is_dir() else source
    records = _read_records(question_file)
    if kind is Benchmark.SPIDER:
        return _load_spider(question_file, records, root)
    return _load_bird(question_file, records, root)


def select_examples(
    dataset: Dataset,
    *,
    db_ids: Sequence[str] = (),
    difficulties: Sequence[str] = (),
    offset: int = 0,
    limit: int | None = None,
) -> Selection:
    """Filter by database and difficulty, drop questions whose database is missing, then slice."""
    known_dbs = {e.db_id for e in dataset.examples}
    unknown = [d for d in db_ids if d not in known_dbs]
    if unknown:
        raise ConfigError(
            f"--db-id {', '.join(unknown)}: not in {dataset.source.name}; known: {', '.join(sorted(known_dbs))}"
        )
    known_levels = dataset.difficulties
    bad_levels = [d for d in difficulties if d not in known_levels]
    if bad_levels:
        hint = f"known: {', '.join(known_levels)}" if known_levels else "this dataset has no difficulty labels"
        raise ConfigError(f"--difficulty {', '.join(bad_levels)}: unknown; {hint}")
    if offset < 0 or (limit is not None and limit < 0):
        raise ConfigError("--offset and --limit must be 0 or more")
    chosen = [
        e
        for e in dataset.examples
        if (not db_ids or e.db_id in db_ids)
        and (not difficulties or any(level in difficulties for level in _levels(e)))
    ]
    present = {db: dataset.has_database(db) for db in {e.db_id for e in chosen}}
    runnable = [e for e in chosen if present[e.db_id]]
    missing = tuple(e for e in chosen if not present[e.db_id])
    end = None if limit is None else offset + limit
    return Selection(tuple(runnable[offset:end]), missing)


def _levels(example: Example) -> tuple[str, ...]:
    """What --difficulty selects on: the tags of a golden question, else its difficulty."""
    return example.tags or ((example.difficulty,) if example.difficulty else ())


def _question_file(folder: Path) -> Path:
    for name in QUESTION_FILES:
        if (folder / name).is_file():
            return folder / name
    raise ConfigError(
        f"{folder}: no question file found (looked for {', '.join(QUESTION_FILES)}); "
        "give the question file itself"
    )


def _read_records(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}); check the path") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: not valid JSON ({exc}); give a Spider/BIRD/KaggleDBQA question file"
        ) from exc
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ConfigError(f"{path}: expected a JSON list of question objects")
    return data


def _format_of_records(records: list[dict[str, Any]], path: Path) -> Benchmark:
    first = records[0] if records else {}
    if "SQL" in first and "question_id" in first:
        return Benchmark.BIRD
    if "query" in first and "db_id" in first:
        return Benchmark.SPIDER
    raise ConfigError(
        f"{path}: cannot tell the format (no 'query' or 'SQL' field in the first "
        "record); pass --format spider|bird|kaggledbqa"
    )


def _check_fields(records: list[dict[str, Any]], path: Path, kind: Benchmark) -> None:
    for number, record in enumerate(records, start=1):
        absent = [f for f in _REQUIRED_FIELDS[kind] if not isinstance(record.get(f), str | int)]
        if absent:
            raise ConfigError(
                f"{path}: record {number} has no {', '.join(absent)}; is this a "
                f"{kind.value} file? pass the right --format"
            )


def _load_spider(path: Path, records: list[dict[str, Any]], db_root: Path | None) -> Dataset:
    _check_fields(records, path, Benchmark.SPIDER)
    hardness = _spider_hardness(path, records)
    examples = tuple(
        Example(
            key=str(i),
            index=i,
            db_id=r["db_id"],
            question=r["question"],
            gold_sql=r["query"],
            difficulty=hardness[i] if hardness else None,
        )
        for i, r in enumerate(records)
    )
    return Dataset(Benchmark.SPIDER, path, db_root or path.parent / "database", examples)


def _spider_hardness(path: Path, records: list[dict[str, Any]]) -> list[str] | None:
    """Levels from `<stem>_hardness.tsv` (index, db_id, hardness) next to the question file."""
    tsv = path.with_name(f"{path.stem}_hardness.tsv")
    if not tsv.is_file():
        return None
    with tsv.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    levels: list[str] = []
    for i, (row, record) in enumerate(zip(rows, records, strict=False)):
        if row.get("index") != str(i) or row.get("db_id") != record["db_id"]:
            raise ConfigError(
                f"{tsv}: row {i + 1} does not match {path.name} (index/db_id differ); "
                "regenerate it or remove it"
            )
        levels.append(row["hardness"])
    if len(levels) != len(records):
        raise ConfigError(f"{tsv}: {len(levels)} rows for {len(records)} questions; regenerate it or remove it")
    return levels


def _load_bird(path: Path, records: list[dict[str, Any]], db_root: Path | None) -> Dataset:
    _check_fields(records, path, Benchmark.BIRD)
    examples = tuple(
        Example(
            key=str(r["question_id"]),
            index=i,
            db_id=r["db_id"],
            question=r["question"],
            gold_sql=r["SQL"],
            evidence=(r.get("evidence") or None),
            difficulty=r.get("difficulty") or None,
        )
        for i, r in enumerate(records)
    )
    if db_root is None:
        found = [path.parent / name for name in BIRD_DB_FOLDERS if (path.parent / name).is_dir()]
        if not found:
            raise ConfigError(
                f"{path.parent}: no database folder ({', '.join(BIRD_DB_FOLDERS)}) next "
                "to the questions; pass --db-root with the folder holding <db_id>/<db_id>.sqlite"
            )
        db_root = found[0]
    return Dataset(Benchmark.BIRD, path, db_root, examples)


def _load_kaggledbqa(source: Path, db_root: Path | None, split: str) -> Dataset:
    if split not in KAGGLE_SPLITS:
        raise ConfigError(f"--split {split}: unknown; use one of {', '.join(KAGGLE_SPLITS)}")
    if source.is_dir():
        folder, files = source, _kaggle_files(source / "examples", split)
    else:
        folder, files = source.parent.parent, [source]
    examples: list[Example] = []
    for file in files:
        records = _read_records(file)
        _check_fields(records, file, Benchmark.KAGGLEDBQA)
        examples += [
            Example(
                key=f"{file.stem}/{i}",
                index=len(examples) + i,
                db_id=r["db_id"],
                question=r["question"],
                gold_sql=r["query"],
            )
            for i, r in enumerate(records)
        ]
    return Dataset(Benchmark.KAGGLEDBQA, source, db_root or folder / "databases", tuple(examples))


def _kaggle_files(examples_dir: Path, split: str) -> list[Path]:
    every = sorted(examples_dir.glob("*.json"))
    if split == "all":
        files = [f for f in every if not f.stem.endswith(("_test", "_fewshot"))]
    else:
        files = [f for f in every if f.stem.endswith(f"_{split}")]
    if not files:
        raise ConfigError(f"{examples_dir}: no {split} question files (*.json) found")
    return files

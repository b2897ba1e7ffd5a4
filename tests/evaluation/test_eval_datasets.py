"""Loading Spider, BIRD and KaggleDBQA question sets, auto-detection, and question selection."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.evaluation.datasets import Benchmark, Example, detect_format, load_dataset, select_examples
from tests.conftest import SHARED_DATA

SPIDER, BIRD, KAGGLE = SHARED_DATA / "spider_dev", SHARED_DATA / "bird_minidev", SHARED_DATA / "kaggledbqa"
needs_data = pytest.mark.needs_shared()


def write_json(path: Path, records: list[dict]) -> Path:
    """Write a question file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def make_db(path: Path) -> Path:
    """An empty one-table database."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a INTEGER)")
    conn.commit()
    conn.close()
    return path


@needs_data
def test_spider_dev_loads_with_hardness_and_skips_the_missing_database():
    """Spider dev: 1,034 questions, 972 runnable (wta_1 missing), levels from dev_hardness.tsv."""
    dataset = load_dataset(SPIDER)
    selection = select_examples(dataset)
    assert (dataset.benchmark, len(dataset.examples)) == (Benchmark.SPIDER, 1034)
    assert dataset.examples[0] == Example(
        key="0",
        index=0,
        db_id="concert_singer",
        question="How many singers do we have?",
        gold_sql="SELECT count(*) FROM singer",
        difficulty="easy",
    )
    assert (len(selection.examples), len(selection.missing_db)) == (972, 62)
    assert selection.missing_db_ids == ("wta_1",)
    assert Counter(e.difficulty for e in selection.examples) == {
        "easy": 232,
        "medium": 416,
        "hard": 160,
        "extra": 164,
    }
    assert dataset.database_path("singer") == SPIDER / "database" / "singer" / "singer.sqlite"


@needs_data
def test_bird_minidev_loads_evidence_and_difficulty():
    """BIRD mini-dev: question_id keys, evidence, difficulty; flat stub layout via --db-root."""
    dataset = load_dataset(BIRD / "mini_dev_sqlite.json", db_root=BIRD / "schema_only_stubs")
    first = dataset.examples[0]
    assert (dataset.benchmark, len(dataset.examples), dataset.difficulties) == (
        Benchmark.BIRD,
        500,
        ("simple", "moderate", "challenging"),
    )
    assert (first.key, first.db_id, first.difficulty) == ("1471", "debit_card_specializing", "simple")
    assert first.evidence == (
        "ratio of customers who pay in EUR against customers who pay in CZK = "
        "count(Currency = 'EUR') / count(Currency = 'CZK')."
    )
    assert dataset.database_path("financial") == BIRD / "schema_only_stubs" / "financial.sqlite"
    assert len(select_examples(dataset).examples) == 500


@needs_data
def test_bird_without_database_folder_asks_for_db_root():
    """The mini-dev folder has no dev_databases: the error says to pass --db-root."""
    with pytest.raises(ConfigError) as info:
        load_dataset(BIRD)
    assert str(info.value) == (
        f"{BIRD}: no database folder (dev_databases, databases, database) next to the "
        "questions; pass --db-root with the folder holding <db_id>/<db_id>.sqlite"
    )


@needs_data
def test_kaggledbqa_splits():
    """KaggleDBQA: all 87 questions by default, the 59-question test split on request."""
    everything = load_dataset(KAGGLE)
    test = load_dataset(KAGGLE, split="test")
    assert everything.benchmark is Benchmark.KAGGLEDBQA
    assert (len(everything.examples), len(test.examples)) == (87, 59)
    assert everything.examples[0].key == "GeoNuclearData/0"
    assert [e.index for e in everything.examples] == list(range(87))
    assert len(select_examples(everything).examples) == 87
    assert {e.db_id for e in test.examples} == {"GeoNuclearData", "GreaterManchesterCrime", "StudentMathScore"}


@needs_data
def test_auto_detection_on_the_real_layouts():
    """Folders and question files of each benchmark are recognised."""
    assert detect_format(SPIDER) is Benchmark.SPIDER
    assert detect_format(SPIDER / "dev.json") is Benchmark.SPIDER
    assert detect_format(BIRD) is Benchmark.BIRD
    assert detect_format(BIRD / "mini_dev_sqlite.json") is Benchmark.BIRD
    assert detect_format(KAGGLE) is Benchmark.KAGGLEDBQA
    assert detect_format(KAGGLE / "examples" / "StudentMathScore_test.json") is Benchmark.KAGGLEDBQA


def test_unknown_format_names_the_option(tmp_path):
    """A JSON list without query/SQL fields cannot be detected: say to pass --format."""
    path = write_json(tmp_path / "q.json", [{"text": "hello"}])
    with pytest.raises(ConfigError) as info:
        load_dataset(path)
    assert str(info.value) == (
        f"{path}: cannot tell the format (no 'query' or 'SQL' field in the first "
        "record); pass --format spider|bird|kaggledbqa"
    )


def test_forced_format_checks_fields(tmp_path):
    """--format bird on a Spider file names the missing fields."""
    path = write_json(tmp_path / "dev.json", [{"db_id": "d", "question": "q?", "query": "SELECT 1"}])
    with pytest.raises(ConfigError) as info:
        load_dataset(path, benchmark=Benchmark.BIRD, db_root=tmp_path)
    assert str(info.value) == (
        f"{path}: record 1 has no question_id, SQL; is this a bird file? pass the right --format"
    )


def test_hardness_file_must_match(tmp_path):
    """A dev_hardness.tsv that disagrees with dev.json is refused, not silently misapplied."""
    write_json(tmp_path / "dev.json", [{"db_id": "a", "question": "q?", "query": "SELECT 1"}])
    (tmp_path / "dev_hardness.tsv").write_text("index\tdb_id\thardness\n0\tb\teasy\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_dataset(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'dev_hardness.tsv'}: row 1 does not match dev.json "
        "(index/db_id differ); regenerate it or remove it"
    )


def test_selection_filters_then_slices(tmp_path):
    """--db-id/--difficulty filter first, missing databases drop out, then --offset/--limit slice."""
    records = [
        {"db_id": db, "question": f"q{i}?", "query": "SELECT 1"}
        for i, db in enumerate(["a", "b", "a", "gone", "a", "a"])
    ]
    write_json(tmp_path / "dev.json", records)
    rows = "".join(f"{i}\t{r['db_id']}\t{'easy' if i % 2 else 'hard'}\n" for i, r in enumerate(records))
    (tmp_path / "dev_hardness.tsv").write_text("index\tdb_id\thardness\n" + rows, encoding="utf-8")
    for db in ("a", "b"):
        make_db(tmp_path / "database" / db / f"{db}.sqlite")
    dataset = load_dataset(tmp_path)
    picked = select_examples(dataset, db_ids=["a", "gone"], offset=1, limit=2)
    assert [e.key for e in picked.examples] == ["2", "4"]
    assert [e.key for e in picked.missing_db] == ["3"]
    assert [e.key for e in select_examples(dataset, difficulties=["easy"]).examples] == ["1", "5"]


def test_selection_rejects_unknown_names(tmp_path):
    """Unknown --db-id or --difficulty values are errors that list the known ones."""
    write_json(tmp_path / "dev.json", [{"db_id": "a", "question": "q?", "query": "SELECT 1"}])
    dataset = load_dataset(tmp_path)
    with pytest.raises(ConfigError) as info:
        select_examples(dataset, db_ids=["zzz"])
    assert str(info.value) == "--db-id zzz: not in dev.json; known: a"
    with pytest.raises(ConfigError) as info:
        select_examples(dataset, difficulties=["easy"])
    assert str(info.value) == "--difficulty easy: unknown; this dataset has no difficulty labels"


def test_missing_path_is_a_clear_error(tmp_path):
    """A path that does not exist says what to give instead."""
    with pytest.raises(ConfigError) as info:
        load_dataset(tmp_path / "nope")
    assert str(info.value) == (
        f"{tmp_path / 'nope'}: no such file or folder; give a Spider/BIRD/KaggleDBQA folder or question file"
    )

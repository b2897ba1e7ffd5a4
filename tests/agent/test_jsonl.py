"""One JSON Lines codec for every file the project writes and reads: no character breaks a line."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from agent.commands.cli import main
from agent.engine_cache import CacheVerdict
from agent.evaluation.datasets import load_dataset, select_examples
from agent.evaluation.html_report.cache_reuse import results_verdicts
from agent.evaluation.records import read_records
from agent.golden_file import GoldenEntry, append_entries, read_golden
from agent.jsonl import append_lines, complete_lines, dumps_line, file_lines, split_lines
from agent.sqlite import Database, create_database
from agent.verified import VerifiedLibrary
from mcp_server.state import EpisodeLog
from tests.support.databases import CUSTOMER_ORDERS_SQL
from tests.support.eval_runs import backends_of, oracle_for, run_eval

# Every character str.splitlines() breaks at (besides "\n"), and the CR LF pair.
SEPARATORS = {
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "NEL": "\x85",
    "form feed": "\x0c",
    "vertical tab": "\x0b",
    "file separator": "\x1c",
    "group separator": "\x1d",
    "record separator": "\x1e",
    "carriage return": "\r",
    "CR LF": "\r\n",
}


def hostile(text: str) -> str:
    """`text` with every separator inside it."""
    return text + "".join(f" {name}:{char}" for name, char in SEPARATORS.items()) + " end"


@pytest.mark.parametrize("char", list(SEPARATORS.values()), ids=list(SEPARATORS))
def test_a_written_line_holds_no_line_break_of_any_kind(char: str) -> None:
    """dumps_line escapes every character any reader takes for a line break, and reads back whole."""
    value = {"question": f"a{char}b", "n": 1}
    line = dumps_line(value)
    assert line.endswith("\n") and len(line[:-1].splitlines()) == 1
    assert json.loads(line) == value


def test_lone_surrogates_are_written_as_escapes() -> None:
    """A lone surrogate (valid in JSON, not in UTF-8) is escaped, so the line can be written as UTF-8."""
    line = dumps_line({"q": "a\ud800b"})
    assert line == '{"q": "a\\ud800b"}\n'
    assert json.loads(line.encode("utf-8")) == {"q": "a\ud800b"}


def test_other_characters_stay_readable() -> None:
    """Non-ASCII text is written as itself, not as escapes: the files stay readable."""
    assert dumps_line({"q": "Grüße, 東京 ✓"}) == '{"q": "Grüße, 東京 ✓"}\n'


def test_lines_split_at_newline_only() -> None:
    """split_lines breaks at "\\n" only and drops an editor's "\\r" before it; a torn tail is kept
    by split_lines and left out by complete_lines."""
    text = "a\u2028b\r\nc\x0cd\n\ne\nf"
    assert list(split_lines(text)) == [(1, "a\u2028b"), (2, "c\x0cd"), (3, ""), (4, "e"), (5, "f")]
    assert list(complete_lines(text)) == [(1, "a\u2028b"), (2, "c\x0cd"), (3, ""), (4, "e")]
    assert list(complete_lines("torn")) == []


def test_file_lines_reads_a_file_as_split_lines_does(tmp_path: Path) -> None:
    """Reading a file a line at a time splits where split_lines splits."""
    path = tmp_path / "f.jsonl"
    text = "x\u2028y\r\nz\x85w\n"
    path.write_bytes(text.encode("utf-8"))
    assert list(file_lines(path)) == list(split_lines(text))


def test_append_lines_adds_the_newline_a_hand_edited_file_lacks(tmp_path: Path) -> None:
    """Appending to a file whose last line has no newline starts a new line first."""
    path = tmp_path / "f.jsonl"
    path.write_text('{"a": 1}', encoding="utf-8")
    append_lines(path, [dumps_line({"b": 2})])
    assert path.read_text(encoding="utf-8") == '{"a": 1}\n{"b": 2}\n'


def test_golden_entries_round_trip_every_separator(tmp_path: Path) -> None:
    """A golden file (and so a verified library) keeps one entry per line whatever its text holds."""
    path = tmp_path / "golden.jsonl"
    entries = [
        GoldenEntry(
            question=hostile(f"Question {i}?"),
            sql=f"SELECT {i} -- {hostile('c')}",
            database="shop",
            evidence=hostile("note"),
        )
        for i in range(3)
    ]
    assert append_entries(path, entries[:2]) == 2
    assert append_entries(path, entries[2:]) == 1  # a later append still reads the file
    assert read_golden(path) == entries
    assert len(path.read_bytes().split(b"\n")) == 4


def test_a_verified_library_serves_entries_holding_separators(tmp_path: Path) -> None:
    """A library whose questions hold every separator serves each of them, and the next entry too."""
    db_path = create_database(tmp_path / "shop.db", CUSTOMER_ORDERS_SQL)
    path = tmp_path / "shop.jsonl"
    asked = hostile("How many customers")
    append_entries(
        path,
        [
            GoldenEntry(question=asked, sql="SELECT count(*) FROM customer", database="shop"),
            GoldenEntry(question="Next?", sql="SELECT 1", database="shop"),
        ],
    )
    with Database.unruled(db_path) as db:
        snapshot = VerifiedLibrary(path, "shop").current(db)
    assert snapshot.refusals == ()
    assert [e.question for e in snapshot.entries] == [asked, "Next?"]
    assert snapshot.exact(asked) is not None


def test_the_episode_log_round_trips_through_golden_add_from_log(tmp_path: Path, capsys) -> None:
    """Questions holding separators (and a lone surrogate) are logged one per line and come back
    from `golden add --from-log`; the surrogate's is left out with its reason."""
    db_path = create_database(tmp_path / "shop.db", CUSTOMER_ORDERS_SQL)
    log_path = tmp_path / "episodes.jsonl"
    log = EpisodeLog(log_path)
    questions = [hostile(f"Question {i}") for i in range(2)]

    async def write() -> None:
        for q in [*questions, "broken \ud800 text"]:
            await log.append(
                {
                    "question": q,
                    "database": "shop",
                    "status": "submitted",
                    "sql": "SELECT count(*) FROM customer",
                    "evidence": None,
                }
            )

    anyio.run(write)
    assert len(log_path.read_bytes().split(b"\n")) == 4
    golden = tmp_path / "candidates.jsonl"
    assert (
        main(
            [
                "golden",
                "add",
                "--from-log",
                str(log_path),
                "--db",
                f"shop={db_path}",
                "--file",
                str(golden),
                "--by",
                "ann",
            ]
        )
        == 0
    )
    assert [e.question for e in read_golden(golden)] == questions
    assert "1 left out: their question, SQL or evidence is not valid Unicode text" in capsys.readouterr().out


def test_eval_results_round_trip_every_separator(tmp_path: Path) -> None:
    """eval writes a question holding every separator on one line and reads it back (resume, report)."""
    root = tmp_path / "bench"
    create_database(root / "database" / "shop" / "shop.sqlite", CUSTOMER_ORDERS_SQL)
    questions = [hostile("How many customers are there?"), "Which customers live in Oslo?"]
    sqls = ["SELECT count(*) FROM customer", "SELECT name FROM customer WHERE city = 'Oslo'"]
    records = [{"db_id": "shop", "question": q, "query": sql} for q, sql in zip(questions, sqls, strict=True)]
    (root / "dev.json").write_text(json.dumps(records), encoding="utf-8")
    dataset = load_dataset(root)
    out = tmp_path / "results.jsonl"
    run_eval(dataset, select_examples(dataset), backends_of(oracle_for(dataset)), out)
    assert len(out.read_bytes().split(b"\n")) == 3
    assert sorted(r.question for r in read_records(out).values()) == sorted(questions)
    # Both questions' rounds are read back (the fake engine says nothing of its cache: unknown).
    assert results_verdicts(out, "engine") == [
        CacheVerdict(
            engine="engine",
            later_rounds=0,
            re_evaluated=0,
            unknown=4,
            prompt_tokens=0,
            cached_tokens=0,
            min_rounds=2,
        )
    ]

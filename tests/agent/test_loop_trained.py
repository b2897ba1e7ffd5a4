"""The episode loop in the trained environment (the default): its turn texts, byte for byte."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from agent.episode import EpisodeResult, EpisodeSettings, EpisodeStatus, StopReason
from agent.loop import run_episode
from agent.prompt import SYSTEM_PROMPT, PromptSet
from agent.sqlite import Database, WorkerLimits, WorkerPool, create_database
from agent.tools import Environment, run_tool
from agent.tools.environment import TrainedTexts
from tests.support.policies import PolicyBackend, ScriptPolicy, assistant_reply, tool_call

QUESTION = "How many albums does each artist have?"
SCHEMA_SQL = """
CREATE TABLE artist (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE album (id INTEGER PRIMARY KEY, title TEXT, artist_id INTEGER REFERENCES artist(id));
INSERT INTO artist VALUES (1, 'AC/DC'), (2, 'Accept');
INSERT INTO album VALUES (1, 'For Those About To Rock', 1), (2, 'Let There Be Rock', 1),
                         (3, 'Balls to the Wall', 2);
"""
OPENING = (
    "You have reached the exploration limit. Now generate the final SQL query to answer the "
    "question. Return only the SQL query."
)
NONE_RAN = (
    " None of your queries has executed without error yet, so write your best query from what you have seen."
)
BAD_SQL = "SELECT nope FROM artist"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """A tiny music database built from SQL."""
    engine = WorkerPool(WorkerLimits(workers=1))
    path = create_database(tmp_path_factory.mktemp("loop") / "music.sqlite", SCHEMA_SQL)
    with Database.unruled(path, engine) as database:
        yield database
    engine.close()


def run(db: Database, *turns: str, final: str | None = None, **kwargs: Any) -> tuple[EpisodeResult, list[str]]:
    """An episode with default (trained) settings; its result and every prompt sent."""
    backend = PolicyBackend(ScriptPolicy(list(turns), final=final))
    result = anyio.run(lambda: run_episode(QUESTION, db, backend, **kwargs))
    return result, [r.prompt for r in backend.requests]


def user_turn(message: str) -> str:
    """The ChatML user turn plus the next assistant opening, as the loop appends them."""
    return f"<|im_end|>\n<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n"


def test_golden_prompts_across_rounds(db: Database) -> None:
    """Each prompt is the previous one + completion + one user turn of labelled results."""
    turn1 = assistant_reply("See the tables.", tool_call("list_tables"))
    turn2 = assistant_reply(
        "Look at album; count.",
        tool_call("describe_table", table_name="album"),
        tool_call("run_query", sql="SELECT count(*) FROM album"),
    )
    final_sql = "SELECT artist_id, count(*) FROM album GROUP BY artist_id"
    turn3 = assistant_reply("Done.", tool_call("submit_sql", sql=final_sql))
    result, prompts = run(db, turn1, turn2, turn3)
    first = (
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
        f"<|im_start|>user\nQuestion: {QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    )
    second = (
        first
        + turn1
        + user_turn("result (1/1):\nalbum, artist (2 tables)\n\n5 tool turns left before you must answer")
    )
    third = (
        second
        + turn2
        + user_turn(
            "result (1/2):\nCREATE TABLE album (id INTEGER PRIMARY KEY, title TEXT, artist_id INTEGER "
            "REFERENCES artist(id))\n\nresult (2/2):\ncount(*)\n3\n\n4 tool turns left before you must answer"
        )
    )
    assert prompts == [first, second, third]
    assert (result.prompt, result.status, result.sql, result.rows) == (
        third + turn3,
        EpisodeStatus.SUBMITTED,
        final_sql,
        ((1, 2), (2, 1)),
    )


def test_six_rounds_count_down_to_the_singular_then_the_verbatim_final_turn(db: Database) -> None:
    """Append-only prompts, think blocks kept, one results turn per round, then the final text."""
    good = "SELECT name FROM artist ORDER BY id"
    turns = [
        assistant_reply(
            f"step {i}", tool_call("run_query", sql=good if i == 2 else BAD_SQL if i == 3 else "SELECT 1")
        )
        for i in range(6)
    ]
    result, prompts = run(db, *turns, final=f"<think>answer</think>\n{good}")
    assert len(prompts) == 7
    for i, (earlier, later) in enumerate(itertools.pairwise(prompts)):
        assert later.startswith(earlier + f"<think>step {i}</think>")
        assert later.count("<|im_start|>user") == earlier.count("<|im_start|>user") + 1
    assert prompts[-1].count("<think>step") == 6
    endings = [p.rsplit("<|im_end|>", 1)[0].rsplit("\n\n", 1)[-1] for p in prompts[1:]]
    assert endings == [f"{n} tool turns left before you must answer" for n in (5, 4, 3, 2)] + [
        "1 tool turn left before you must answer",
        OPENING + " Your last query that executed without error was:\nSELECT 1\n"
        "If you are not sure of an improvement, return that query.",
    ]
    assert (result.status, result.stop_reason, result.sql, result.rows) == (
        EpisodeStatus.FINAL_ANSWER,
        StopReason.TOOL_TURNS,
        good,
        (("AC/DC",), ("Accept",)),
    )


def test_after_four_failures_the_final_turn_says_why_and_shows_the_last_good_query(db: Database) -> None:
    """One query runs, four fail: the final turn has the reason, then the same structure."""
    turns = [tool_call("run_query", sql="SELECT 7 AS x")] + [
        tool_call("run_query", sql=f"SELECT nope{i} FROM artist") for i in range(4)
    ]
    result, prompts = run(db, *turns, final="no idea")
    assert len(prompts) == 6
    assert prompts[-1].endswith(
        "Error: no such column: nope3\nhint: if nope3 is a text value, write it in single quotes: "
        "'nope3'\n\nToo many queries failed in a row. " + OPENING + " Your last query that executed "
        "without error was:\nSELECT 7 AS x\nIf you are not sure of an improvement, return that query."
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (result.status, result.stop_reason, result.sql) == (
        EpisodeStatus.FALLBACK,
        StopReason.FAILED_QUERIES,
        "SELECT 7 AS x",
    )


def test_with_no_query_that_ran_the_final_turn_asks_for_the_best_query(db: Database) -> None:
    """Six rounds without a successful query: the final text keeps the structure, no SQL to show."""
    result, prompts = run(db, tool_call("list_tables"), final="SELECT count(*) FROM album")
    assert prompts[-1].endswith(OPENING + NONE_RAN + "<|im_end|>\n<|im_start|>assistant\n")
    assert (result.status, result.rows) == (EpisodeStatus.FINAL_ANSWER, ((3,),))


def test_zero_tool_turns_ask_for_the_answer_in_the_first_turn(db: Database) -> None:
    """max_tool_turns=0: the first user turn already carries the final text."""
    result, prompts = run(
        db, "SELECT 1", final="SELECT count(*) FROM artist", settings=EpisodeSettings(max_tool_turns=0)
    )
    assert prompts == [
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nQuestion: {QUESTION}\n\n"
        + OPENING
        + NONE_RAN
        + "<|im_end|>\n<|im_start|>assistant\n"
    ]
    assert result.rows == ((2,),)


def test_identical_calls_in_a_round_show_the_same_result_twice(db: Database) -> None:
    """The environment runs every call it finds: a repeated call gets its own label and result."""
    call = tool_call("describe_table", table_name="artist")
    _, prompts = run(db, assistant_reply(None, call, call), tool_call("submit_sql", sql="SELECT 1"))
    statement = run_tool(db, "describe_table", {"table_name": "artist"}).text
    assert prompts[1].endswith(
        user_turn(
            f"result (1/2):\n{statement}\n\nresult (2/2):\n{statement}\n\n"
            "5 tool turns left before you must answer"
        )
    )


def test_the_trained_texts_are_the_default() -> None:
    """EpisodeSettings() reads the trained environment's texts."""
    assert EpisodeSettings().environment is Environment.TRAINED


def test_the_authors_texts_replace_ours_in_every_turn_and_tool_text(db: Database) -> None:
    """With the authors' constants (agent.prompt_files), their budget line, labels, error and
    more-rows line are what the model reads."""
    texts = TrainedTexts(
        budget="[{n} tool turns left]",
        result_label="R{}/{}",
        error="ERR {}",
        more_rows="{} shown, more exist",
        final="LIMIT REACHED. Last good:\n{sql}",
    )
    nine = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 9) SELECT n FROM c"
    turn = assistant_reply(None, tool_call("run_query", sql=BAD_SQL), tool_call("run_query", sql=nine))
    prompts = PromptSet(SYSTEM_PROMPT, "Question: {question}", texts=texts)
    _, sent = run(db, turn, final="", prompts=prompts, settings=EpisodeSettings(max_tool_turns=2))
    hint = "hint: if nope is a text value, write it in single quotes: 'nope'"
    results = f"R1/2\nERR no such column: nope\n{hint}\n\nR2/2\nn\n1\n2\n3\n4\n5\n5 shown, more exist"
    assert sent[1].endswith(user_turn(f"{results}\n\n[1 tool turns left]"))
    assert sent[2].endswith(user_turn(f"{results}\n\nLIMIT REACHED. Last good:\n{nine}"))

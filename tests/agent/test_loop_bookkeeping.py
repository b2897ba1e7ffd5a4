"""The loop's bookkeeping as the reference states it: every call counts in call order, submit ends,
the answer is read whole, and an assistant turn opens with the prefix chosen."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from agent.episode import EpisodeResult, EpisodeSettings, EpisodeStatus, StopReason
from agent.loop import run_episode
from agent.prompt import DEFAULT_PROMPTS
from agent.sqlite import Database, WorkerLimits, WorkerPool, create_database
from tests.support.policies import PolicyBackend, ScriptPolicy, assistant_reply, tool_call

QUESTION = "How many albums does each artist have?"
SCHEMA_SQL = """
CREATE TABLE artist (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE album (id INTEGER PRIMARY KEY, title TEXT, artist_id INTEGER REFERENCES artist(id));
INSERT INTO artist VALUES (1, 'AC/DC'), (2, 'Accept');
INSERT INTO album VALUES (1, 'For Those About To Rock', 1), (2, 'Let There Be Rock', 1),
                         (3, 'Balls to the Wall', 2);
"""
A, B = "SELECT count(*) FROM album", "SELECT count(*) FROM artist"
BAD, WORSE = "SELECT nope FROM artist", "SELECT worse FROM artist"
FINAL_OPENING = (
    "You have reached the exploration limit. Now generate the final SQL query to answer "
    "the question. Return only the SQL query."
)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """A tiny music database built from SQL."""
    engine = WorkerPool(WorkerLimits(workers=1))
    path = create_database(tmp_path_factory.mktemp("books") / "music.sqlite", SCHEMA_SQL)
    with Database.unruled(path, engine) as database:
        yield database
    engine.close()


def run(db: Database, *turns: str, final: str | None = None, **kwargs: Any) -> tuple[EpisodeResult, list[str]]:
    """An episode in the trained environment; its result and every prompt sent."""
    backend = PolicyBackend(ScriptPolicy(list(turns), final=final))
    result = anyio.run(lambda: run_episode(QUESTION, db, backend, **kwargs))
    return result, [r.prompt for r in backend.requests]


def queries(*sqls: str) -> str:
    """One reply calling run_query on each SQL in order."""
    return assistant_reply("try", *(tool_call("run_query", sql=sql) for sql in sqls))


def last_query_text(sql: str) -> str:
    """The final turn's text when `sql` is the last query that ran without error."""
    return (
        f"{FINAL_OPENING} Your last query that executed without error was:\n{sql}\n"
        "If you are not sure of an improvement, return that query.<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    ("calls", "last"),
    [
        ((A, B, A), A),
        ((B, A, B), B),
        ((A, A, B), B),
        ((B, BAD, A, BAD, B), B),
        ((A, B, BAD, BAD), B),
    ],
)
def test_the_last_query_that_ran_is_the_last_in_call_order(
    db: Database, calls: tuple[str, ...], last: str
) -> None:
    """Identical calls count again: the final turn echoes the last passing run_query as written."""
    result, prompts = run(db, queries(*calls), final="", settings=EpisodeSettings(max_tool_turns=1))
    assert prompts[-1].endswith(last_query_text(last))
    assert (result.status, result.sql, result.stop_reason) == (
        EpisodeStatus.FALLBACK,
        last,
        StopReason.TOOL_TURNS,
    )


@pytest.mark.parametrize(
    ("rounds", "requests"),
    [
        ([(BAD, BAD, BAD, BAD)], 2),  # four identical failures in one round: the streak is four
        ([(BAD, BAD), (WORSE, WORSE)], 3),
        ([(BAD, BAD, BAD), (WORSE,)], 3),
        ([(BAD, WORSE, BAD, WORSE)], 2),
    ],
)
def test_identical_failing_queries_each_count_toward_four_in_a_row(
    db: Database, rounds: list[tuple[str, ...]], requests: int
) -> None:
    """Every failing run_query of a round counts, identical ones included; the final turn follows."""
    result, prompts = run(db, *(queries(*sqls) for sqls in rounds), queries(A), final="")
    assert len(prompts) == requests
    assert "Too many queries failed in a row. " + FINAL_OPENING in prompts[-1]
    assert result.stop_reason is StopReason.FAILED_QUERIES


@pytest.mark.parametrize(
    ("calls", "streak_ends"),
    [
        ((BAD, BAD, A, BAD), False),  # A resets: one failure after it
        ((BAD, A, BAD, BAD, A), False),
        ((A, BAD, BAD, BAD, BAD), True),
        ((BAD, A, BAD, A, BAD, BAD, BAD, BAD), True),
    ],
)
def test_a_passing_query_resets_the_streak_in_call_order(
    db: Database, calls: tuple[str, ...], streak_ends: bool
) -> None:
    """Passing and failing queries, identical ones among them, count in the order written."""
    result, prompts = run(db, queries(*calls), final="")
    assert (len(prompts) == 2) is streak_ends
    assert (result.stop_reason is StopReason.FAILED_QUERIES) is streak_ends


def test_other_tools_neither_count_nor_reset_the_streak(db: Database) -> None:
    """list_tables between failures (repeated too) leaves the streak as it was."""
    list_tables = tool_call("list_tables")
    reply = assistant_reply(
        None,
        tool_call("run_query", sql=BAD),
        list_tables,
        tool_call("run_query", sql=BAD),
        list_tables,
        tool_call("run_query", sql=WORSE),
        tool_call("run_query", sql=BAD),
    )
    result, prompts = run(db, reply, final="")
    assert (len(prompts), result.stop_reason) == (2, StopReason.FAILED_QUERIES)


@pytest.mark.parametrize(
    ("submit", "error"),
    [
        (tool_call("submit_sql", sql=BAD), "the submitted SQL failed (no such column: nope)"),
        (tool_call("submit_sql", sql=""), "the submit_sql call had no SQL"),
        (tool_call("submit_sql", sql="   "), "the submit_sql call had no SQL"),
        ('{"tool": "submit_sql"}', "the submit_sql call had no SQL"),
        (tool_call("submit_sql", query=BAD), "the submitted SQL failed (no such column: nope)"),
    ],
)
def test_a_failing_or_empty_submit_ends_the_episode_and_falls_back(
    db: Database, submit: str, error: str
) -> None:
    """submit_sql ends the episode whatever its SQL; a broken one falls back to the last query that ran."""
    reply = assistant_reply(
        "done",
        tool_call("run_query", sql=B),
        tool_call("run_query", sql=A),
        submit,
        tool_call("run_query", sql=BAD),
    )
    result, prompts = run(db, reply, queries(B))
    assert len(prompts) == 1
    assert [c.call.tool for c in result.rounds[0].calls] == ["run_query", "run_query", "submit_sql"]
    assert (result.status, result.stop_reason, result.sql, result.rows, result.error) == (
        EpisodeStatus.FALLBACK,
        StopReason.SUBMITTED,
        A,
        ((3,),),
        f"{error}; used the last query that ran without error instead",
    )


def test_a_failing_submit_with_nothing_that_ran_fails(db: Database) -> None:
    """No query ran before a broken submit: the episode fails at once and says why."""
    result, prompts = run(db, tool_call("submit_sql", sql=BAD), queries(A))
    assert len(prompts) == 1
    assert (result.status, result.stop_reason, result.sql, result.rows) == (
        EpisodeStatus.FAILED,
        StopReason.SUBMITTED,
        BAD,
        (),
    )
    assert result.error is not None and result.error.startswith(
        "no answer: the submitted SQL failed (no such column: nope) and no query ran without error"
    )


def test_a_passing_submit_after_failures_is_the_answer(db: Database) -> None:
    """Failures before a submit_sql that runs do not matter: its SQL is the answer."""
    reply = assistant_reply(None, tool_call("run_query", sql=BAD), tool_call("submit_sql", sql=B))
    result, _ = run(db, reply)
    assert (result.status, result.sql, result.rows, result.error) == (EpisodeStatus.SUBMITTED, B, ((2,),), None)


def test_a_bare_final_answer_is_read_whole_past_a_blank_line(db: Database) -> None:
    """A final answer split by a blank line runs whole; prose after it is left out with a note."""
    final = "<think>count</think>\nSELECT count(*)\nFROM album\n\nWHERE artist_id = 1\n\nThat counts them."
    result, _ = run(db, queries(A), final=final, settings=EpisodeSettings(max_tool_turns=1))
    assert (result.status, result.sql, result.rows) == (
        EpisodeStatus.FINAL_ANSWER,
        "SELECT count(*)\nFROM album\n\nWHERE artist_id = 1",
        ((2,),),
    )
    assert result.rounds[-1].notes == (
        "the answer's SQL was read up to where it ended; the text after it is not SQL and was left out: "
        "That counts them.",
    )


def test_bare_sql_in_a_tool_turn_is_read_whole_too(db: Database) -> None:
    """SQL without a call in a tool turn is the answer, read past a blank line as in the final turn."""
    result, prompts = run(db, "SELECT count(*) FROM album\n\nWHERE artist_id = 2")
    assert (len(prompts), result.stop_reason, result.rows) == (1, StopReason.NO_CALL, ((1,),))


THINKING_ON, THINKING_OFF = "<think>\n", "<think>\n\n</think>\n\n"


@pytest.mark.parametrize(
    ("prefix", "turn", "think"),
    [
        (THINKING_ON, "I need the tables.\n</think>\n" + tool_call("run_query", sql=A), "I need the tables."),
        (THINKING_OFF, tool_call("run_query", sql=A), ""),
        ("", "<think>plan</think>\n" + tool_call("run_query", sql=A), "plan"),
        ("", tool_call("run_query", sql=A), None),
    ],
)
def test_the_assistant_prefix_opens_every_turn_and_replies_parse_either_way(
    db: Database, prefix: str, turn: str, think: str | None
) -> None:
    """Every prompt ends with the prefix; a completion that starts inside the think block parses."""
    prompts = dataclasses.replace(DEFAULT_PROMPTS, assistant_prefix=prefix)
    result, sent = run(db, turn, final="", prompts=prompts, settings=EpisodeSettings(max_tool_turns=2))
    assert len(sent) == 3
    assert all(p.endswith("<|im_start|>assistant\n" + prefix) for p in sent)
    assert sent[1].startswith(sent[0] + turn) and sent[2].startswith(sent[1] + turn)
    final_think = None if prefix == "" else ""  # the final reply is empty: only the prefix is there
    assert [r.think for r in result.rounds] == [think, think, final_think]
    assert (result.rounds[0].calls[0].ok, result.sql, result.rows) == (True, A, ((3,),))


def test_a_turn_cut_off_inside_the_prefilled_think_block_is_told_so(db: Database) -> None:
    """With "<think>\\n" prefilled, a completion that never closes the block is a cut-off reply."""
    prompts = dataclasses.replace(DEFAULT_PROMPTS, assistant_prefix=THINKING_ON)
    result, _ = run(db, "thinking and thinking", queries(A), prompts=prompts)
    assert result.rounds[0].notes[0].startswith("your reply was cut off before any tool call")


@pytest.mark.parametrize(
    "reply",
    [
        "I am Gemma, a helpful assistant. How can I help you today?",
        "<think>hmm</think>Sure! Here is a poem about databases.",
        "",
    ],
)
def test_a_model_that_never_calls_a_tool_is_a_model_problem(db: Database, reply: str) -> None:
    """No call in any tool turn: its own stop reason, and an error naming the causes, not the question."""
    result, prompts = run(db, reply, final="I cannot help with that.")
    assert len(prompts) == 7
    assert (result.status, result.stop_reason, result.sql) == (
        EpisodeStatus.FAILED,
        StopReason.NEVER_CALLED,
        None,
    )
    assert result.error == (
        "no answer: the model called no tool in 6 rounds, so it never looked at the database. That is a "
        "problem of the model or its runtime, not of the question: another model may be served under this "
        "model's name, an Ollama Modelfile whose TEMPLATE is not the raw {{ .Prompt }} may rewrite the "
        "prompt, or a chat endpoint may rebuild it; run `sqale-agent doctor`, which asks the model one "
        "question and checks that it calls a tool"
    )


@pytest.mark.parametrize(
    "first",
    [
        tool_call("list_tables"),
        '{"tool": "run_query", "args": {"sql": "SELECT 1"',  # an attempt the parser could not read
        '{"tool": "lsit_tables", "args": {}}',
    ],
)
def test_one_call_or_attempt_is_enough_to_be_the_agent(db: Database, first: str) -> None:
    """A model that called (or tried to call) a tool once ends as usual, whatever the other rounds."""
    result, _ = run(db, first, "no calls any more", final="nothing")
    assert (result.status, result.stop_reason) == (EpisodeStatus.FAILED, StopReason.TOOL_TURNS)
    assert "called no tool" not in (result.error or "")


def test_a_final_answer_without_any_call_keeps_its_answer(db: Database) -> None:
    """SQL in the final turn of a model that called nothing is still the answer; the reason says it."""
    result, _ = run(db, "no calls", final=A)
    assert (result.status, result.stop_reason, result.rows, result.error) == (
        EpisodeStatus.FINAL_ANSWER,
        StopReason.NEVER_CALLED,
        ((3,),),
        None,
    )

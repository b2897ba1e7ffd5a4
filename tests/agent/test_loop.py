"""The episode loop's flow: append-only prompts, tool-turn budget, failed queries, fallback, duplicates."""

from __future__ import annotations

import itertools
from typing import Any

from agent.episode import EpisodeSettings, EpisodeStatus, Round, StopReason
from agent.prompt import SYSTEM_PROMPT, PromptSet
from agent.sqlite import Database, HideRules, QueryResult
from tests.support.music_episodes import BAD_SQL, FINAL_TEXT, QUESTION, run, run_tool, script, user_turn
from tests.support.policies import assistant_reply, broken_json_call, tool_call


def test_golden_prompts_across_rounds(db: Database) -> None:
    """Every prompt is byte for byte the previous one + completion + one user turn of results."""
    turn1 = assistant_reply("See the tables.", tool_call("list_tables"))
    turn2 = assistant_reply(
        "Look at album; count.",
        tool_call("describe_table", table_name="album"),
        tool_call("run_query", sql="SELECT count(*) FROM album"),
    )
    final_sql = "SELECT artist_id, count(*) FROM album GROUP BY artist_id"
    turn3 = assistant_reply("Done.", tool_call("submit_sql", sql=final_sql))
    backend = script(turn1, turn2, turn3)
    result = run(QUESTION, db, backend)

    first = (
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
        f"<|im_start|>user\nQuestion: {QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    )
    tables = run_tool(db, "list_tables", {}).text
    describe = run_tool(db, "describe_table", {"table_name": "album"}).text
    count = run_tool(db, "run_query", {"sql": "SELECT count(*) FROM album"}).text
    second = (
        first + turn1 + user_turn(f"[1] list_tables\n{tables}\n\n[5 tool turns left before you must answer]")
    )
    third = (
        second
        + turn2
        + user_turn(
            f'[1] describe_table {{"table_name": "album"}}\n{describe}\n\n'
            f'[2] run_query {{"sql": "SELECT count(*) FROM album"}}\n{count}\n\n'
            "[4 tool turns left before you must answer]"
        )
    )
    assert [r.prompt for r in backend.requests] == [first, second, third]
    assert result.prompt == third + turn3
    assert (result.status, result.stop_reason, result.sql) == (
        EpisodeStatus.SUBMITTED,
        StopReason.SUBMITTED,
        final_sql,
    )
    assert (result.columns, result.rows, result.row_count, result.truncated, result.error) == (
        ("artist_id", "count(*)"),
        ((1, 2), (2, 1)),
        2,
        False,
        None,
    )
    assert [r.think for r in result.rounds] == ["See the tables.", "Look at album; count.", "Done."]
    assert result.tool_calls == 4
    assert result.tables_seen == frozenset({"album"})


def test_budget_counts_down_and_final_turn_comes_after_six_tool_turns(db: Database) -> None:
    """Budget lines 5..0 in order; the 7th request is the final turn; think blocks stay."""
    backend = script(
        assistant_reply("again", tool_call("list_tables")),
        final="```sql\nSELECT name FROM artist ORDER BY id\n```",
    )
    result = run(QUESTION, db, backend)
    prompts = [r.prompt for r in backend.requests]
    assert len(prompts) == 7
    for earlier, later in itertools.pairwise(prompts):
        assert later.startswith(earlier + "<think>again</think>")
    for n, prompt in zip(range(5, -1, -1), prompts[1:], strict=True):
        assert prompt.endswith(
            f"[{n} tool turns left before you must answer]"
            + ("\n" + FINAL_TEXT if n == 0 else "")
            + "<|im_end|>\n<|im_start|>assistant\n"
        )
    assert prompts[-1].count("<think>again</think>") == 6
    assert (result.status, result.stop_reason) == (EpisodeStatus.FINAL_ANSWER, StopReason.TOOL_TURNS)
    assert result.rows == (("AC/DC",), ("Accept",))
    assert [(r.index, r.final) for r in result.rounds] == [(i, i == 7) for i in range(1, 8)]


def test_four_failed_queries_in_a_row_end_exploration(db: Database) -> None:
    """After 4 failed run_query (over rounds) the next turn is final, with the reason given."""
    backend = script(tool_call("run_query", sql=BAD_SQL), final="I cannot answer.")
    result = run(QUESTION, db, backend)
    assert len(backend.requests) == 5
    assert backend.requests[-1].prompt.endswith(
        "[0 tool turns left before you must answer]\n"
        "Too many queries failed in a row, so exploration is over.\n"
        + FINAL_TEXT
        + "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (result.status, result.stop_reason, result.sql, result.rows) == (
        EpisodeStatus.FAILED,
        StopReason.FAILED_QUERIES,
        None,
        (),
    )
    assert result.error == (
        "no answer: the final answer had no SQL and no query ran without error during "
        "exploration; try rephrasing the question or naming the tables it is about"
    )


def test_four_failed_queries_in_one_round_end_exploration(db: Database) -> None:
    """Four failing queries in one round make the next turn final."""
    bad = [tool_call("run_query", sql=f"SELECT nope{i} FROM artist") for i in range(4)]
    backend = script(assistant_reply(None, *bad), final="SELECT count(*) FROM artist")
    result = run(QUESTION, db, backend)
    assert len(backend.requests) == 2
    assert (result.status, result.stop_reason, result.rows) == (
        EpisodeStatus.FINAL_ANSWER,
        StopReason.FAILED_QUERIES,
        ((2,),),
    )


def test_a_successful_query_resets_the_failed_streak(db: Database) -> None:
    """Three failures, a success, three failures: exploration runs all six tool turns."""
    ok = tool_call("run_query", sql="SELECT 1")
    fail = tool_call("run_query", sql=BAD_SQL)
    backend = script(
        assistant_reply(None, fail, fail.replace("nope", "nope2"), fail.replace("nope", "n3")),
        assistant_reply(None, ok),
        fail,
        fail.replace("nope", "n4"),
        fail.replace("nope", "n5"),
        tool_call("list_tables"),
        final="",
    )
    result = run(QUESTION, db, backend)
    assert len(backend.requests) == 7
    assert result.stop_reason == StopReason.TOOL_TURNS


def test_fallback_picks_the_last_successful_query(db: Database) -> None:
    """A broken final answer falls back to the LAST query that ran without error."""
    backend = script(
        tool_call("run_query", sql="SELECT 1 AS x"),
        tool_call("run_query", sql="SELECT 2 AS x"),
        tool_call("run_query", sql=BAD_SQL),
        tool_call("list_tables"),
        final=broken_json_call("submit_sql", sql="SELECT 3"),
    )
    result = run(QUESTION, db, backend)
    assert (result.status, result.sql, result.columns, result.rows) == (
        EpisodeStatus.FALLBACK,
        "SELECT 2 AS x",
        ("x",),
        ((2,),),
    )
    assert result.error == ("the final answer had no SQL; used the last query that ran without error instead")


def test_failing_final_sql_falls_back_and_keeps_its_error(db: Database) -> None:
    """A final answer whose SQL fails falls back, and the error says why."""
    backend = script(tool_call("run_query", sql="SELECT 7 AS x"), final=f"```sql\n{BAD_SQL}\n```")
    result = run(QUESTION, db, backend, settings=EpisodeSettings(max_tool_turns=1))
    assert (result.status, result.sql, result.rows) == (EpisodeStatus.FALLBACK, "SELECT 7 AS x", ((7,),))
    assert result.error == (
        "the answer's SQL failed (no such column: nope); used the last query that ran without error instead"
    )


class SpyDatabase(Database):
    """A Database that records every SQL statement the loop and the tools run."""

    def __init__(self, db: Database) -> None:
        super().__init__(db.path, db.workers, hide=db.hide or HideRules())
        self.queries: list[str] = []

    async def aquery(self, sql: str, **kwargs: Any) -> QueryResult:
        self.queries.append(sql)
        return await super().aquery(sql, **kwargs)


def test_duplicate_calls_run_once(db: Database) -> None:
    """Identical calls in a round run once; the duplicate has duplicate=True and the same text."""
    spy = SpyDatabase(db)
    call = tool_call("run_query", sql="SELECT name FROM artist")
    backend = script(assistant_reply(None, call, call, tool_call("list_tables"), call), final="SELECT 1")
    result = run(QUESTION, spy, backend, settings=EpisodeSettings(max_tool_turns=1))
    calls = result.rounds[0].calls
    assert [c.duplicate for c in calls] == [False, True, False, True]
    assert calls[1].text == calls[3].text == calls[0].text
    assert calls[1].ok and calls[1].seconds == 0.0
    assert spy.queries.count("SELECT name FROM artist") == 1
    assert backend.requests[1].prompt.count(calls[0].text) == 3


def test_final_answer_sql_runs_once_and_final_tool_calls_are_not_run(db: Database) -> None:
    """The answer's SQL is executed exactly once; other calls in the final turn are not run."""
    spy = SpyDatabase(db)
    final = tool_call("sample_rows", table_name="album") + "\n```sql\nSELECT title FROM album\n```"
    result = run(
        QUESTION, spy, script(tool_call("list_tables"), final=final), settings=EpisodeSettings(max_tool_turns=1)
    )
    assert spy.queries == ["SELECT title FROM album"]
    assert (result.status, result.rounds[-1].calls, len(result.rows)) == (EpisodeStatus.FINAL_ANSWER, (), 3)


def test_run_query_in_the_final_turn_is_the_answer(db: Database) -> None:
    """A query tested in the final turn is taken as the answer."""
    result = run(
        QUESTION,
        db,
        script(tool_call("list_tables"), final=tool_call("run_query", sql="SELECT count(*) FROM album")),
        settings=EpisodeSettings(max_tool_turns=1),
    )
    assert (result.status, result.sql, result.rows) == (
        EpisodeStatus.FINAL_ANSWER,
        "SELECT count(*) FROM album",
        ((3,),),
    )


def test_submit_sql_in_a_tool_turn_ends_the_episode_and_skips_later_calls(db: Database) -> None:
    """A submit_sql whose SQL runs ends the episode; calls after it are not run."""
    backend = script(
        assistant_reply(None, tool_call("submit_sql", sql="SELECT name FROM artist"), tool_call("list_tables"))
    )
    result = run(QUESTION, db, backend)
    assert len(backend.requests) == 1
    assert [c.call.tool for c in result.rounds[0].calls] == ["submit_sql"]
    assert (result.status, result.stop_reason, result.rows) == (
        EpisodeStatus.SUBMITTED,
        StopReason.SUBMITTED,
        (("AC/DC",), ("Accept",)),
    )


def test_failing_submit_sql_ends_the_episode_and_falls_back(db: Database) -> None:
    """A submit_sql whose SQL fails ends the episode: the answer is the last query that ran."""
    good = "SELECT count(*) FROM album"
    backend = script(
        tool_call("run_query", sql=good),
        tool_call("submit_sql", sql=BAD_SQL),
        tool_call("submit_sql", sql=good),
    )
    result = run(QUESTION, db, backend)
    assert len(backend.requests) == 2
    assert (result.status, result.stop_reason, result.sql, result.rows, result.error) == (
        EpisodeStatus.FALLBACK,
        StopReason.SUBMITTED,
        good,
        ((3,),),
        "the submitted SQL failed (no such column: nope); used the last query that ran without error instead",
    )


def test_sql_without_a_tool_call_is_taken_as_the_answer(db: Database) -> None:
    """A tool turn answering with runnable SQL and no call ends the episode (no_tool_call)."""
    backend = script("<think>easy</think>\n```sql\nSELECT count(*) FROM artist\n```")
    result = run(QUESTION, db, backend)
    assert (result.status, result.stop_reason, result.rows, len(backend.requests)) == (
        EpisodeStatus.FINAL_ANSWER,
        StopReason.NO_CALL,
        ((2,),),
        1,
    )


def test_failing_sql_without_a_call_comes_back_as_a_note(db: Database) -> None:
    """Failing SQL written without a call is shown to the model with its error, and play goes on."""
    backend = script(f"```sql\n{BAD_SQL}\n```", tool_call("submit_sql", sql="SELECT 1"))
    result = run(QUESTION, db, backend)
    failure = run_tool(db, "run_query", {"sql": BAD_SQL}).text
    assert backend.requests[1].prompt.endswith(
        user_turn(
            "[note] your reply has SQL but no tool call, so it was taken as your answer, and it failed:\n"
            f"{failure}\nFix it with run_query, then answer with submit_sql\n\n"
            "[5 tool turns left before you must answer]"
        )
    )
    assert result.status == EpisodeStatus.SUBMITTED


def test_on_round_is_awaited_after_every_round(db: Database) -> None:
    """on_round sees each round, in order, including the final one."""
    seen: list[tuple[int, bool, tuple[str, ...]]] = []

    async def on_round(round_: Round) -> None:
        seen.append((round_.index, round_.final, tuple(c.call.tool for c in round_.calls)))

    backend = script(tool_call("list_tables"), final="SELECT 1")
    run(QUESTION, db, backend, on_round=on_round, settings=EpisodeSettings(max_tool_turns=2))
    assert seen == [(1, False, ("list_tables",)), (2, False, ("list_tables",)), (3, True, ())]


def test_evidence_and_custom_prompts_are_used(db: Database) -> None:
    """A PromptSet replaces the texts; evidence appears in the first user turn."""
    backend = script("SELECT 1")
    run(QUESTION, db, backend, evidence="AC/DC is a band", prompts=PromptSet("SYS", "Q={question}"))
    assert backend.requests[0].prompt == (
        "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\n"
        f"Q={QUESTION}\nEvidence: AC/DC is a band<|im_end|>\n<|im_start|>assistant\n"
    )

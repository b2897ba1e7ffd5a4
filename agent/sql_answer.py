"""Running an answer's SQL: an episode's final answer, a verified entry's, or a candidate a person chose.

The statement runs once with the episode's row, cell and byte limits, through the same worker and
the database's hide rules (`run_answer_sql`). An episode's answer is settled by the reference's
rule (`Settling`): its SQL when it runs, else the last query that ran without error, else none.
With no model asked (a verified answer, a chosen candidate) the SQL becomes an EpisodeResult with
no rounds (`answer_from_sql`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .episode import EpisodeResult, EpisodeSettings, EpisodeStatus, StopReason
from .episode_text import BUSY_ADVICE, REPHRASE_ADVICE
from .sqlite import Database, QueryResult, QueryStatus, Schema, SqlValue

TIMED_OUT = frozenset({QueryStatus.TIMEOUT, QueryStatus.KILLED})


@dataclass(frozen=True)
class AnswerRun:
    """One run of an answer's SQL: its result, the schema's tables and columns it read, its time."""

    result: QueryResult
    tables: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    seconds: float


def schema_reads(schema: Schema, result: QueryResult) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The schema's tables and views (and their columns) a query read, in name order.

    The worker also reports CTEs and subqueries SQLite materialises, under their own names;
    only names of the schema are kept, spelled as the schema spells them.
    """
    tables = {t.name for name in result.tables_read if (t := schema.find(name)) is not None}
    columns = {(t.name, column) for name, column in result.columns_read if (t := schema.find(name)) is not None}
    return (
        tuple(sorted(tables, key=str.casefold)),
        tuple(sorted(columns, key=lambda c: (c[0].casefold(), c[1].casefold()))),
    )


async def run_answer_sql(
    sql: str,
    database: Database,
    settings: EpisodeSettings,
    params: Mapping[str, SqlValue] | None = None,
    *,
    owner_sql: bool = False,
) -> AnswerRun:
    """Run an answer once for its result: result_rows rows, cut to result_bytes in the worker
    (`owner_sql`: the owner's text, tried in this process first: Database.aquery)."""
    started = time.perf_counter()
    result = await database.aquery(
        sql,
        max_rows=settings.result_rows,
        cell_limit=settings.result_cell_chars,
        byte_budget=settings.result_bytes,
        params=params,
        owner_sql=owner_sql,
    )
    tables, columns = schema_reads(await database.aschema(), result) if result.ok else ((), ())
    return AnswerRun(result, tables, columns, time.perf_counter() - started)


@dataclass(frozen=True)
class Answer:
    """The SQL an episode ends with and how it came about."""

    sql: str | None
    status: EpisodeStatus
    result: QueryResult | None
    error: str | None
    seconds: float
    tables_read: tuple[str, ...] = ()
    columns_read: tuple[tuple[str, str], ...] = ()


class Settling:
    """How an episode's answer is settled, and what that needs to know of the episode so far: the
    last query that ran without error, whether a writer held the database, whether the answer's
    own SQL ran past the time limit."""

    def __init__(self, database: Database, settings: EpisodeSettings) -> None:
        self.database, self.settings = database, settings
        self.last_ok_sql: str | None = None
        self.met_writer = False  # a statement found the database held by another program (BUSY)
        self.timed_out = False  # the answer's own SQL ran past the per-query time limit

    async def settle(self, sql: str, status: EpisodeStatus) -> Answer:
        """Run the answer SQL; when it fails, fall back to the last query that ran."""
        answer = await self.run(sql, status)
        if answer.result is not None and answer.result.ok:
            return answer
        return await self.fallback(f"the answer's SQL failed ({answer.error})", sql, answer.seconds)

    async def fallback(self, why: str, failed_sql: str | None, spent: float) -> Answer:
        """The last query that ran without error during exploration, or a failed answer (saying to ask
        again later when a writer held the database: rephrasing cannot help then)."""
        if self.last_ok_sql is not None:
            answer = await self.run(self.last_ok_sql, EpisodeStatus.FALLBACK)
            if answer.result is not None and answer.result.ok:
                return replace(
                    answer,
                    status=EpisodeStatus.FALLBACK,
                    seconds=spent + answer.seconds,
                    error=f"{why}; used the last query that ran without error instead",
                )
            spent += answer.seconds
        advice = BUSY_ADVICE if self.met_writer else REPHRASE_ADVICE
        return Answer(
            failed_sql,
            EpisodeStatus.FAILED,
            None,
            f"no answer: {why} and no query ran without error during exploration; {advice}",
            spent,
        )

    async def run(self, sql: str, status: EpisodeStatus) -> Answer:
        """Run the answer once for the result, noting a time limit or a writer it met."""
        run = await run_answer_sql(sql, self.database, self.settings)
        self.timed_out = self.timed_out or run.result.status in TIMED_OUT
        self.met_writer = self.met_writer or run.result.status is QueryStatus.BUSY
        return Answer(
            sql,
            status,
            run.result,
            None if run.result.ok else run.result.error,
            run.seconds,
            run.tables,
            run.columns,
        )


async def answer_from_sql(
    sql: str,
    database: Database,
    settings: EpisodeSettings,
    *,
    question: str,
    evidence: str | None,
    status: EpisodeStatus,
    stop_reason: StopReason,
    params: Mapping[str, SqlValue] | None = None,
    owner_sql: bool = False,
) -> tuple[EpisodeResult, QueryResult]:
    """`sql` run now as the answer to `question`, with `params` bound by SQLite (when it fails, the
    answer carries SQLite's error), and the statement's own result (what it read, as the worker
    reported it); `owner_sql` as run_answer_sql's."""
    run = await run_answer_sql(sql, database, settings, params, owner_sql=owner_sql)
    result = run.result
    ran = result if result.ok else None
    return EpisodeResult(
        question=question,
        evidence=evidence,
        sql=sql,
        status=status,
        stop_reason=stop_reason,
        columns=ran.columns if ran else (),
        rows=ran.rows if ran else (),
        row_count=ran.total_rows if ran else 0,
        truncated=(ran.truncated or ran.cut_to_fit) if ran else False,
        error=None if ran else (result.error or result.status.value),
        rounds=(),
        tokens=0,
        seconds=run.seconds,
        model_seconds=0.0,
        tool_seconds=run.seconds,
        prompt="",
        cut=ran.cut if ran else None,
        tables_read=run.tables,
        columns_read=run.columns,
        answer_timed_out=result.status in TIMED_OUT,
    ), result

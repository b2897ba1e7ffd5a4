"""The tool calls of an episode's tool turns: each run and counted in order, a submit_sql call's
answer, and SQL written without any call taken as the answer (agent/loop.py says how each is counted).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from . import tools
from .backends.base import Completion
from .episode import CallRecord, EpisodeSettings, EpisodeStatus, ToolCall
from .final_sql import read_final_sql, sql_argument
from .prompt import neutralise
from .replies import ParsedCompletion
from .sql_answer import TIMED_OUT, Answer, Settling
from .sqlite import Database, QueryResult, QueryStatus
from .telemetry.gate import tool_span
from .tools import ToolSettings


@dataclass(frozen=True)
class _Submit:
    """A submit_sql call of a tool turn: its SQL (None: none given), whether it ran, its result."""

    sql: str | None
    ok: bool
    query: QueryResult | None


def _rows(result: QueryResult | None) -> int | None:
    """The rows a query tool's statement produced (counted up to the cap); None for other tools."""
    return None if result is None else result.total_rows


class EpisodeCalls:
    """The tool-call steps of agent.loop's episode, on the state it keeps (declared here)."""

    database: Database
    settings: EpisodeSettings
    tool_settings: ToolSettings
    answers: Settling
    failed_streak: int
    query_timeouts: int

    def _reply(self, completion: Completion) -> str:
        """The assistant turn as the model wrote it (the episode's own, in agent/loop.py)."""
        raise NotImplementedError

    async def _run_calls(self, calls: tuple[ToolCall, ...]) -> tuple[list[CallRecord], _Submit | None]:
        """Run and count every call in order; stop at a submit_sql, which is returned."""
        records: list[CallRecord] = []
        seen: dict[str, CallRecord] = {}
        for call in calls:
            key = json.dumps([call.tool, call.args], sort_keys=True, default=str)
            query: QueryResult | None = None
            if key in seen:  # shown and counted again, not run again
                first = seen[key]
                record = CallRecord(call, first.ok, first.text, 0.0, first.tables, duplicate=True)
            else:
                record, query = await self._run_call(call)
                seen[key] = record
                self._note_statement(query)
            records.append(record)
            if call.tool == "submit_sql":
                return records, _Submit(sql_argument(call.args), record.ok, query)
            if call.tool == "run_query":
                self._count_query(record.ok, sql_argument(call.args))
        return records, None

    async def _run_call(self, call: ToolCall) -> tuple[CallRecord, QueryResult | None]:
        started = time.perf_counter()
        with tool_span(call.tool, call.tool in tools.TOOLS, call.args) as traced:
            outcome = await tools.arun_tool(
                self.database, call.tool, call.args, self.tool_settings, self.settings.environment
            )
            traced.finished(ok=outcome.ok, rows=_rows(outcome.query), result=outcome.text)
        record = CallRecord(
            call, outcome.ok, neutralise(outcome.text), time.perf_counter() - started, outcome.tables
        )
        return record, outcome.query

    def _note_statement(self, result: QueryResult | None) -> None:
        """What a statement of the model's met: the per-query time limit, or a writer holding the file."""
        if result is not None:
            self.query_timeouts += result.status in TIMED_OUT
            self.answers.met_writer = self.answers.met_writer or result.status is QueryStatus.BUSY

    def _count_query(self, ok: bool, sql: str | None) -> None:
        """One run_query's outcome in the failed streak and as the last query that ran."""
        self.failed_streak = 0 if ok else self.failed_streak + 1
        if ok and sql is not None:
            self.answers.last_ok_sql = sql

    async def _submitted(self, submit: _Submit) -> Answer:
        """The answer of a submit_sql: its SQL when it ran, else the last query that ran without error."""
        if submit.sql is None:
            return await self.answers.fallback("the submit_sql call had no SQL", None, 0.0)
        if not submit.ok:
            error = submit.query.error if submit.query is not None else None
            if submit.query is not None and submit.query.status in TIMED_OUT:
                self.answers.timed_out = True
            return await self.answers.fallback(
                f"the submitted SQL failed ({error or 'it did not run'})", submit.sql, 0.0
            )
        return await self.answers.settle(submit.sql, EpisodeStatus.SUBMITTED)

    async def _answer_without_call(
        self, completion: Completion, parsed: ParsedCompletion
    ) -> tuple[Answer | None, str | None]:
        """A tool turn with no call: its SQL, if any, is the answer (with a note of what was left out
        after it); otherwise a corrective note."""
        final = read_final_sql(self._reply(completion))
        if final is None:
            if parsed.think_unclosed or completion.finish_reason == "length":
                return None, (
                    "your reply was cut off before any tool call; think in a few lines, "
                    'end your thinking, then call a tool as {"tool": "<name>", "args": {...}}'
                )
            return None, (
                'no tool call found in your reply; call a tool as {"tool": "<name>", '
                '"args": {...}}, or submit your answer with submit_sql'
            )
        sql = final.sql
        with tool_span("run_query", True, {"sql": sql}, implicit=True) as traced:
            outcome = await tools.arun_tool(
                self.database, "run_query", {"sql": sql}, self.tool_settings, self.settings.environment
            )
            traced.finished(ok=outcome.ok, rows=_rows(outcome.query), result=outcome.text)
        self._note_statement(outcome.query)
        self._count_query(outcome.ok, sql)
        if not outcome.ok:
            return None, (
                "your reply has SQL but no tool call, so it was taken as your answer, and it "
                f"failed:\n{outcome.text}\nFix it with run_query, then answer with submit_sql"
            )
        return await self.answers.settle(sql, EpisodeStatus.FINAL_ANSWER), final.note()

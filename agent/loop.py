"""The episode loop: tool turns on an append-only raw prompt, then one final answer turn.

Choices beyond the protocol (agent-protocol.md), each documented where it is made:
- submit_sql in a tool turn ends the episode only when its SQL runs; a failing submit_sql
  gets its error back as its result and exploration goes on (the model can fix it).
- A failed submit_sql counts toward the failed-queries streak like a failed run_query;
  other tools neither count nor reset it; duplicates (not run again) do not count.
- SQL written without any tool call in a tool turn is taken as the answer (StopReason.NO_CALL)
  when it runs; when it fails, its error goes back as a note and counts as a failed query.
- No tool runs in the final turn; its answer is, in this order, a submit_sql call, the last
  ```sql fence, a run_query call, or bare SELECT/WITH text (completion.extract_final_sql).
- An answer that is missing or fails falls back to the last run_query that ran without error;
  `EpisodeResult.error` then says why the answer was not used (status FALLBACK).
- A database with no readable table or view (none at all, every one hidden, or none SQLite can
  read) ends the episode at once, failed (StopReason.NO_TABLES): the model is not asked.
- A completion never opens a turn: it is cut at its first chat control token before it joins
  the prompt (`<|im_start|>` is also a stop string; this catches runtimes that ignore stops).
- Each round is a `sqale.round` span and each tool call an `execute_tool` span under it
  (agent/telemetry/steps.py); the model call's span is the backend's (agent/backends/traced.py).
- `finish_now` (an event the caller sets when time is nearly up: the question's time limit, or a
  host that will not call again) ends exploration: before a tool turn, or by cutting that turn's
  model request, the unanswered user turn becomes the final one in the words of a spent tool-turn
  budget (StopReason.TIME_UP), so the model answers with what it has, as it was trained to.
- Tokens: whole-prompt and incremental (KV-cache) prompt counts are both handled
  (`context_after`); text not yet counted by the runtime is estimated at 4 characters a token.
  A tool turn needs at least final_turn_min_tokens of room besides the reserve; the final
  turn always gets at least final_turn_min_tokens.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import anyio

from . import tools
from .backends.base import Completion, ModelBackend
from .episode import (
    CallRecord,
    EpisodeResult,
    EpisodeSettings,
    EpisodeStatus,
    Round,
    StopReason,
    ToolCall,
)
from .prompt import (
    DEFAULT_PROMPTS,
    PromptSet,
    continue_prompt,
    cut_at_chat_token,
    neutralise,
    render_initial_prompt,
    render_round_message,
)
from .replies import ParsedCompletion, extract_final_sql, parse_completion, sql_argument
from .sqlite import Database, QueryResult, QueryStatus, Schema
from .telemetry.gate import round_played, round_span, tool_span
from .text import replace_lone_surrogates

# Rough size of a token, only for text the runtime has not counted yet (the next user turn).
CHARS_PER_TOKEN = 4
QUERY_TOOLS = frozenset({"run_query", "submit_sql"})
TIMED_OUT = frozenset({QueryStatus.TIMEOUT, QueryStatus.KILLED})
DEFAULT_EPISODE_SETTINGS = EpisodeSettings()


def estimate_tokens(text: str) -> int:
    """A rough token count for text the runtime has not reported on yet."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def context_after(used: int, pending_estimate: int, completion: Completion) -> int:
    """Episode tokens after a completion, whether the runtime reports whole or incremental prompts."""
    # A whole-prompt count can never be smaller than the context already used; a smaller
    # one is what a runtime reusing its KV cache reports: only the newly evaluated tokens.
    # A runtime that reports no prompt count at all (0) gets our estimate of the new text.
    if completion.prompt_tokens >= used and completion.prompt_tokens > 0:
        return completion.prompt_tokens + completion.completion_tokens
    new_prompt = completion.prompt_tokens or pending_estimate
    return used + new_prompt + completion.completion_tokens


def tool_turn_tokens(settings: EpisodeSettings, used: int, pending_estimate: int) -> int:
    """num_predict for a tool turn; below final_turn_min_tokens there is no room for one."""
    left = settings.token_budget - used - pending_estimate - settings.final_turn_min_tokens
    return min(settings.max_turn_tokens, left)


def final_turn_tokens(settings: EpisodeSettings, used: int, pending_estimate: int) -> int:
    """num_predict for the final turn: what is left, but never less than the reserved minimum."""
    left = settings.token_budget - used - pending_estimate
    return max(settings.final_turn_min_tokens, min(settings.max_turn_tokens, left))


@dataclass(frozen=True)
class _Answer:
    """The SQL an episode ends with and how it came about."""

    sql: str | None
    status: EpisodeStatus
    result: QueryResult | None
    error: str | None
    seconds: float
    tables_read: tuple[str, ...] = ()
    columns_read: tuple[tuple[str, str], ...] = ()


def _rows(result: QueryResult | None) -> int | None:
    """The rows a query tool's statement produced (counted up to the cap); None for other tools."""
    return None if result is None else result.total_rows


def schema_reads(schema: Schema, result: QueryResult) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The schema's tables and views (and their columns) a query read, in name order.

    The worker also reports CTEs and subqueries SQLite materialises, under their own names;
    only names of the schema are kept, spelled as the schema spells them.
    """
    tables = {t.name for name in result.tables_read if (t := schema.find(name)) is not None}
    columns = {(t.name, column) for name, column in result.columns_read
               if (t := schema.find(name)) is not None}
    return (tuple(sorted(tables, key=str.casefold)),
            tuple(sorted(columns, key=lambda c: (c[0].casefold(), c[1].casefold()))))


async def run_episode(question: str, database: Database, backend: ModelBackend, *,
                      evidence: str | None = None, prompts: PromptSet = DEFAULT_PROMPTS,
                      settings: EpisodeSettings = DEFAULT_EPISODE_SETTINGS,
                      on_round: Callable[[Round], Awaitable[None]] | None = None,
                      finish_now: anyio.Event | None = None) -> EpisodeResult:
    """Answer `question` on `database` with the model; BackendError and cancellation propagate.

    Once `finish_now` is set, the next tool turn (or the one whose request is under way) gives way
    to the final turn.
    """
    episode = _Episode(question, evidence, database, backend, prompts, settings, on_round, finish_now)
    return await episode.play()


class _Episode:
    """The state of one run_episode call (never shared between calls)."""

    def __init__(self, question: str, evidence: str | None, database: Database,
                 backend: ModelBackend, prompts: PromptSet, settings: EpisodeSettings,
                 on_round: Callable[[Round], Awaitable[None]] | None,
                 finish_now: anyio.Event | None = None) -> None:
        self.question, self.evidence = question, evidence
        self.finish_now = finish_now
        self.database, self.backend = database, backend
        self.prompts, self.settings, self.on_round = prompts, settings, on_round
        self.prompt = ""
        self.used = 0  # episode tokens counted by the runtime, up to the end of the last completion
        self.pending = ""  # prompt text appended since then, not counted yet
        self.rounds: list[Round] = []
        self.tool_turns = 0
        self.failed_streak = 0
        self.last_ok_sql: str | None = None
        self.query_timeouts = 0  # the model's statements that the per-query time limit stopped
        self.answer_timed_out = False
        self.started = time.perf_counter()

    async def play(self) -> EpisodeResult:
        """Tool turns until a budget ends them (or an answer arrives), then the final turn."""
        # Nothing to explore: say so at once rather than let the model guess for seven rounds.
        empty = (await self.database.aschema()).no_readable_tables()
        if empty is not None:
            return self._result(_Answer(None, EpisodeStatus.FAILED, None, empty, 0.0), StopReason.NO_TABLES)
        self.prompt = self.pending = render_initial_prompt(
            self.prompts, self.question, self.evidence, environment=self.settings.environment)
        stop: StopReason | None = None
        if self.settings.max_tool_turns <= 0:
            stop = StopReason.TOOL_TURNS
        elif self._tool_tokens(self.pending) < self.settings.final_turn_min_tokens:
            stop = StopReason.TOKEN_BUDGET
        if stop is not None:
            self.prompt = self.pending = render_initial_prompt(
                self.prompts, self.question, self.evidence, final=True, final_reason=stop,
                environment=self.settings.environment)
        while stop is None:
            with round_span(len(self.rounds) + 1, final=False):
                stop, answer = await self._tool_turn()
            if answer is not None and stop is not None:  # an answer always comes with its reason
                return self._result(answer, stop)
        with round_span(len(self.rounds) + 1, final=True):
            final = await self._final_turn()
        return self._result(final, stop)

    def _tool_tokens(self, pending: str) -> int:
        return tool_turn_tokens(self.settings, self.used, estimate_tokens(pending))

    async def _complete(self, max_tokens: int) -> tuple[Completion, float]:
        started = time.perf_counter()
        completion = await self.backend.complete(self.prompt, max_tokens=max_tokens)
        # A runtime may send "\ud800" escapes: text that cannot be UTF-8 would fail every
        # later step (SQLite, the MCP answer, the episode log), so it is made valid here.
        completion = replace(completion, text=replace_lone_surrogates(completion.text))
        seconds = time.perf_counter() - started
        own_turn = cut_at_chat_token(completion.text)
        if own_turn != completion.text:  # the text went on into another turn: it ended here
            completion = dataclasses.replace(completion, text=own_turn, finish_reason="stop")
        self.used = context_after(self.used, estimate_tokens(self.pending), completion)
        return completion, seconds

    async def _complete_unless_finishing(self, max_tokens: int) -> tuple[Completion, float] | None:
        """A tool turn's completion; None when `finish_now` is set before it, or while it is made
        (the request is then cut: its engine slot is freed at once)."""
        finish_now = self.finish_now
        if finish_now is None:
            return await self._complete(max_tokens)
        if finish_now.is_set():
            return None
        made: tuple[Completion, float] | None = None
        failed: Exception | None = None
        async with anyio.create_task_group() as group:

            async def cut() -> None:
                await finish_now.wait()
                group.cancel_scope.cancel()

            group.start_soon(cut)
            try:
                made = await self._complete(max_tokens)
            except Exception as exc:  # raised below as itself, not inside the group's ExceptionGroup
                failed = exc
            group.cancel_scope.cancel()
        if failed is not None:
            raise failed
        return made

    def _final_now(self) -> None:
        """Turn the user turn the model has not answered yet into the final one, worded exactly as
        when the tool turns are spent (the trained environment's "You have reached the exploration
        limit..."), with the results it carried."""
        spent = StopReason.TOOL_TURNS
        environment = self.settings.environment
        if not self.rounds:
            self.prompt = self.pending = render_initial_prompt(
                self.prompts, self.question, self.evidence, final=True, final_reason=spent,
                environment=environment)
            return
        last = self.rounds[-1]
        results = [(record.call, record.text) for record in last.calls]
        message = render_round_message(environment, results, list(last.notes),
                                       self.settings.max_tool_turns - self.tool_turns, final=True,
                                       final_reason=spent, last_ok_sql=self.last_ok_sql)
        answered = self.prompt[:len(self.prompt) - len(self.pending)]  # up to the last completion
        self.prompt = continue_prompt(answered, "", message)
        self.pending = self.prompt[len(answered):]

    async def _tool_turn(self) -> tuple[StopReason | None, _Answer | None]:
        """One tool round; returns why exploration ended (None: go on) and an answer if one came."""
        made = await self._complete_unless_finishing(self._tool_tokens(self.pending))
        if made is None:  # told to answer now: the final turn comes next
            self._final_now()
            return StopReason.TIME_UP, None
        completion, model_seconds = made
        self.tool_turns += 1
        parsed = parse_completion(completion.text)
        records, submitted = await self._run_calls(parsed.calls)
        notes = list(parsed.problems)
        answer: _Answer | None = None
        stop: StopReason | None = None
        if submitted is not None:
            answer, stop = await self._settle(submitted, EpisodeStatus.SUBMITTED), StopReason.SUBMITTED
        elif not parsed.calls and not parsed.problems:
            answer, note = await self._answer_without_call(completion, parsed)
            if note is not None:
                notes.append(note)
            stop = StopReason.NO_CALL if answer is not None else None
        tool_seconds = sum(record.seconds for record in records)
        if answer is not None:
            self.prompt += completion.text
            await self._record_round(completion, parsed, records, notes, model_seconds, tool_seconds)
            return stop, answer
        turns_left = self.settings.max_tool_turns - self.tool_turns
        if turns_left <= 0:
            stop = StopReason.TOOL_TURNS
        elif self.failed_streak >= self.settings.max_failed_queries:
            stop = StopReason.FAILED_QUERIES
        results = [(record.call, record.text) for record in records]
        environment = self.settings.environment
        message = render_round_message(environment, results, notes, turns_left)
        if stop is None and self._tool_tokens(message) < self.settings.final_turn_min_tokens:
            stop = StopReason.TOKEN_BUDGET
        if stop is not None:
            message = render_round_message(environment, results, notes, turns_left, final=True,
                                           final_reason=stop, last_ok_sql=self.last_ok_sql)
        await self._record_round(completion, parsed, records, notes, model_seconds, tool_seconds)
        next_prompt = continue_prompt(self.prompt, completion.text, message)
        self.pending = next_prompt[len(self.prompt) + len(completion.text):]
        self.prompt = next_prompt
        return stop, None

    async def _run_calls(self, calls: tuple[ToolCall, ...]) -> tuple[list[CallRecord], str | None]:
        """Run the calls in order, identical ones once; stop after a submit_sql whose SQL runs."""
        records: list[CallRecord] = []
        seen: dict[str, CallRecord] = {}
        for call in calls:
            key = json.dumps([call.tool, call.args], sort_keys=True, default=str)
            if key in seen:
                first = seen[key]
                records.append(CallRecord(call, first.ok, first.text, 0.0, first.tables, duplicate=True))
                continue
            started = time.perf_counter()
            with tool_span(call.tool, call.tool in tools.TOOLS, call.args) as traced:
                outcome = await tools.arun_tool(self.database, call.tool, call.args, self.settings.tools,
                                                self.settings.environment)
                traced.finished(ok=outcome.ok, rows=_rows(outcome.query), result=outcome.text)
            record = CallRecord(call, outcome.ok, neutralise(outcome.text),
                                time.perf_counter() - started, outcome.tables)
            records.append(record)
            seen[key] = record
            if call.tool not in QUERY_TOOLS:
                continue
            self._count_query(outcome.ok, outcome.query)
            sql = sql_argument(call.args)
            if outcome.ok and sql is not None:
                if call.tool == "submit_sql":
                    return records, sql
                self.last_ok_sql = sql
        return records, None

    def _count_query(self, ok: bool, result: QueryResult | None) -> None:
        self.failed_streak = 0 if ok else self.failed_streak + 1
        if result is not None and result.status in TIMED_OUT:
            self.query_timeouts += 1

    async def _answer_without_call(self, completion: Completion,
                                   parsed: ParsedCompletion) -> tuple[_Answer | None, str | None]:
        """A tool turn with no call: its SQL, if any, is the answer; otherwise a corrective note."""
        sql = extract_final_sql(completion.text)
        if sql is None:
            if parsed.think_unclosed or completion.finish_reason == "length":
                return None, ("your reply was cut off before any tool call; think in a few lines, "
                              'end your thinking, then call a tool as {"tool": "<name>", "args": {...}}')
            return None, ('no tool call found in your reply; call a tool as {"tool": "<name>", '
                          '"args": {...}}, or submit your answer with submit_sql')
        with tool_span("run_query", True, {"sql": sql}, implicit=True) as traced:
            outcome = await tools.arun_tool(self.database, "run_query", {"sql": sql}, self.settings.tools,
                                            self.settings.environment)
            traced.finished(ok=outcome.ok, rows=_rows(outcome.query), result=outcome.text)
        self._count_query(outcome.ok, outcome.query)
        if not outcome.ok:
            return None, ("your reply has SQL but no tool call, so it was taken as your answer, and it "
                          f"failed:\n{outcome.text}\nFix it with run_query, then answer with submit_sql")
        self.last_ok_sql = sql
        return await self._settle(sql, EpisodeStatus.FINAL_ANSWER), None

    async def _final_turn(self) -> _Answer:
        """The answer turn: its SQL if it runs, else the last query that ran, else failure."""
        max_tokens = final_turn_tokens(self.settings, self.used, estimate_tokens(self.pending))
        completion, model_seconds = await self._complete(max_tokens)
        self.prompt += completion.text
        parsed = parse_completion(completion.text)
        sql = extract_final_sql(completion.text)
        submitted = any(call.tool == "submit_sql" for call in parsed.calls)
        status = EpisodeStatus.SUBMITTED if submitted else EpisodeStatus.FINAL_ANSWER
        await self._record_round(completion, parsed, [], list(parsed.problems), model_seconds, 0.0,
                                 final=True)
        if sql is None:
            return await self._fallback("the final answer had no SQL", None, 0.0)
        return await self._settle(sql, status)

    async def _settle(self, sql: str, status: EpisodeStatus) -> _Answer:
        """Run the answer SQL; when it fails, fall back to the last query that ran."""
        answer = await self._execute(sql, status)
        if answer.result is not None and answer.result.ok:
            return answer
        return await self._fallback(f"the answer's SQL failed ({answer.error})", sql, answer.seconds)

    async def _fallback(self, why: str, failed_sql: str | None, spent: float) -> _Answer:
        """The last query that ran without error during exploration, or a failed answer."""
        if self.last_ok_sql is not None:
            answer = await self._execute(self.last_ok_sql, EpisodeStatus.FALLBACK)
            if answer.result is not None and answer.result.ok:
                return replace(answer, status=EpisodeStatus.FALLBACK, seconds=spent + answer.seconds,
                               error=f"{why}; used the last query that ran without error instead")
            spent += answer.seconds
        return _Answer(failed_sql, EpisodeStatus.FAILED, None,
                       f"no answer: {why} and no query ran without error during exploration; "
                       "try rephrasing the question or naming the tables it is about", spent)

    async def _execute(self, sql: str, status: EpisodeStatus) -> _Answer:
        """Run the answer once for the result (result_rows rows, cut to result_bytes in the worker)."""
        started = time.perf_counter()
        result = await self.database.aquery(sql, max_rows=self.settings.result_rows,
                                            cell_limit=self.settings.result_cell_chars,
                                            byte_budget=self.settings.result_bytes)
        seconds = time.perf_counter() - started
        if result.status in TIMED_OUT:
            self.answer_timed_out = True
        if not result.ok:
            return _Answer(sql, status, result, result.error, seconds)
        tables, columns = schema_reads(await self.database.aschema(), result)
        return _Answer(sql, status, result, None, seconds, tables, columns)

    async def _record_round(self, completion: Completion, parsed: ParsedCompletion,
                            records: list[CallRecord], notes: list[str], model_seconds: float,
                            tool_seconds: float, *, final: bool = False) -> None:
        round_ = Round(
            index=len(self.rounds) + 1, final=final, completion=completion.text, think=parsed.think,
            calls=tuple(records), notes=tuple(notes), model_seconds=model_seconds,
            tool_seconds=tool_seconds, prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens, finish_reason=completion.finish_reason,
            context_tokens=self.used, cached_tokens=completion.cached_tokens,
            replica=completion.details.get("replica"),
        )
        self.rounds.append(round_)
        round_played(tool_calls=len(records), context_tokens=self.used)
        if self.on_round is not None:
            await self.on_round(round_)

    def _result(self, answer: _Answer, stop: StopReason) -> EpisodeResult:
        result = answer.result if answer.result is not None and answer.result.ok else None
        model_seconds = sum(r.model_seconds for r in self.rounds)
        return EpisodeResult(
            question=self.question, evidence=self.evidence, sql=answer.sql, status=answer.status,
            stop_reason=stop,
            columns=result.columns if result else (), rows=result.rows if result else (),
            row_count=result.total_rows if result else 0,
            truncated=(result.truncated or result.cut_to_fit) if result else False,
            error=answer.error, rounds=tuple(self.rounds), tokens=self.used,
            seconds=time.perf_counter() - self.started, model_seconds=model_seconds,
            tool_seconds=sum(r.tool_seconds for r in self.rounds) + answer.seconds,
            prompt=self.prompt, cut=result.cut if result else None,
            tables_read=answer.tables_read, columns_read=answer.columns_read,
            query_timeouts=self.query_timeouts, answer_timed_out=self.answer_timed_out,
        )

"""The episode loop: tool turns on an append-only raw prompt, then one final answer turn.

Choices beyond the protocol (agent-protocol.md), each documented where it is made:
- Every call of a reply counts, in the order written, identical calls included, as the
  reference environment runs them all: each failing run_query adds to the failed-queries
  streak (a passing one resets it; other tools neither count nor reset it), and the last query
  that ran without error is the last passing run_query in call order ([A, B, A]: A). An
  identical call is not run again: its earlier result is shown again (a read-only episode's
  database cannot change between them), so only the time differs.
- submit_sql ends the episode, as in the reference: calls after it are not run. Its SQL is the
  answer when it runs; a failing or empty submit_sql falls back to the last query that ran
  without error (status FALLBACK), like an empty or broken final answer.
- SQL written without any tool call in a tool turn is taken as the answer (StopReason.NO_CALL)
  when it runs; when it fails, its error goes back as a note and counts as a failed query.
- No tool runs in the final turn; its answer is, in this order, a submit_sql call, the last
  ```sql fence, a run_query call, or bare SELECT/WITH text (replies.read_final_sql), read whole:
  a bare statement goes on past a blank line while the text continues it, and text after it that
  is not SQL is left out with a note in the round's record.
- An answer that is missing or fails falls back to the last run_query that ran without error;
  `EpisodeResult.error` then says why the answer was not used (status FALLBACK).
- An episode whose tool turns held no call at all (nor a call it could not read) ends with
  StopReason.NEVER_CALLED, and, without an answer, an error naming the likely causes (another
  model under this name, a prompt template or chat endpoint that rebuilds the prompt).
- A database with no readable table or view (none at all, every one hidden, or none SQLite can
  read) ends the episode at once, failed (StopReason.NO_TABLES): the model is not asked.
- A completion never opens a turn: it is cut at its first chat control token before it joins
  the prompt (`<|im_start|>` is also a stop string; this catches runtimes that ignore stops).
- Each round is a `sqale.round` span and each tool call an `execute_tool` span under it
  (agent/telemetry/steps.py); the model call's span is the backend's (agent/backends/traced.py).
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
from .episode_text import BUSY_ADVICE, REPHRASE_ADVICE
from .prompt import (
    DEFAULT_PROMPTS,
    PromptSet,
    continue_prompt,
    cut_at_chat_token,
    neutralise,
    render_initial_prompt,
    render_round_message,
)
from .replies import ParsedCompletion, parse_completion, read_final_sql, sql_argument
from .sqlite import Database, QueryResult, QueryStatus, Schema
from .telemetry.gate import round_played, round_span, tool_span
from .text import replace_lone_surrogates

# Rough size of a token, only for text the runtime has not counted yet (the next user turn).
CHARS_PER_TOKEN = 4
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


@dataclass(frozen=True)
class _Submit:
    """A submit_sql call of a tool turn: its SQL (None: none given), whether it ran, its result."""

    sql: str | None
    ok: bool
    query: QueryResult | None


def never_called(rounds: int) -> str:
    """Why an episode whose tool turns held no call has no answer, and what to check."""
    return (f"no answer: the model called no tool in {rounds} rounds, so it never looked at the database. "
            "That is a problem of the model or its runtime, not of the question: another model may be "
            "served under this model's name, an Ollama Modelfile whose TEMPLATE is not the raw "
            "{{ .Prompt }} may rewrite the prompt, or a chat endpoint may rebuild it; run "
            "`sqale-agent doctor`, which asks the model one question and checks that it calls a tool")


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
                      on_round: Callable[[Round], Awaitable[None]] | None = None) -> EpisodeResult:
    """Answer `question` on `database` with the model; BackendError and cancellation propagate."""
    episode = _Episode(question, evidence, database, backend, prompts, settings, on_round)
    return await episode.play()


class _Episode:
    """The state of one run_episode call (never shared between calls)."""

    def __init__(self, question: str, evidence: str | None, database: Database,
                 backend: ModelBackend, prompts: PromptSet, settings: EpisodeSettings,
                 on_round: Callable[[Round], Awaitable[None]] | None) -> None:
        self.question, self.evidence = question, evidence
        self.database, self.backend = database, backend
        self.prompts, self.settings, self.on_round = prompts, settings, on_round
        self.tool_settings = replace(settings.tools, texts=prompts.texts)  # the authors' texts, if any
        self.prompt = ""
        self.used = 0  # episode tokens counted by the runtime, up to the end of the last completion
        self.pending = ""  # prompt text appended since then, not counted yet
        self.rounds: list[Round] = []
        self.tool_turns = 0
        self.called = False  # a tool turn held a call, or an attempt at one (a call it could not read)
        self.failed_streak = 0
        self.last_ok_sql: str | None = None
        self.query_timeouts = 0  # the model's statements that the per-query time limit stopped
        self.met_writer = False  # a statement found the database held by another program (BUSY)
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
        if self.tool_turns > 0 and not self.called:
            stop = StopReason.NEVER_CALLED
            if final.status is EpisodeStatus.FAILED:
                final = replace(final, error=never_called(len(self.rounds) - 1))
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

    def _reply(self, completion: Completion) -> str:
        """The assistant turn as the model wrote it: the prefix that opened it, then the completion."""
        # With a prefix such as "<think>\n" the completion starts inside the think block.
        return self.prompts.assistant_prefix + completion.text

    async def _tool_turn(self) -> tuple[StopReason | None, _Answer | None]:
        """One tool round; returns why exploration ended (None: go on) and an answer if one came."""
        completion, model_seconds = await self._complete(self._tool_tokens(self.pending))
        self.tool_turns += 1
        parsed = parse_completion(self._reply(completion))
        self.called = self.called or bool(parsed.calls or parsed.problems)
        records, submitted = await self._run_calls(parsed.calls)
        notes = list(parsed.problems)
        answer: _Answer | None = None
        stop: StopReason | None = None
        if submitted is not None:
            answer, stop = await self._submitted(submitted), StopReason.SUBMITTED
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
        texts = self.prompts.texts
        message = render_round_message(environment, results, notes, turns_left, texts=texts)
        if stop is None and self._tool_tokens(message) < self.settings.final_turn_min_tokens:
            stop = StopReason.TOKEN_BUDGET
        if stop is not None:
            message = render_round_message(environment, results, notes, turns_left, final=True,
                                           final_reason=stop, last_ok_sql=self.last_ok_sql, texts=texts)
        await self._record_round(completion, parsed, records, notes, model_seconds, tool_seconds)
        next_prompt = continue_prompt(self.prompt, completion.text, message, self.prompts.assistant_prefix)
        self.pending = next_prompt[len(self.prompt) + len(completion.text):]
        self.prompt = next_prompt
        return stop, None

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
            outcome = await tools.arun_tool(self.database, call.tool, call.args, self.tool_settings,
                                            self.settings.environment)
            traced.finished(ok=outcome.ok, rows=_rows(outcome.query), result=outcome.text)
        record = CallRecord(call, outcome.ok, neutralise(outcome.text), time.perf_counter() - started,
                            outcome.tables)
        return record, outcome.query

    def _note_statement(self, result: QueryResult | None) -> None:
        """What a statement of the model's met: the per-query time limit, or a writer holding the file."""
        if result is not None:
            self.query_timeouts += result.status in TIMED_OUT
            self.met_writer = self.met_writer or result.status is QueryStatus.BUSY

    def _count_query(self, ok: bool, sql: str | None) -> None:
        """One run_query's outcome in the failed streak and as the last query that ran."""
        self.failed_streak = 0 if ok else self.failed_streak + 1
        if ok and sql is not None:
            self.last_ok_sql = sql

    async def _submitted(self, submit: _Submit) -> _Answer:
        """The answer of a submit_sql: its SQL when it ran, else the last query that ran without error."""
        if submit.sql is None:
            return await self._fallback("the submit_sql call had no SQL", None, 0.0)
        if not submit.ok:
            error = submit.query.error if submit.query is not None else None
            if submit.query is not None and submit.query.status in TIMED_OUT:
                self.answer_timed_out = True
            return await self._fallback(f"the submitted SQL failed ({error or 'it did not run'})",
                                        submit.sql, 0.0)
        return await self._settle(submit.sql, EpisodeStatus.SUBMITTED)

    async def _answer_without_call(self, completion: Completion,
                                   parsed: ParsedCompletion) -> tuple[_Answer | None, str | None]:
        """A tool turn with no call: its SQL, if any, is the answer (with a note of what was left out
        after it); otherwise a corrective note."""
        final = read_final_sql(self._reply(completion))
        if final is None:
            if parsed.think_unclosed or completion.finish_reason == "length":
                return None, ("your reply was cut off before any tool call; think in a few lines, "
                              'end your thinking, then call a tool as {"tool": "<name>", "args": {...}}')
            return None, ('no tool call found in your reply; call a tool as {"tool": "<name>", '
                          '"args": {...}}, or submit your answer with submit_sql')
        sql = final.sql
        with tool_span("run_query", True, {"sql": sql}, implicit=True) as traced:
            outcome = await tools.arun_tool(self.database, "run_query", {"sql": sql}, self.tool_settings,
                                            self.settings.environment)
            traced.finished(ok=outcome.ok, rows=_rows(outcome.query), result=outcome.text)
        self._note_statement(outcome.query)
        self._count_query(outcome.ok, sql)
        if not outcome.ok:
            return None, ("your reply has SQL but no tool call, so it was taken as your answer, and it "
                          f"failed:\n{outcome.text}\nFix it with run_query, then answer with submit_sql")
        return await self._settle(sql, EpisodeStatus.FINAL_ANSWER), final.note()

    async def _final_turn(self) -> _Answer:
        """The answer turn: its SQL if it runs, else the last query that ran, else failure."""
        max_tokens = final_turn_tokens(self.settings, self.used, estimate_tokens(self.pending))
        completion, model_seconds = await self._complete(max_tokens)
        self.prompt += completion.text
        parsed = parse_completion(self._reply(completion))
        final = read_final_sql(self._reply(completion))
        submitted = any(call.tool == "submit_sql" for call in parsed.calls)
        status = EpisodeStatus.SUBMITTED if submitted else EpisodeStatus.FINAL_ANSWER
        notes = list(parsed.problems)
        if final is not None and (dropped := final.note()) is not None:
            notes.append(dropped)
        await self._record_round(completion, parsed, [], notes, model_seconds, 0.0, final=True)
        if final is None:
            return await self._fallback("the final answer had no SQL", None, 0.0)
        return await self._settle(final.sql, status)

    async def _settle(self, sql: str, status: EpisodeStatus) -> _Answer:
        """Run the answer SQL; when it fails, fall back to the last query that ran."""
        answer = await self._execute(sql, status)
        if answer.result is not None and answer.result.ok:
            return answer
        return await self._fallback(f"the answer's SQL failed ({answer.error})", sql, answer.seconds)

    async def _fallback(self, why: str, failed_sql: str | None, spent: float) -> _Answer:
        """The last query that ran without error during exploration, or a failed answer (saying to ask
        again later when a writer held the database: rephrasing cannot help then)."""
        if self.last_ok_sql is not None:
            answer = await self._execute(self.last_ok_sql, EpisodeStatus.FALLBACK)
            if answer.result is not None and answer.result.ok:
                return replace(answer, status=EpisodeStatus.FALLBACK, seconds=spent + answer.seconds,
                               error=f"{why}; used the last query that ran without error instead")
            spent += answer.seconds
        advice = BUSY_ADVICE if self.met_writer else REPHRASE_ADVICE
        return _Answer(failed_sql, EpisodeStatus.FAILED, None,
                       f"no answer: {why} and no query ran without error during exploration; {advice}", spent)

    async def _execute(self, sql: str, status: EpisodeStatus) -> _Answer:
        """Run the answer once for the result (result_rows rows, cut to result_bytes in the worker)."""
        started = time.perf_counter()
        result = await self.database.aquery(sql, max_rows=self.settings.result_rows,
                                            cell_limit=self.settings.result_cell_chars,
                                            byte_budget=self.settings.result_bytes)
        seconds = time.perf_counter() - started
        if result.status in TIMED_OUT:
            self.answer_timed_out = True
        self.met_writer = self.met_writer or result.status is QueryStatus.BUSY
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

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
- `finish_now` (an event the caller sets when time is nearly up: the question's time limit, or a
  host that will not call again) ends exploration: before a tool turn, or by cutting that turn's
  model request, the unanswered user turn becomes the final one in the words of a spent tool-turn
  budget (StopReason.TIME_UP), so the model answers with what it has, as it was trained to.
- Tokens are counted and each turn's share given as agent/engine_fit.py says.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import anyio

from .backends.base import Completion, ModelBackend
from .engine_fit import context_after, estimate_tokens, final_turn_tokens, tool_turn_tokens
from .episode import (
    CallRecord,
    EpisodeResult,
    EpisodeSettings,
    EpisodeStatus,
    Round,
    StopReason,
)
from .episode_calls import EpisodeCalls
from .episode_text import never_called
from .final_sql import read_final_sql
from .prompt import (
    DEFAULT_PROMPTS,
    PromptSet,
    continue_prompt,
    cut_at_chat_token,
    render_initial_prompt,
    render_round_message,
)
from .replies import ParsedCompletion, parse_completion
from .sql_answer import Answer, Settling
from .sqlite import Database
from .telemetry.gate import round_played, round_span
from .text import replace_lone_surrogates

DEFAULT_EPISODE_SETTINGS = EpisodeSettings()


async def run_episode(
    question: str,
    database: Database,
    backend: ModelBackend,
    *,
    evidence: str | None = None,
    prompts: PromptSet = DEFAULT_PROMPTS,
    settings: EpisodeSettings = DEFAULT_EPISODE_SETTINGS,
    on_round: Callable[[Round], Awaitable[None]] | None = None,
    finish_now: anyio.Event | None = None,
) -> EpisodeResult:
    """Answer `question` on `database` with the model; BackendError and cancellation propagate.

    Once `finish_now` is set, the next tool turn (or the one whose request is under way) gives way
    to the final turn.
    """
    episode = _Episode(question, evidence, database, backend, prompts, settings, on_round, finish_now)
    return await episode.play()


class _Episode(EpisodeCalls):
    """The state of one run_episode call (never shared between calls)."""

    def __init__(
        self,
        question: str,
        evidence: str | None,
        database: Database,
        backend: ModelBackend,
        prompts: PromptSet,
        settings: EpisodeSettings,
        on_round: Callable[[Round], Awaitable[None]] | None,
        finish_now: anyio.Event | None = None,
    ) -> None:
        self.question, self.evidence = question, evidence
        self.finish_now = finish_now
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
        self.answers = Settling(database, settings)  # also keeps the last query that ran without error
        self.query_timeouts = 0  # the model's statements that the per-query time limit stopped
        self.started = time.perf_counter()

    async def play(self) -> EpisodeResult:
        """Tool turns until a budget ends them (or an answer arrives), then the final turn."""
        # Nothing to explore: say so at once rather than let the model guess for seven rounds.
        empty = (await self.database.aschema()).no_readable_tables()
        if empty is not None:
            return self._result(Answer(None, EpisodeStatus.FAILED, None, empty, 0.0), StopReason.NO_TABLES)
        self.prompt = self.pending = render_initial_prompt(
            self.prompts, self.question, self.evidence, environment=self.settings.environment
        )
        stop: StopReason | None = None
        if self.settings.max_tool_turns <= 0:
            stop = StopReason.TOOL_TURNS
        elif self._tool_tokens(self.pending) < self.settings.final_turn_min_tokens:
            stop = StopReason.TOKEN_BUDGET
        if stop is not None:
            self.prompt = self.pending = render_initial_prompt(
                self.prompts,
                self.question,
                self.evidence,
                final=True,
                final_reason=stop,
                environment=self.settings.environment,
            )
        while stop is None:
            with round_span(len(self.rounds) + 1, final=False):
                stop, answer = await self._tool_turn()
            if answer is not None and stop is not None:  # an answer always comes with its reason
                return self._result(answer, stop)
        with round_span(len(self.rounds) + 1, final=True):
            final = await self._final_turn()
        if self.tool_turns > 0 and not self.called and stop is not StopReason.TIME_UP:
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
                self.prompts,
                self.question,
                self.evidence,
                final=True,
                final_reason=spent,
                environment=environment,
            )
            return
        last = self.rounds[-1]
        results = [(record.call, record.text) for record in last.calls]
        message = render_round_message(
            environment,
            results,
            list(last.notes),
            self.settings.max_tool_turns - self.tool_turns,
            final=True,
            final_reason=spent,
            last_ok_sql=self.answers.last_ok_sql,
            texts=self.prompts.texts,
        )
        answered = self.prompt[: len(self.prompt) - len(self.pending)]  # up to the last completion
        self.prompt = continue_prompt(answered, "", message, self.prompts.assistant_prefix)
        self.pending = self.prompt[len(answered) :]

    async def _tool_turn(self) -> tuple[StopReason | None, Answer | None]:
        """One tool round; returns why exploration ended (None: go on) and an answer if one came."""
        made = await self._complete_unless_finishing(self._tool_tokens(self.pending))
        if made is None:  # told to answer now: the final turn comes next
            self._final_now()
            return StopReason.TIME_UP, None
        completion, model_seconds = made
        self.tool_turns += 1
        parsed = parse_completion(self._reply(completion))
        self.called = self.called or bool(parsed.calls or parsed.problems)
        records, submitted = await self._run_calls(parsed.calls)
        notes = list(parsed.problems)
        answer: Answer | None = None
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
            message = render_round_message(
                environment,
                results,
                notes,
                turns_left,
                final=True,
                final_reason=stop,
                last_ok_sql=self.answers.last_ok_sql,
                texts=texts,
            )
        await self._record_round(completion, parsed, records, notes, model_seconds, tool_seconds)
        next_prompt = continue_prompt(self.prompt, completion.text, message, self.prompts.assistant_prefix)
        self.pending = next_prompt[len(self.prompt) + len(completion.text) :]
        self.prompt = next_prompt
        return stop, None

    async def _final_turn(self) -> Answer:
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
            return await self.answers.fallback("the final answer had no SQL", None, 0.0)
        return await self.answers.settle(final.sql, status)

    async def _record_round(
        self,
        completion: Completion,
        parsed: ParsedCompletion,
        records: list[CallRecord],
        notes: list[str],
        model_seconds: float,
        tool_seconds: float,
        *,
        final: bool = False,
    ) -> None:
        round_ = Round(
            index=len(self.rounds) + 1,
            final=final,
            completion=completion.text,
            think=parsed.think,
            calls=tuple(records),
            notes=tuple(notes),
            model_seconds=model_seconds,
            tool_seconds=tool_seconds,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            finish_reason=completion.finish_reason,
            context_tokens=self.used,
            cached_tokens=completion.cached_tokens,
            replica=completion.details.get("replica"),
        )
        self.rounds.append(round_)
        round_played(tool_calls=len(records), context_tokens=self.used)
        if self.on_round is not None:
            await self.on_round(round_)

    def _result(self, answer: Answer, stop: StopReason) -> EpisodeResult:
        result = answer.result if answer.result is not None and answer.result.ok else None
        model_seconds = sum(r.model_seconds for r in self.rounds)
        return EpisodeResult(
            question=self.question,
            evidence=self.evidence,
            sql=answer.sql,
            status=answer.status,
            stop_reason=stop,
            columns=result.columns if result else (),
            rows=result.rows if result else (),
            row_count=result.total_rows if result else 0,
            truncated=(result.truncated or result.cut_to_fit) if result else False,
            error=answer.error,
            rounds=tuple(self.rounds),
            tokens=self.used,
            seconds=time.perf_counter() - self.started,
            model_seconds=model_seconds,
            tool_seconds=sum(r.tool_seconds for r in self.rounds) + answer.seconds,
            prompt=self.prompt,
            cut=result.cut if result else None,
            tables_read=answer.tables_read,
            columns_read=answer.columns_read,
            query_timeouts=self.query_timeouts,
            answer_timed_out=self.answers.timed_out,
        )

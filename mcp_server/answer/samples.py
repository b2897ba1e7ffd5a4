"""A question's samples on the server: each run in its slot (its token's quota, a worker, a runtime
slot) with its rounds and its end told as progress (`SampleProgress`), and the answer a finished
episode makes (`answer_from_episode`, its compact trace, the vote's fields, whether it answered early).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from agent import (
    ClippedText,
    CompareLimits,
    EpisodeResult,
    EpisodeStatus,
    Question,
    Round,
    SampleBackends,
    SampledAnswer,
    SampleRun,
    SampleSettings,
    StopReason,
    Tally,
    clip,
    cut_note,
    json_cell,
    last_reply_excerpt,
    plural,
    progress_message,
    run_episode,
    sample_question,
    waiting_message,
)

from ..config.limits import limits_hit
from ..ongoing import Ongoing, ProgressClock, ReportProgress
from ..serving.access import Caller
from ..serving.quotas import token_waiting_message
from ..state import ServerState
from .output import AnsweredEarly, AnswerOutput, Candidate, RoundPrompt, TraceEntry

COMPARE_MAX_ROWS = 10_000  # a result with more rows does not vote (memory: K results are held)
TRACE_ARG_CHARS = 2_000
SUMMARY_CHARS = 160


async def run_samples(
    state: ServerState, caller: Caller, question: Question, samples: int, *, early_stop: bool, work: Ongoing
) -> SampledAnswer:
    """Run the question's K `samples` (one slot each, within the server's limits) and choose the answer.

    Every round any sample plays is appended to the question's rounds as it ends (what a
    cancelled question did); the question hears of each round and finished sample, and may tell
    the samples to finish now (--one-call-answers).
    """
    settings = state.settings
    progress = SampleProgress(samples, state.episode_settings.max_tool_turns, work.report)

    @asynccontextmanager
    async def slot(k: int) -> AsyncIterator[None]:
        # Each sample is an episode like any other: it takes a unit of its token's quota and keeps
        # its runtime slot for all its rounds (on one slot the samples run one after another).
        async with state.episode_turn(
            caller,
            on_token_wait=partial(progress.token_waiting, k),
            on_worker_wait=progress.queued,
            on_slot_wait=partial(progress.waiting, k),
        ):
            yield

    previous: dict[int, Round] = {}  # each sample's last round, for the prompt-cache watch

    async def on_round(k: int, done: Round) -> None:
        work.rounds.append(done)
        work.touch()
        state.watch_round(previous.get(k), done)
        previous[k] = done
        await progress.round(k, done)

    async def on_finished(run: SampleRun, tally: Tally) -> None:
        work.samples_finished += 1
        work.touch()
        await progress.finished(run, tally)

    how = SampleSettings(
        limits=CompareLimits(timeout=settings.query_timeout, max_rows=COMPARE_MAX_ROWS),
        episode_timeout=settings.episode_timeout,
        early_stop=early_stop,
    )
    backends = SampleBackends.seeded(state.backend, samples, settings.seed)
    return await sample_question(
        question,
        backends,
        run_episode,
        how,
        slot=slot,
        on_round=on_round,
        on_finished=on_finished,
        finish_now=work.finish_now,
    )


def queued_message(limit: float, samples: int = 1) -> str:
    """Progress text for a call waiting for free slots."""
    if samples == 1:
        return (
            f"queued: {plural(int(limit), 'question is', 'questions are')} being answered already "
            "(--max-concurrent)"
        )
    return (
        f"queued: the {samples} samples of this question need {samples} of the {limit:g} "
        "episode slots (--max-concurrent); they start as slots free up"
    )


class SampleProgress:
    """Progress over all K samples: rounds add up; one sample keeps today's messages exactly."""

    def __init__(self, samples: int, max_turns: int, report: ReportProgress) -> None:
        self.samples, self.max_turns = samples, max_turns
        self.clock = ProgressClock(report)
        # A finished sample counts one step past its last possible round (the final answer's).
        self.steps = max_turns + 2 if samples > 1 else max_turns + 1
        self.done = [0] * samples
        self.told_queued = False

    @property
    def total(self) -> int:
        """Progress total: steps of all samples."""
        return self.samples * self.steps

    async def queued(self, slots: float) -> None:
        """A sample waits for a slot (said once per question)."""
        if not self.told_queued:
            self.told_queued = True
            await self.clock.send(sum(self.done), self.total, queued_message(slots, self.samples))

    async def token_waiting(self, k: int, ahead: int) -> None:
        """Sample k waits behind its own token's earlier episodes."""
        await self.clock.send(sum(self.done), self.total, self._prefix(k) + token_waiting_message(ahead))

    async def waiting(self, k: int, ahead: int) -> None:
        """Sample k waits for a runtime slot with `ahead` episodes before it."""
        await self.clock.send(sum(self.done), self.total, self._prefix(k) + waiting_message(ahead))

    async def round(self, k: int, played: Round) -> None:
        """Sample k played a round."""
        self.done[k] = played.index
        await self.clock.send(
            sum(self.done), self.total, self._prefix(k) + progress_message(played, self.max_turns)
        )

    async def finished(self, run: SampleRun, tally: Tally) -> None:
        """A sample finished; say how it ended and whether a majority now agrees."""
        if self.samples == 1:
            return
        k = run.index
        self.done[k] = self.steps
        if run.skipped:
            how = "not started: the question answered with the samples that had"
        elif run.result is None:
            how = "out of time"
        elif not run.ran:
            how = "nothing runnable"
        else:
            how = f"{run.result.status.value}, {plural(run.result.row_count, 'row')}"
        groups = tally.groups()
        agree = f"; {groups[0].votes} of {self.samples} agree so far" if groups else ""
        stopping = (
            "; a majority agrees: stopping the others"
            if (tally.has_majority() and len(tally.arrivals) < self.samples)
            else ""
        )
        await self.clock.send(sum(self.done), self.total, f"{self._prefix(k)}finished: {how}{agree}{stopping}")

    def _prefix(self, k: int) -> str:
        """`sample 2/5 ` before sample k's lines; nothing with one sample."""
        return "" if self.samples == 1 else f"sample {k + 1}/{self.samples} "


def trace_of(rounds: Sequence[Round]) -> list[TraceEntry]:
    """The compact trace of `rounds` (of a finished episode, or what a cancelled one played)."""
    return [
        TraceEntry(
            round=r.index,
            tool=record.call.tool,
            arguments=_clipped_args(record.call.args),
            ok=record.ok,
            summary=call_summary(record.text),
        )
        for r in rounds
        for record in r.calls
    ]


def prompt_cache_of(rounds: Sequence[Round]) -> list[RoundPrompt]:
    """The compact per-round prompt and cache figures of `rounds`."""
    # A prompt of 0 tokens is one the engine did not count (llama-cpp-python's streams).
    return [
        RoundPrompt(
            round=r.index,
            prompt=r.prompt_tokens or "unknown",
            cached="unknown" if r.cached_tokens is None else r.cached_tokens,
            evaluated="unknown" if r.evaluated_tokens is None else r.evaluated_tokens,
        )
        for r in rounds
    ]


def answer_from_episode(
    result: EpisodeResult, *, database: str, model: str, max_rows: int, queued_seconds: float = 0.0
) -> AnswerOutput:
    """The structured answer for one finished episode."""
    kept = result.rows[:max_rows]
    rows = [[json_cell(c) for c in row] for row in kept]
    truncated = result.truncated or len(result.rows) > max_rows
    # Rows left out because they did not fit the byte budget are result_bytes, not max_rows.
    rows_cut_to_fit = result.cut is not None and result.cut.rows_cut
    capped = len(result.rows) > max_rows or (result.row_count > len(result.rows) and not rows_cut_to_fit)
    hit = limits_hit(
        truncated=capped,
        cut_to_fit=result.cut is not None,
        clipped_cells=any(isinstance(c, ClippedText) for row in kept for c in row),
        query_timeouts=result.query_timeouts,
        answer_timed_out=result.answer_timed_out,
    )
    return AnswerOutput(
        database=database,
        question=result.question,
        sql=result.sql,
        columns=list(result.columns),
        rows=rows,
        row_count=result.row_count,
        truncated=truncated,
        note=cut_note(result.cut, len(rows)) if result.cut is not None else None,
        status=result.status.value,
        error=result.error,
        stop_reason=result.stop_reason.value,
        rounds=len(result.rounds),
        tool_calls=result.tool_calls,
        tokens=result.tokens,
        seconds=round(result.seconds, 3),
        queued_seconds=round(queued_seconds, 3),
        model=model,
        trace=trace_of(result.rounds),
        limits_hit=hit,
        prompt_cache=prompt_cache_of(result.rounds),
        tables=list(result.tables_read),
        columns_read=columns_by_table(result.columns_read),
        last_reply=last_reply_excerpt(result) if result.status is EpisodeStatus.FAILED else None,
    )


def with_vote(answer: AnswerOutput, asked: SampledAnswer) -> AnswerOutput:
    """The answer with what its samples' vote says: agreement always, the rest with several samples."""
    if asked.samples == 1:
        return answer.model_copy(update={"agreement": asked.agreement})
    fields = asked.vote_fields()
    return answer.model_copy(update={**fields, "candidates": [Candidate(**c) for c in fields["candidates"]]})


def answered_early(asked: SampledAnswer, told_to_finish: bool, max_rounds: int) -> AnsweredEarly | None:
    """Whether and how the question answered early; None when every sample ran its course."""
    runs = list(asked.outcome.results.values())
    early = [run for run in runs if run.result is not None and run.result.stop_reason is StopReason.TIME_UP]
    if not early and not any(run.skipped for run in runs):
        return None
    chosen = asked.chosen.result if asked.chosen is not None else None
    return AnsweredEarly(
        reason="call_budget" if told_to_finish else "time_limit",
        samples_answered=sum(1 for run in runs if run.result is not None),
        samples=asked.samples,
        rounds=len(chosen.rounds) if chosen is not None else 0,
        max_rounds=max_rounds,
    )


def columns_by_table(pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """(table, column) pairs as table -> sorted columns."""
    grouped: dict[str, list[str]] = {}
    for table, column in pairs:
        grouped.setdefault(table, []).append(column)
    return {t: sorted(set(cols), key=str.casefold) for t, cols in grouped.items()}


def call_summary(text: str) -> str:
    """One line about a tool result: its closing note (`[...]`, or `... (...)` in the trained
    environment's texts) if it has one, else its first line."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1].strip()
    note = (last.startswith("[") and last.endswith("]")) or (last.startswith("... (") and last.endswith(")"))
    chosen = last if len(lines) > 1 and note else lines[0]
    return clip(chosen, SUMMARY_CHARS)


def _clipped_args(args: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: (clip(v, TRACE_ARG_CHARS) if isinstance(v, str) and len(v) > TRACE_ARG_CHARS else v)
        for k, v in args.items()
    }

"""K samples of one question on the server: a slot and a seed each, progress for all, the vote."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from functools import partial

import anyio

from agent.backends.slots import waiting_message
from agent.episode import EpisodeResult, EpisodeStatus, Round
from agent.episode_text import progress_message
from agent.loop import run_episode
from agent.sqlite import QueryResult
from agent.text import plural
from agent.voting import (
    CompareLimits,
    MatchRule,
    Tally,
    VoteOutcome,
    episode_vote,
    run_samples,
    sample_seeds,
    seeded_backends,
)

from ..runtime import ServerRuntime
from ..serving.access import LOCAL_CALLER, Caller
from ..serving.quotas import token_waiting_message
from .output import Candidate, queued_message

ReportProgress = Callable[[float, float | None, str | None], Awaitable[None]]
COMPARE_MAX_ROWS = 10_000  # a result with more rows does not vote (memory: K results are held)


@dataclass(frozen=True)
class SampleRun:
    """One finished sample."""

    index: int
    seed: int | None
    result: EpisodeResult | None  # None: it ran past the episode timeout
    queued_seconds: float


@dataclass(frozen=True)
class QuestionAsked:
    """A checked call: what to ask, where, how many times."""

    question: str
    alias: str
    evidence: str | None  # the notes and the caller's evidence, as the model reads them
    samples: int
    caller: Caller = LOCAL_CALLER  # whose quota each sample's episode counts against


class SampleProgress:
    """Progress over all K samples: rounds add up; one sample keeps today's messages exactly."""

    def __init__(self, samples: int, max_turns: int, report: ReportProgress) -> None:
        self.samples, self.max_turns, self.report = samples, max_turns, report
        # A finished sample counts one step past its last possible round, so every
        # notification moves the total forward (MCP progress must increase).
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
            await self.report(0, self.total, queued_message(slots, self.samples))

    async def token_waiting(self, k: int, ahead: int) -> None:
        """Sample k waits behind its own token's earlier episodes."""
        prefix = "" if self.samples == 1 else f"sample {k + 1}/{self.samples} "
        await self.report(sum(self.done), self.total, prefix + token_waiting_message(ahead))

    async def waiting(self, k: int, ahead: int) -> None:
        """Sample k waits for a runtime slot with `ahead` episodes before it."""
        if self.samples == 1:
            await self.report(0, self.total, waiting_message(ahead))
            return
        await self.report(sum(self.done), self.total,
                          f"sample {k + 1}/{self.samples} {waiting_message(ahead)}")

    async def round(self, k: int, played: Round) -> None:
        """Sample k played a round."""
        line = progress_message(played, self.max_turns)
        if self.samples == 1:
            await self.report(played.index, self.total, line)
            return
        self.done[k] = played.index
        await self.report(sum(self.done), self.total, f"sample {k + 1}/{self.samples} {line}")

    async def finished(self, k: int, run: SampleRun, tally: Tally) -> None:
        """Sample k finished; say how it ended and whether a majority now agrees."""
        if self.samples == 1:
            return
        self.done[k] = self.steps
        if run.result is None:
            how = "out of time"
        elif run.result.sql is None or run.result.status is EpisodeStatus.FAILED:
            how = "nothing runnable"
        else:
            how = f"{run.result.status.value}, {plural(run.result.row_count, 'row')}"
        groups = tally.groups()
        agree = f"; {groups[0].votes} of {self.samples} agree so far" if groups else ""
        stopping = "; a majority agrees: stopping the others" if (
            tally.has_majority() and len(tally.arrivals) < self.samples) else ""
        await self.report(sum(self.done), self.total,
                          f"sample {k + 1}/{self.samples} finished: {how}{agree}{stopping}")


async def run_question(runtime: ServerRuntime, asked: QuestionAsked, report_progress: ReportProgress,
                       played: list[Round] | None = None) -> VoteOutcome[SampleRun]:
    """Run the K samples (one slot each) and vote; with one sample, no comparison query is run.

    Every round any sample plays is appended to `played` as it ends (what a cancelled question did).
    """
    settings = runtime.settings
    database = runtime.databases[asked.alias]
    seeds = sample_seeds(asked.samples, settings.seed)
    backends = seeded_backends(runtime.backend, seeds)
    progress = SampleProgress(asked.samples, runtime.episode_settings.max_tool_turns, report_progress)
    limits = CompareLimits(timeout=settings.query_timeout, max_rows=COMPARE_MAX_ROWS)
    executed: dict[str, QueryResult] = {}

    async def on_round(k: int, done: Round) -> None:
        if played is not None:
            played.append(done)
        await progress.round(k, done)

    async def one(k: int) -> tuple[SampleRun, Hashable | None]:
        queued = time.perf_counter()
        # Each sample is an episode like any other: it takes a unit of its token's quota and keeps
        # its runtime slot for all its rounds (on one slot the samples run one after another); its
        # timeout starts with the slot.
        async with runtime.episode_turn(asked.caller, on_token_wait=partial(progress.token_waiting, k),
                                        on_worker_wait=progress.queued,
                                        on_slot_wait=partial(progress.waiting, k)):
            waited = time.perf_counter() - queued
            with anyio.move_on_after(settings.episode_timeout) as deadline:
                result = await run_episode(
                    asked.question, database, backends[k], evidence=asked.evidence,
                    prompts=runtime.prompts, settings=runtime.episode_settings,
                    on_round=partial(on_round, k))
        if deadline.cancelled_caught:
            return SampleRun(k, seeds[k], None, waited), None
        key = None
        if asked.samples > 1:
            key = await episode_vote(database, result, limits, MatchRule.MULTISET, executed)
        return SampleRun(k, seeds[k], result, waited), key

    return await run_samples(asked.samples, one, on_finished=progress.finished)


def chosen_run(outcome: VoteOutcome[SampleRun]) -> SampleRun | None:
    """The answer: the winner's sample, else the earliest that answered at all, else None."""
    if outcome.winner is not None:
        return outcome.results[outcome.winner]
    answered = [run for _, run in sorted(outcome.results.items()) if run.result is not None]
    runnable = [run for run in answered
                if run.result is not None and run.result.status is not EpisodeStatus.FAILED]
    chosen = runnable or answered
    return chosen[0] if chosen else None


def candidates_of(outcome: VoteOutcome[SampleRun]) -> list[Candidate]:
    """Each distinct result with its votes, most votes first (from the earliest sample of each)."""
    out = []
    for group in outcome.groups:
        result = outcome.results[group.members[0]].result
        assert result is not None  # only answered samples vote
        out.append(Candidate(sql=result.sql, votes=group.votes, row_count=result.row_count,
                             status=result.status.value))
    return out

"""K samples of one question on the server: its limits and progress around agent.sampling."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

import anyio

from agent.backends.slots import waiting_message
from agent.episode import Round
from agent.episode_text import progress_message
from agent.loop import run_episode
from agent.sampling import Question, SampleBackends, SampledAnswer, SampleRun, SampleSettings, sample_question
from agent.text import plural
from agent.voting import CompareLimits, Tally

from ..ongoing import Ongoing
from ..serving.access import LOCAL_CALLER, Caller
from ..serving.quotas import token_waiting_message
from ..state import ServerState
from .answer_text import queued_message

ReportProgress = Callable[[float, float | None, str | None], Awaitable[None]]
COMPARE_MAX_ROWS = 10_000  # a result with more rows does not vote (memory: K results are held)


@dataclass(frozen=True)
class QuestionCall:
    """A checked call: what to ask, where, how many times."""

    question: str
    alias: str
    evidence: str | None  # the notes and the caller's evidence, as the model reads them
    samples: int
    caller: Caller = LOCAL_CALLER  # whose quota each sample's episode counts against
    given_evidence: str | None = None  # the caller's own evidence (a verified answer must fit it)
    notes: str | None = None  # the database's notes, as the evidence starts with them
    use_verified: bool = True  # False: the caller asked for the model's answer (`verified: false`)
    # Every sample runs to the end (no early stop): the person may be asked to choose among all
    # their results, and a minority's may be the right one.
    run_all: bool = False


class ProgressClock:
    """Sends a call's progress notifications, each strictly above the one before (MCP's MUST).

    `reached` is the count of steps done. When it has not moved past the last value sent (a
    wait reported again, a second sample waiting, a report racing another), the value goes a
    fraction further, staying below the next whole step: n/(n+1) past it for the n-th repeat.
    One lock orders the sends, so concurrent samples cannot overtake each other on the wire.
    """

    def __init__(self, report: ReportProgress) -> None:
        self.report = report
        self.sent: float | None = None  # the last value sent
        self._repeats = 0  # notifications since the count last moved
        # fast_acquire (anyio 4.5; mcp 2.3 needs 4.9): no yield when no other send is under way, so
        # a report nobody listens to does not let another sample overtake this one in a queue.
        self._lock = anyio.Lock(fast_acquire=True)

    async def send(self, reached: int, total: int, message: str) -> None:
        """Report `message` at `reached` of `total` steps, or just past the last value sent."""
        async with self._lock:
            if self.sent is None or reached > self.sent:
                value: float = reached
                self._repeats = 0
            else:
                self._repeats += 1
                value = math.floor(self.sent) + self._repeats / (self._repeats + 1)
            self.sent = value
            await self.report(value, total, message)


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
        await self.clock.send(sum(self.done), self.total,
                              self._prefix(k) + progress_message(played, self.max_turns))

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
        stopping = "; a majority agrees: stopping the others" if (
            tally.has_majority() and len(tally.arrivals) < self.samples) else ""
        await self.clock.send(sum(self.done), self.total,
                              f"{self._prefix(k)}finished: {how}{agree}{stopping}")

    def _prefix(self, k: int) -> str:
        """`sample 2/5 ` before sample k's lines; nothing with one sample."""
        return "" if self.samples == 1 else f"sample {k + 1}/{self.samples} "


async def run_question(server_state: ServerState, asked: QuestionCall, report_progress: ReportProgress,
                       played: list[Round] | None = None, *, work: Ongoing | None = None) -> SampledAnswer:
    """Run the K samples (one slot each, within the server's limits) and choose the answer.

    Every round any sample plays is appended to `played` as it ends (what a cancelled question did).
    `work`, the question as the calls waiting on it see it, hears of each round and finished sample,
    and may tell the samples to finish now (--one-call-answers).
    """
    settings = server_state.settings
    progress = SampleProgress(asked.samples, server_state.episode_settings.max_tool_turns, report_progress)

    @asynccontextmanager
    async def slot(k: int) -> AsyncIterator[None]:
        # Each sample is an episode like any other: it takes a unit of its token's quota and keeps
        # its runtime slot for all its rounds (on one slot the samples run one after another).
        async with server_state.episode_turn(asked.caller, on_token_wait=partial(progress.token_waiting, k),
                                        on_worker_wait=progress.queued,
                                        on_slot_wait=partial(progress.waiting, k)):
            yield

    previous: dict[int, Round] = {}  # each sample's last round, for the prompt-cache watch

    async def on_round(k: int, done: Round) -> None:
        if played is not None:
            played.append(done)
        if work is not None:
            work.touch()
        server_state.watch_round(previous.get(k), done)
        previous[k] = done
        await progress.round(k, done)

    async def on_finished(run: SampleRun, tally: Tally) -> None:
        if work is not None:
            work.samples_finished += 1
            work.touch()
        await progress.finished(run, tally)

    question = Question(asked.question, server_state.databases[asked.alias], asked.evidence,
                        server_state.episode_settings, server_state.prompts)
    how = SampleSettings(limits=CompareLimits(timeout=settings.query_timeout, max_rows=COMPARE_MAX_ROWS),
                      episode_timeout=settings.episode_timeout, early_stop=not asked.run_all)
    backends = SampleBackends.seeded(server_state.backend, asked.samples, settings.seed)
    return await sample_question(question, backends, run_episode, how, slot=slot, on_round=on_round,
                                 on_finished=on_finished, finish_now=None if work is None else work.finish_now)

"""Ask one question K times and choose the answer: the one place `ask`, the server and `eval` do it.

Sample k is one episode with its own seed (seed + k) on its own seeded backend, holding a
runtime slot for all its rounds. With K > 1 (or when the caller scores every answer, as
`eval` does) each answer's SQL runs again whole and the samples vote (voting.py).

The answer is chosen by one rule, the same for every front end:
1. the earliest sample of the group with the most votes (a tie: the group whose first sample
   is earliest);
2. no sample voted: the earliest sample whose SQL ran (its result was too large to compare);
3. none ran: the earliest sample that finished, so its failure says why nothing worked;
4. none finished (every sample ran out of time): no answer.
"Earliest" is by sample index, never by finishing time, so timing never changes the answer.

`agreement` is the share of the K samples whose result equals the answer's: 1.0 for a single
sample whose SQL ran; None when the answer has no SQL that ran (there is nothing to agree
on), and with K > 1 when its result could not be compared with the others.

Answering early, the way the model was trained (agent/loop.py's `finish_now`): a sample whose
episode timeout is near (its reserve for the final turn: ANSWER_RESERVE_SHARE of the timeout, or
twice its longest model request if more) gets its final turn now instead of running out of time;
a question told to finish (`finish_now`, the server's one-call answers) gives every sample still
exploring its final turn, and starts no sample still waiting for its slot (`SampleRun.skipped`)
once one has started (the first to start then answers with what it has, if it must at once).
The vote counts the samples that finished.

The front ends keep only what is theirs: progress, their limits (the server's admission and
episode timeout come in as `slot` and `SampleSettings`) and the shape of what they print. Each
sample is an `invoke_agent` span (agent/telemetry/steps.py) under the front end's question span.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Hashable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from .backends.base import ModelBackend
from .episode import EpisodeResult, EpisodeSettings, Round
from .errors import BackendError
from .sample_episode import EpisodeFn, beside, play_sample
from .sqlite import Database, QueryResult
from .telemetry.gate import Untraced, episode_span
from .text import plural
from .untrusted import sql_block
from .voting import CompareLimits, Comparison, MatchRule, Tally, VoteOutcome, ran_sql, run_samples

if TYPE_CHECKING:  # agent.prompt loads the tools; this module only passes a PromptSet along
    from .prompt import PromptSet
    from .telemetry.spans import QuestionTrace
    from .telemetry.steps import EpisodeTrace

SEED_RANGE = 2**31 - 1024  # base seeds drawn when none is given stay below 2**31 with seed + k
OTHER_ANSWERS_SHOWN = 3


def sample_seeds(samples: int, seed: int | None) -> tuple[int | None, ...]:
    """Seeds of K samples: seed + k; one sample keeps `seed` (None: the runtime's own)."""
    if samples == 1:
        return (seed,)
    base = random.SystemRandom().randrange(SEED_RANGE) if seed is None else seed
    return tuple(base + k for k in range(samples))


@dataclass(frozen=True)
class SampleBackends:
    """Who answers each sample: sample k samples with seeds[k] on backends[k]."""

    seeds: tuple[int | None, ...]
    backends: tuple[ModelBackend, ...]

    @classmethod
    def seeded(cls, backend: ModelBackend, samples: int, seed: int | None) -> SampleBackends:
        """K samples of `backend` (seed + k each), sharing its connections.

        A backend that cannot set a seed answers `with_seed` with itself: the runtime's own
        randomness varies the samples.
        """
        seeds = sample_seeds(samples, seed)
        return cls(seeds, tuple(backend if s is None else backend.with_seed(s) for s in seeds))


@dataclass(frozen=True)
class Question:
    """What is asked, where, and how each of its episodes runs."""

    text: str
    database: Database
    evidence: str | None = None
    settings: EpisodeSettings = field(default_factory=EpisodeSettings)
    prompts: PromptSet | None = None  # None: the episode function's own default


@dataclass(frozen=True)
class SampleSettings:
    """How the samples of one question run and are compared."""

    rule: MatchRule = MatchRule.MULTISET
    limits: CompareLimits = field(default_factory=CompareLimits)
    early_stop: bool = True  # cancel the samples still running once a strict majority agrees
    compare_single: bool = False  # eval scores a lone sample too; ask and the server skip that query
    episode_timeout: float | None = None  # a sample past it ends with no result (the server's limit)
    keep_backend_errors: bool = False  # eval records a sample whose backend failed; the others stop


@dataclass(frozen=True)
class SampleRun:
    """One finished sample."""

    index: int
    seed: int | None
    result: EpisodeResult | None  # None: it ran out of time, or its backend failed
    compared: QueryResult | None = None  # its SQL run whole for the vote; None when not compared
    queued_seconds: float = 0.0  # time it waited for its slot
    backend_error: BackendError | None = None  # kept only with SampleSettings.keep_backend_errors
    skipped: bool = False  # never started: the question was told to finish while it waited for its slot

    @property
    def ran(self) -> bool:
        """True when the sample ended with SQL that ran."""
        return self.result is not None and ran_sql(self.result)

    @property
    def finished(self) -> bool:
        """True when the sample has an outcome to show: an episode result or its backend's failure."""
        return self.result is not None or self.backend_error is not None


def choose(outcome: VoteOutcome[SampleRun]) -> SampleRun | None:
    """The answer: the vote's winner, else the earliest that ran, else the earliest finished."""
    if outcome.winner is not None:
        return outcome.results[outcome.winner]
    runs = [run for _, run in sorted(outcome.results.items())]
    return next((run for run in runs if run.ran), None) or next((run for run in runs if run.finished), None)


@dataclass(frozen=True)
class Candidate:
    """One distinct result among the samples, as its earliest sample gave it."""

    sql: str | None
    votes: int
    row_count: int
    status: str


@dataclass(frozen=True)
class VoteSummary:
    """What the vote says about the answer, enough to tell it (the server rebuilds it from its answer)."""

    samples: int
    finished: int
    candidates: tuple[Candidate, ...]  # most votes first; the first is the answer's
    answer_ran: bool  # the answer has SQL that ran
    chosen_by_person: bool = False  # a person chose the first candidate over the vote's (moved first)


@dataclass(frozen=True)
class SampledAnswer:
    """The K samples of one question and the answer chosen among them."""

    outcome: VoteOutcome[SampleRun]
    chosen: SampleRun | None  # None: no sample finished

    @property
    def samples(self) -> int:
        """K."""
        return self.outcome.samples

    @property
    def agreement(self) -> float | None:
        """Share of the K samples agreeing with the answer (3 decimals); None: nothing to agree on."""
        if self.chosen is None or not self.chosen.ran:
            return None
        share = 1.0 if self.samples == 1 else self.outcome.agreement
        return None if share is None else round(share, 3)

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """Each distinct result with its votes, most votes first (from the earliest sample of each)."""
        out = []
        for group in self.outcome.groups:
            result = self.outcome.results[group.members[0]].result
            assert result is not None  # only samples that ran vote
            out.append(Candidate(result.sql, group.votes, result.row_count, result.status.value))
        return tuple(out)

    def summary(self) -> VoteSummary:
        """The vote, as summary_text tells it."""
        return VoteSummary(
            self.samples,
            len(self.outcome.results),
            self.candidates,
            self.chosen is not None and self.chosen.ran,
        )

    def vote_fields(self) -> dict[str, Any]:
        """The vote as JSON fields beside the answer's (ask --json, the server's answer and log)."""
        return {
            "samples": self.samples,
            "samples_finished": len(self.outcome.results),
            "agreement": self.agreement,
            "candidates": [asdict(c) for c in self.candidates],
        }


SlotFn = Callable[[int], AbstractAsyncContextManager[Any]]
RoundFn = Callable[[int, Round], Awaitable[None]]
FinishedFn = Callable[[SampleRun, Tally], Awaitable[None]]


async def sample_question(
    question: Question,
    backends: SampleBackends,
    episode: EpisodeFn,
    settings: SampleSettings = SampleSettings(),
    *,
    slot: SlotFn | None = None,
    on_round: RoundFn | None = None,
    on_finished: FinishedFn | None = None,
    comparison: Comparison | None = None,
    finish_now: anyio.Event | None = None,
) -> SampledAnswer:
    """Run the K samples (each inside `slot(k)`, its runtime slot), vote, and choose the answer.

    Our own errors (SqaleError) cancel the other samples and are raised as themselves, except
    a sample's BackendError with `keep_backend_errors`. `comparison` lets the caller reuse the
    SQL run for the vote (eval scores with it). Once `finish_now` is set, the samples exploring
    answer now and those waiting for their slot are skipped.
    """
    count = len(backends.backends)
    comparison = comparison or Comparison(question.database, settings.limits, settings.rule)
    compare = count > 1 or settings.compare_single
    options: dict[str, Any] = {} if question.prompts is None else {"prompts": question.prompts}

    traces: dict[int, EpisodeTrace | Untraced] = {}
    started = anyio.Event()  # a sample got its slot

    async def one(k: int) -> tuple[SampleRun, Hashable | None]:
        arrived = time.perf_counter()
        waited, result, failure, granted = 0.0, None, None, False
        with episode_span(k, backends.seeds[k], backends.backends[k].model) as traced:
            traces[k] = traced
            with anyio.CancelScope() as waiting:

                async def give_up() -> None:  # told to finish, a question starts no more samples
                    if finish_now is not None:
                        await finish_now.wait()
                        await started.wait()  # ... but one always runs: it answers with what it has
                        if not granted:
                            waiting.cancel()

                async def in_slot() -> EpisodeResult | None:
                    nonlocal waited, granted
                    async with slot(k) if slot is not None else nullcontext():
                        granted, waited = True, time.perf_counter() - arrived
                        started.set()
                        traced.slot_granted(waited)
                        return await play_sample(
                            episode,
                            question.text,
                            question.database,
                            backends.backends[k],
                            evidence=question.evidence,
                            settings=question.settings,
                            options=options,
                            timeout=settings.episode_timeout,
                            finish_now=finish_now,
                            reported=None if on_round is None else _for_sample(on_round, k),
                        )

                try:
                    result = await beside(give_up, in_slot)
                except BackendError as exc:
                    if not settings.keep_backend_errors:
                        raise
                    failure = exc
            skipped = waiting.cancelled_caught
            _episode_ended(traced, result, failure, skipped=skipped)
        compared, key = await comparison.vote(result) if compare and result is not None else (None, None)
        return SampleRun(k, backends.seeds[k], result, compared, waited, failure, skipped), key

    async def finished(k: int, run: SampleRun, tally: Tally) -> None:
        if on_finished is not None:
            await on_finished(run, tally)

    def stopping() -> None:  # a majority agreed: the samples still running are stopped, not failed
        for traced in traces.values():
            traced.stopped_early = True

    outcome = await run_samples(
        count, one, early_stop=settings.early_stop, on_finished=finished, on_stop=stopping
    )
    return SampledAnswer(outcome, choose(outcome))


def _episode_ended(
    traced: EpisodeTrace | Untraced,
    result: EpisodeResult | None,
    failure: BackendError | None,
    *,
    skipped: bool = False,
) -> None:
    """The episode span's outcome: the result's, the backend's failure, or the episode timeout (a
    sample skipped because its question was told to finish is no error)."""
    if skipped:
        return
    if result is not None:
        traced.finished(
            status=result.status.value,
            stop_reason=result.stop_reason.value,
            rounds=len(result.rounds),
            tool_calls=result.tool_calls,
            tokens=result.tokens,
            rows=result.row_count,
        )
    elif failure is not None:
        traced.failed(type(failure).__name__)
    else:
        traced.timed_out()


def trace_outcome(traced: QuestionTrace | Untraced, asked: SampledAnswer) -> None:
    """End the question's span with the chosen answer (ask, eval; the server ends it with its own)."""
    chosen = asked.chosen.result if asked.chosen is not None else None
    if chosen is None:  # every sample ran out of time
        traced.finish("error", "episode_timeout")
        return
    traced.finish(
        chosen.status.value,
        chosen.stop_reason.value,
        rows=chosen.row_count,
        agreement=asked.agreement,
        sql=chosen.sql,
    )


def _for_sample(on_round: RoundFn, k: int) -> Callable[[Round], Awaitable[None]]:
    async def report(played: Round) -> None:
        await on_round(k, played)

    return report


def summary_text(
    summary: VoteSummary, *, shown: int = OTHER_ANSWERS_SHOWN, fence: Callable[[str], str] = sql_block
) -> str:
    """What K samples say about the answer: how many agree, and the other answers' SQL."""
    if not summary.candidates:
        if summary.answer_ran:
            return (
                "No sample's result could be compared with the others' (too many rows, or it "
                "failed when run again): treat this answer as a guess."
            )
        return f"None of the {summary.samples} samples produced SQL that ran."
    votes = summary.candidates[0].votes
    if summary.chosen_by_person:
        lines = [f"A person chose this result, which {votes} of {summary.samples} samples gave."]
    elif votes >= 2:
        lines = [f"{votes} of {summary.samples} samples agree on this result."]
    else:
        lines = ["No two samples agree: treat this answer as a guess."]
    if summary.finished < summary.samples:
        stopped = summary.samples - summary.finished
        lines[0] += f" The other {stopped} {'was' if stopped == 1 else 'were'} stopped once a majority agreed."
    abstained = summary.finished - sum(c.votes for c in summary.candidates)
    if abstained:
        lines.append(f"{plural(abstained, 'sample')} produced nothing runnable.")
    others = summary.candidates[1:]
    if others:
        lines.append("Other answers:")
        for other in others[:shown]:
            lines.append(
                f"- {plural(other.votes, 'sample')}, {plural(other.row_count, 'row')}:\n"
                f"{fence((other.sql or '').strip())}"
            )
        if len(others) > shown:
            lines.append(f"(and {plural(len(others) - shown, 'other answer')})")
    return "\n".join(lines)

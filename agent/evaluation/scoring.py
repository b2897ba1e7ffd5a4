"""One question end to end: run the gold SQL, run K episodes, execute and compare, vote."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from ..backends.base import ModelBackend
from ..choices import AskMode, choice_of, should_ask, sources_of
from ..episode import EpisodeResult, EpisodeSettings
from ..errors import (
    BackendAuthError,
    BackendError,
    BackendResponseError,
    BackendTimeout,
    BackendUnreachable,
    ModelNotFound,
)
from ..sample_episode import EpisodeFn
from ..sampling import (
    Question,
    SampleBackends,
    SampledAnswer,
    SampleRun,
    SampleSettings,
    sample_question,
    trace_outcome,
)
from ..sqlite import Database, QueryResult, QueryStatus
from ..telemetry.gate import question_span, question_trace
from ..telemetry.names import EVAL_QUESTION
from ..voting import CompareLimits, Comparison, Tally, execute_for_comparison
from .accuracy import MatchRule, has_top_level_order_by, results_match
from .datasets import Benchmark, Example
from .hints import Hinted, HintSource
from .records import (
    BACKEND_ERROR_STATUS,
    CANCELLED_STATUS,
    ChoiceRecord,
    GoldRecord,
    Outcome,
    QuestionRecord,
    RunInfo,
    SampleRecord,
    TraceKind,
    preview_of,
    trace_of,
)

if TYPE_CHECKING:  # agent.prompt loads the tools; the evaluation imports them only to run
    from ..prompt import PromptSet

DATABASE_ERROR = "database_error"  # gold status when the database file cannot be opened
MATCH_RULES = {
    Benchmark.SPIDER: MatchRule.MULTISET,
    Benchmark.KAGGLEDBQA: MatchRule.MULTISET,
    Benchmark.BIRD: MatchRule.SET,
    Benchmark.GOLDEN: MatchRule.MULTISET,
}
_BACKEND_OUTCOMES: tuple[tuple[type[BackendError], Outcome], ...] = (
    (BackendUnreachable, Outcome.BACKEND_UNREACHABLE),
    (BackendTimeout, Outcome.BACKEND_TIMEOUT),
    (ModelNotFound, Outcome.MODEL_NOT_FOUND),
    (BackendAuthError, Outcome.BACKEND_AUTH),
    (BackendResponseError, Outcome.BACKEND_RESPONSE),
)
_QUERY_OUTCOMES = {
    QueryStatus.SQL_ERROR: Outcome.SQL_ERROR,
    QueryStatus.DENIED: Outcome.DENIED,
    QueryStatus.HIDDEN: Outcome.DENIED,
    QueryStatus.TIMEOUT: Outcome.TIMEOUT,
    QueryStatus.KILLED: Outcome.KILLED,
    QueryStatus.CANCELLED: Outcome.KILLED,
    QueryStatus.BUSY: Outcome.SQL_ERROR,
}  # a benchmark's file has no writer


QueryLimits = CompareLimits  # how gold and predicted SQL run: BIRD's 30 s, 100,000 rows (else row_cap)


@dataclass(frozen=True)
class QuestionContext:
    """What every question of a run shares."""

    benchmark: Benchmark
    model: str
    backends: tuple[ModelBackend, ...]  # one per sample, each with its own seed
    seeds: tuple[int | None, ...]
    episode_fn: EpisodeFn
    episode_settings: EpisodeSettings
    prompts: PromptSet | None = None  # None: the episode function's default
    limits: QueryLimits = field(default_factory=QueryLimits)
    trace: TraceKind = TraceKind.FULL
    episode_slots: anyio.CapacityLimiter | None = None
    on_episode: Callable[[BackendError | None], None] | None = None  # after each episode: its backend error
    early_stop: bool = True  # cancel the other samples once a strict majority agrees
    run: RunInfo | None = None  # written on every line
    hints: HintSource | None = None  # a verified library's similar entries as evidence (--verified-hints)
    trace_content: bool = False  # content in the OpenTelemetry spans (--trace-content)


def backend_outcome(exc: BackendError) -> Outcome:
    """The outcome kind recorded for a model-runtime failure."""
    return next((o for cls, o in _BACKEND_OUTCOMES if isinstance(exc, cls)), Outcome.BACKEND_ERROR)


async def evaluate_question(example: Example, db: Database, ctx: QuestionContext) -> QuestionRecord:
    """Run the gold SQL, then every sample; gold that fails is recorded apart with no episodes run.

    The question is one trace (agent/telemetry/spans.py), as the server's and ask's are.
    """
    with question_span(
        "eval", capture_content=ctx.trace_content, attributes={EVAL_QUESTION: example.key}
    ) as traced:
        traced.describe(
            database=example.db_id,
            samples=len(ctx.backends),
            question=example.question,
            evidence=example.evidence,
        )
        return await _evaluate_question(example, db, ctx)


async def _evaluate_question(example: Example, db: Database, ctx: QuestionContext) -> QuestionRecord:
    started = time.monotonic()
    gold_result = await _execute(db, example.gold_sql, ctx.limits)
    schema = await db.aschema()
    gold_tables = sorted({t.name for name in gold_result.tables_read if (t := schema.find(name))})
    ordered = MATCH_RULES[ctx.benchmark] is MatchRule.MULTISET and has_top_level_order_by(example.gold_sql)
    gold_status = "row_cap" if gold_result.ok and gold_result.truncated else gold_result.status.value
    gold = GoldRecord(
        status=gold_status,
        error=_gold_error(gold_result, ctx.limits),
        rows=gold_result.total_rows,
        ordered=ordered,
        tables=gold_tables,
        seconds=gold_result.seconds,
        preview=preview_of(gold_result),
    )
    if gold_status != QueryStatus.OK.value:
        question_trace().finish("not_run", f"gold_{gold_status}")
        return _record(example, ctx, gold, [], None, started)
    rule = MATCH_RULES[ctx.benchmark]
    comparison = Comparison(db, ctx.limits, rule)  # the vote's runs score the answers too
    hinted = (
        await ctx.hints.hints(example.db_id, db, example.question)
        if ctx.hints is not None
        else Hinted(None, ())
    )
    # As the server orders them: the hints, then the question's own evidence.
    evidence = "; ".join(part for part in (hinted.evidence, example.evidence) if part) or None
    question = Question(example.question, db, evidence, ctx.episode_settings, ctx.prompts)
    how = SampleSettings(
        rule=rule, limits=ctx.limits, early_stop=ctx.early_stop, compare_single=True, keep_backend_errors=True
    )

    async def finished(run: SampleRun, tally: Tally) -> None:
        if ctx.on_episode:
            ctx.on_episode(run.backend_error)

    def slot(k: int) -> anyio.CapacityLimiter | contextlib.nullcontext[None]:
        return contextlib.nullcontext() if ctx.episode_slots is None else ctx.episode_slots

    backends = SampleBackends(ctx.seeds, ctx.backends)
    asked = await sample_question(
        question, backends, ctx.episode_fn, how, slot=slot, on_finished=finished, comparison=comparison
    )
    trace_outcome(question_trace(), asked)
    samples = []
    for k in range(len(ctx.backends)):
        run = asked.outcome.results.get(k)
        samples.append(
            _cancelled_sample(k, ctx)
            if run is None
            else await _sample_record(run, ctx, comparison, gold_result, gold)
        )
    record = _record(example, ctx, gold, samples, asked, started)
    return record.model_copy(update={"verified_hints": list(hinted.questions)}) if hinted.questions else record


def unreadable_database_record(example: Example, ctx: QuestionContext, error: str) -> QuestionRecord:
    """The record of a question whose database file cannot be opened: a gold error, not scored."""
    gold = GoldRecord(status=DATABASE_ERROR, error=error, rows=0, ordered=False, tables=[], seconds=0.0)
    return _record(example, ctx, gold, [], None, time.monotonic())


async def _sample_record(
    run: SampleRun, ctx: QuestionContext, comparison: Comparison, gold_result: QueryResult, gold: GoldRecord
) -> SampleRecord:
    """One finished sample scored against the gold result."""
    result = run.result
    if result is None:
        assert run.backend_error is not None  # eval has no episode timeout
        return _failed_sample(run.index, ctx, backend_outcome(run.backend_error), str(run.backend_error))
    predicted = run.compared
    if predicted is None and result.sql is not None:  # a failed answer's SQL is scored too (it does not vote)
        predicted = await comparison.execute(result.sql)
    outcome, error = _judge(result, predicted, gold_result, gold, ctx.benchmark)
    seen = sorted(result.tables_seen)
    seen_folded = {t.casefold() for t in seen}
    return SampleRecord(
        sample=run.index,
        seed=run.seed,
        sql=result.sql,
        status=result.status.value,
        stop_reason=result.stop_reason.value,
        outcome=outcome,
        correct=outcome is Outcome.CORRECT,
        error=error,
        result_rows=predicted.total_rows if predicted is not None else None,
        rounds=len(result.rounds),
        tool_calls=result.tool_calls,
        tokens=result.tokens,
        seconds=result.seconds,
        model_seconds=result.model_seconds,
        tool_seconds=result.tool_seconds,
        tables_seen=seen,
        saw_gold_tables=all(t.casefold() in seen_folded for t in gold.tables),
        trace=trace_of(result, ctx.trace),
        preview=preview_of(predicted) if predicted is not None else None,
    )


def _judge(
    result: EpisodeResult,
    predicted: QueryResult | None,
    gold_result: QueryResult,
    gold: GoldRecord,
    benchmark: Benchmark,
) -> tuple[Outcome, str | None]:
    if predicted is None:
        return Outcome.NO_SQL, result.error or "the episode produced no SQL"
    if not predicted.ok:
        return _QUERY_OUTCOMES[predicted.status], predicted.error
    if predicted.truncated:
        return Outcome.ROW_CAP, f"more than {len(predicted.rows):,} rows; not compared"
    same = results_match(gold_result.rows, predicted.rows, rule=MATCH_RULES[benchmark], ordered=gold.ordered)
    return (Outcome.CORRECT, None) if same else (Outcome.WRONG_RESULT, None)


def _cancelled_sample(k: int, ctx: QuestionContext) -> SampleRecord:
    return SampleRecord(
        sample=k,
        seed=ctx.seeds[k],
        sql=None,
        status=CANCELLED_STATUS,
        stop_reason=None,
        outcome=Outcome.CANCELLED,
        correct=False,
        error="stopped early: a majority of samples agreed",
        result_rows=None,
        rounds=0,
        tool_calls=0,
        tokens=0,
        seconds=0.0,
        model_seconds=0.0,
        tool_seconds=0.0,
        tables_seen=[],
        saw_gold_tables=None,
        trace=None,
    )


def _failed_sample(k: int, ctx: QuestionContext, outcome: Outcome, error: str) -> SampleRecord:
    return SampleRecord(
        sample=k,
        seed=ctx.seeds[k],
        sql=None,
        status=BACKEND_ERROR_STATUS,
        stop_reason=None,
        outcome=outcome,
        correct=False,
        error=error,
        result_rows=None,
        rounds=0,
        tool_calls=0,
        tokens=0,
        seconds=0.0,
        model_seconds=0.0,
        tool_seconds=0.0,
        tables_seen=[],
        saw_gold_tables=None,
        trace=None,
    )


def _record(
    example: Example,
    ctx: QuestionContext,
    gold: GoldRecord,
    samples: Sequence[SampleRecord],
    asked: SampledAnswer | None,
    started: float,
) -> QuestionRecord:
    scored = gold.status == QueryStatus.OK.value
    # The answer as ask and the server choose it (agent.sampling): the vote's winner, else the
    # earliest sample whose SQL ran, else the earliest that finished.
    chosen_run = asked.chosen if asked is not None and scored else None
    chosen = samples[chosen_run.index] if chosen_run is not None else None
    finished = [s for s in samples if s.status != CANCELLED_STATUS]
    return QuestionRecord(
        key=example.key,
        index=example.index,
        benchmark=ctx.benchmark.value,
        model=ctx.model,
        db_id=example.db_id,
        difficulty=example.difficulty,
        tags=list(example.tags),
        question=example.question,
        evidence=example.evidence,
        gold_sql=example.gold_sql,
        gold=gold,
        gold_error=not scored,
        predicted_sql=chosen.sql if chosen else None,
        status=chosen.status if chosen else None,
        correct=chosen.correct if chosen else None,
        single_correct=sum(s.correct for s in finished) / len(finished) if scored and finished else None,
        any_correct=any(s.correct for s in finished) if scored and finished else None,
        voted_sample=chosen.sample if chosen else None,
        vote_counts=[g.votes for g in asked.outcome.groups] if asked else [],
        vote_groups=[list(g.members) for g in asked.outcome.groups] if asked else [],
        agreement=asked.agreement if asked is not None and scored else None,
        stopped_early=asked.outcome.stopped_early if asked else False,
        rounds=chosen.rounds if chosen else 0,
        tool_calls=chosen.tool_calls if chosen else 0,
        tokens=sum(s.tokens for s in samples),
        seconds=time.monotonic() - started,
        samples=list(samples),
        run=ctx.run,
        choice=choice_record(example.question, asked, samples) if asked is not None and scored else None,
    )


def choice_record(question: str, asked: SampledAnswer, samples: Sequence[SampleRecord]) -> ChoiceRecord | None:
    """What the server would have asked a person about this vote (its form on disagreement), and
    which option was right (each shows its group's earliest sample); None when it would not ask."""
    if not should_ask(AskMode.DISAGREEMENT, asked.samples, len(asked.outcome.groups)):
        return None
    choice = choice_of(question, sources_of(asked), asked.samples)
    groups = [o.group for o in choice.options]
    first = [asked.outcome.groups[g].members[0] for g in groups]
    right = next((k + 1 for k, sample in enumerate(first) if samples[sample].correct), None)
    return ChoiceRecord(options=[o.label for o in choice.options], groups=groups, right=right, more=choice.more)


async def _execute(db: Database, sql: str, limits: QueryLimits) -> QueryResult:
    return await execute_for_comparison(db, sql, limits)


def _gold_error(result: QueryResult, limits: QueryLimits) -> str | None:
    if result.ok and result.truncated:
        return f"the gold result has more than {limits.max_rows:,} rows; raise --max-result-rows to compare it"
    return result.error

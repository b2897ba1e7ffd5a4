"""A whole evaluation run: scheduling, the results file, --resume, and stopping on a dead backend."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ..backends.base import ModelBackend, SamplingSettings
from ..episode import EpisodeSettings
from ..errors import BackendAuthError, BackendError, ConfigError, DatabasePathError, ModelNotFound, SqaleError
from ..sample_episode import EpisodeFn
from ..sampling import sample_seeds
from ..sqlite import Database, WorkerLimits, WorkerPool
from ..text import sentence
from .datasets import Dataset, Example, Selection
from .hints import HintSource
from .progress import ProgressSink
from .records import (
    QuestionRecord,
    RunInfo,
    TraceKind,
    check_compatible,
    drop_torn_tail,
    read_records,
    to_line,
    without_trace,
)
from .scoring import (
    QueryLimits,
    QuestionContext,
    evaluate_question,
    unreadable_database_record,
)

if TYPE_CHECKING:  # agent.prompt loads the tools; the evaluation imports them only to run
    from ..prompt import PromptSet

BackendFactory = Callable[[SamplingSettings], ModelBackend]


class EvaluationAborted(SqaleError):
    """The run stopped early because the model backend is not usable."""


@dataclass(frozen=True)
class EvalSettings:
    """How a run goes; parsed once from the command line."""

    samples: int = 1
    concurrency: int = 1  # questions at once
    runtime_slots: int | None = None  # episodes talking to the model at once; None: `concurrency`
    seed: int = 0  # sample k uses seed + k
    limits: QueryLimits = field(default_factory=QueryLimits)
    tool_query_timeout: float = WorkerLimits.query_timeout  # for the model's own queries
    max_backend_failures: int = 3  # episodes in a row failing in the backend before we stop
    trace: TraceKind = TraceKind.FULL
    early_stop: bool = True  # stop a question's samples once a strict majority agrees
    episode: EpisodeSettings = field(default_factory=EpisodeSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    verified_hints: Path | None = None  # a verified library giving each question hints
    trace_content: bool = False  # content in the OpenTelemetry spans (--trace-content)

    def __post_init__(self) -> None:
        if self.samples < 1 or self.concurrency < 1 or self.max_backend_failures < 1:
            raise ConfigError("--samples, --concurrency and --max-backend-failures must be 1 or more")
        if self.runtime_slots is not None and self.runtime_slots < 1:
            raise ConfigError(f"--runtime-slots must be at least 1 (got {self.runtime_slots})")
        if self.limits.timeout <= 0 or self.limits.max_rows < 1:
            raise ConfigError("--query-timeout must be above 0 and --max-result-rows at least 1")


def run_info(
    settings: EvalSettings,
    *,
    backend: str | None = None,
    extra: dict[str, str | int | float | bool | None] | None = None,
) -> RunInfo:
    """What each results line records about the run: the time now, the backend and the settings."""
    episode = settings.episode
    described: dict[str, str | int | float | bool | None] = {
        "samples": settings.samples,
        "seed": settings.seed,
        "concurrency": settings.concurrency,
        "runtime_slots": settings.runtime_slots,
        "scoring_timeout": settings.limits.timeout,
        "max_result_rows": settings.limits.max_rows,
        "tool_query_timeout": settings.tool_query_timeout,
        "trace": settings.trace.value,
        "environment": episode.environment.value,
        "max_tool_turns": episode.max_tool_turns,
        "token_budget": episode.token_budget,
        # Every sampling field but the seed (each sample's is seed + k): a new field is recorded too.
        **{name: value for name, value in asdict(settings.sampling).items() if name != "seed"},
        "verified_hints": settings.verified_hints.name if settings.verified_hints else "off",
    }
    return RunInfo(
        started=datetime.now(UTC).isoformat(timespec="seconds"),
        backend=backend,
        settings={**described, **(extra or {})},
    )


@dataclass(frozen=True)
class RunResult:
    """Every record of the selection (earlier and new), in dataset order, without traces."""

    records: tuple[QuestionRecord, ...]
    resumed: int  # records taken from the results file
    ran: int  # questions evaluated in this run
    seconds: float


class BackendHealth:
    """Decides when backend failures mean the backend is gone rather than flaky."""

    def __init__(self, max_consecutive: int) -> None:
        self.max_consecutive = max_consecutive
        self.consecutive = 0
        self.reason: str | None = None

    def record(self, error: BackendError | None) -> bool:
        """Note one episode's backend error (or None); True when the run should stop now."""
        if error is None:
            self.consecutive = 0
            return False
        self.consecutive += 1
        fatal = isinstance(error, ModelNotFound | BackendAuthError)
        if self.reason is None and (fatal or self.consecutive >= self.max_consecutive):
            why = (
                "the backend refused the model or our credentials"
                if fatal
                else (f"{self.consecutive} episodes in a row failed in the model backend")
            )
            self.reason = (
                f"stopped early: {why}: {sentence(str(error))} Questions in flight were not "
                "recorded; fix the backend and rerun with --resume to continue"
            )
        return self.reason is not None


async def evaluate(
    dataset: Dataset,
    selection: Selection,
    backend_factory: BackendFactory,
    *,
    model: str,
    out_path: Path,
    resume: bool = False,
    settings: EvalSettings = EvalSettings(),
    episode_fn: EpisodeFn | None = None,
    prompts: PromptSet | None = None,
    progress: ProgressSink | None = None,
    run: RunInfo | None = None,
) -> RunResult:
    """Evaluate the selection, appending one line per question to `out_path` as each finishes.

    `run` is recorded on every new line (default: `run_info(settings)`).
    """
    started = time.monotonic()
    run = run if run is not None else run_info(settings)
    earlier = _earlier_records(out_path, resume, dataset, model, settings.samples)
    # Lines whose samples hit a backend failure are run again: the model never got its chance.
    done = {
        e.key: earlier[e.key]
        for e in selection.examples
        if e.key in earlier and not earlier[e.key].backend_failed
    }
    todo = [e for e in selection.examples if e.key not in done]
    if progress is not None:
        progress.add_resumed(done.values())
    if episode_fn is None:
        from ..loop import run_episode  # the loop imports the tools; load it only when running

        episode_fn = run_episode
    engine = WorkerPool(WorkerLimits(workers=settings.concurrency, query_timeout=settings.tool_query_timeout))
    seeds = sample_seeds(settings.samples, settings.seed)
    backends: list[ModelBackend] = []
    health = BackendHealth(settings.max_backend_failures)
    new: list[QuestionRecord] = []
    databases = _Databases(dataset, engine)
    try:
        for seed in seeds:
            # Every sampling field as the run's, the seed the sample's: a new field reaches each one.
            backends.append(backend_factory(replace(settings.sampling, seed=seed)))
        async with _single_errors(), anyio.create_task_group() as tg:

            def on_episode(error: BackendError | None) -> None:
                if health.record(error):
                    tg.cancel_scope.cancel()

            ctx = QuestionContext(
                benchmark=dataset.benchmark,
                model=model,
                backends=tuple(backends),
                seeds=seeds,
                episode_fn=episode_fn,
                episode_settings=settings.episode,
                prompts=prompts,
                limits=settings.limits,
                trace=settings.trace,
                episode_slots=anyio.CapacityLimiter(settings.runtime_slots or settings.concurrency),
                on_episode=on_episode,
                early_stop=settings.early_stop,
                run=run,
                hints=HintSource(settings.verified_hints) if settings.verified_hints else None,
                trace_content=settings.trace_content,
            )
            await _schedule(tg, todo, databases, ctx, settings.concurrency, out_path, new, progress)
    finally:
        databases.close()
        engine.close()
        if progress is not None:
            progress.close()
        with anyio.CancelScope(shield=True):  # an interrupted run still closes its connections
            for backend in backends:
                await backend.aclose()
    if health.reason is not None:
        raise EvaluationAborted(health.reason)
    records = sorted([*done.values(), *new], key=lambda r: r.index)
    return RunResult(tuple(records), resumed=len(done), ran=len(new), seconds=time.monotonic() - started)


async def _schedule(
    tg: anyio.abc.TaskGroup,
    todo: Sequence[Example],
    databases: _Databases,
    ctx: QuestionContext,
    concurrency: int,
    out_path: Path,
    new: list[QuestionRecord],
    progress: ProgressSink | None,
) -> None:
    """Start questions in dataset order, at most `concurrency` at once; write each when it ends."""
    slots = anyio.Semaphore(concurrency)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out = out_path.open("a", encoding="utf-8")

    async def run(example: Example) -> None:
        try:
            try:
                database = databases.get(example.db_id)
            except DatabasePathError as exc:  # the dataset's fault: recorded, the run goes on
                record = unreadable_database_record(example, ctx, str(exc))
            else:
                record = await evaluate_question(example, database, ctx)
            if tg.cancel_scope.cancel_called:
                return  # stopping: this question may hold failures caused by the dead backend
            out.write(to_line(record))
            out.flush()
            new.append(without_trace(record))
            if progress is not None:
                progress.update(record)
        finally:
            slots.release()

    try:
        for example in todo:
            await slots.acquire()
            tg.start_soon(run, example)
        # Wait for the last questions before the file closes.
        for _ in range(concurrency):
            await slots.acquire()
    finally:
        out.close()


@contextlib.asynccontextmanager
async def _single_errors() -> AsyncIterator[None]:
    """Let one of our own errors out of the task group as itself, not in an ExceptionGroup."""
    try:
        yield
    except ExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1 and isinstance(leaves[0], SqaleError):
            raise leaves[0] from group
        raise


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


class _Databases:
    """One Database per db_id, opened on first use, all on the run's worker pool."""

    def __init__(self, dataset: Dataset, workers: WorkerPool) -> None:
        self.dataset = dataset
        self.workers = workers
        self._open: dict[str, Database] = {}

    def get(self, db_id: str) -> Database:
        db = self._open.get(db_id)
        if db is None:
            # A benchmark's files are served with no hide rules (eval takes none).
            db = self._open[db_id] = Database.unruled(self.dataset.database_path(db_id), self.workers)
        return db

    def close(self) -> None:
        """Close every Database opened (their own connections; the pool is closed by its owner)."""
        for db in self._open.values():
            db.close()


def _earlier_records(
    out_path: Path, resume: bool, dataset: Dataset, model: str, samples: int
) -> dict[str, QuestionRecord]:
    if not resume:
        if out_path.exists() and out_path.stat().st_size > 0:
            raise ConfigError(
                f"{out_path} already holds results; pass --resume to continue that run or give another --out"
            )
        return {}
    drop_torn_tail(out_path)
    earlier = read_records(out_path)
    check_compatible(
        earlier.values(), benchmark=dataset.benchmark.value, model=model, samples=samples, path=out_path
    )
    return earlier

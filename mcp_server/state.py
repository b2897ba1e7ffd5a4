"""What a running server holds (databases, the model backend, the queue, the audit log), opened in
the background: the MCP handshake never waits for it.

Claude Desktop and IDEs start the stdio server at every launch and wait for its `initialize`
reply. Opening the state (the model backend and its HTTP client, the engine's word on the model,
up to STARTUP_PROBE_SECONDS twice for a runtime that never answers) is none of the handshake's
business: the lifespan yields a `StateOpening` at once, and every handler that needs the state
awaits its `ready()`, which returns as soon as it is open.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from agent import (
    CacheWatch,
    ConfigError,
    Database,
    EngineFacts,
    EngineSession,
    EpisodeSettings,
    ModelBackend,
    OnWait,
    PromptSet,
    Round,
    RuntimeSlots,
    WorkerLimits,
    WorkerPool,
    cache_advice,
    dumps_line,
    engine_session,
    engine_slots,
    load_prompts,
    next_reuse,
)

from .config.catalog import Catalog
from .config.libraries import open_libraries
from .config.limits import AnswerLimits
from .config.server_settings import ServerSettings
from .ongoing import OngoingQuestions
from .serving.access import Caller
from .serving.draining import QuestionGate
from .serving.quotas import TokenQuotas, place_sharing_note

if TYPE_CHECKING:
    from agent import VerifiedLibrary  # opened (config/libraries.py) only for databases that have one

    from .serving.metrics import ServerMetrics  # made when the state opens (app.SqaleServer.metrics)

logger = logging.getLogger(__name__)

BackendFactory = Callable[[ServerSettings], ModelBackend]
STARTUP_PROBE_SECONDS = 3.0  # a dead local runtime answers at once; a black hole costs this (once)
T = TypeVar("T")


def server_prompts(settings: ServerSettings) -> PromptSet:
    """Our prompts, or the reference agent's, with --system-prompt/--user-template overrides."""
    return load_prompts(
        settings.reference_agent, settings.system_prompt, settings.user_template, settings.assistant_prefix
    )


class EpisodeLog:
    """Appends one JSON line per answered question; lines from concurrent calls never mix."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = anyio.Lock()

    @staticmethod
    def check_writable(path: Path) -> None:
        """Create the log's folder if needed; raise ConfigError unless `path` can be appended to."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise ConfigError(
                f"--episode-log {path}: cannot append to it ({exc.strerror}); give a writable file path"
            ) from exc

    async def append(self, record: Mapping[str, Any]) -> None:
        """Write `record` as one line; an unwritable log is reported on stderr, not to the client."""
        line = dumps_line({"time": datetime.now(UTC).isoformat(timespec="seconds"), **record}, default=str)
        async with self._lock:
            try:
                await anyio.to_thread.run_sync(self._write, line)
            except OSError as exc:
                # The user still gets the answer; the operator sees the lost audit line.
                logger.error(
                    "could not append to the episode log %s (%s); the line was: %s",
                    self.path,
                    exc,
                    line.rstrip(),
                )

    def _write(self, line: str) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)


@dataclass(frozen=True)
class ServerState:
    """Shared by all calls while the server runs; holds nothing about any one episode."""

    settings: ServerSettings
    catalog: Catalog
    databases: Mapping[str, Database]
    backend: ModelBackend
    model_label: str  # the model answers name: the engine's own id when it ignores ours
    prompts: PromptSet
    episode_settings: EpisodeSettings
    limiter: anyio.CapacityLimiter
    slots: RuntimeSlots  # episodes talking to the model at once (each keeps its slot)
    episode_log: EpisodeLog | None
    quotas: TokenQuotas  # per token: episodes at once and per minute
    gate: QuestionGate  # questions in flight; refuses new ones once the server is stopping
    metrics: ServerMetrics
    limits: AnswerLimits
    verified: Mapping[str, VerifiedLibrary]  # the databases' verified libraries, by alias
    cache_watch: CacheWatch  # warns once per engine that keeps re-evaluating later rounds' prompts
    engine_label: str  # the engine a round is counted under when the backend does not name one
    ongoing: OngoingQuestions  # questions being answered beyond their calls (status `working`)

    def watch_round(self, previous: Round | None, played: Round) -> None:
        """Note how the engine treated `played`'s prompt (`previous`: the round before, same episode)."""
        self.cache_watch.observe(next_reuse(previous, played, self.engine_label))

    @asynccontextmanager
    async def episode_turn(
        self,
        caller: Caller,
        *,
        on_token_wait: OnWait,
        on_worker_wait: Callable[[float], Awaitable[None]],
        on_slot_wait: OnWait,
    ) -> AsyncIterator[None]:
        """Hold what one episode runs on, taken in this order: one unit of the caller's quota,
        a worker, a runtime slot. Each sample of a question is an episode and takes its own, so a
        token allowed N at once never has more than N episodes running, whatever its samples.

        The quota comes first: a token's episodes past it wait in its own queue, never in the
        worker or runtime-slot queues other tokens' episodes wait in, and with several tokens no
        token's quota reaches the last place (serving/quotas.py)."""
        async with self.quotas.of(caller).concurrent.slot(on_token_wait):
            if self.limiter.available_tokens < 1:
                # Tell the client why nothing happens yet (progress also keeps some client timeouts alive).
                await on_worker_wait(self.limiter.total_tokens)
            async with self.limiter, self.slots.slot(on_slot_wait):
                yield


@asynccontextmanager
async def open_state(
    settings: ServerSettings,
    catalog: Catalog,
    prompts: PromptSet,
    backend_factory: BackendFactory,
    *,
    gate: QuestionGate,
    metrics: ServerMetrics,
    callers: Sequence[Caller],
    library_paths: Mapping[str, Path] | None = None,
) -> AsyncIterator[ServerState]:
    """Start the query workers, read and check the verified libraries (`library_paths`, by alias),
    start the backend, check the model once, and clean up at the end."""
    engine = WorkerPool(WorkerLimits(workers=settings.max_concurrent, query_timeout=settings.query_timeout))
    databases: dict[str, Database] = {}
    try:
        databases = {e.alias: Database(e.path, engine, hide=e.hide) for e in catalog.entries}
        libraries = await anyio.to_thread.run_sync(open_libraries, library_paths or {}, databases)
        limits = AnswerLimits.from_settings(settings)
        episode = EpisodeSettings(
            result_rows=settings.max_rows,
            result_bytes=limits.max_result_bytes,
            environment=settings.environment,
        )
        async with engine_session(
            settings,
            episode,
            runtime_slots=settings.runtime_slots,
            seconds=STARTUP_PROBE_SECONDS,
            build=backend_factory,
        ) as session:
            log_model_check(session)
            log_runtime_slots(session.slots.slots, session.slots.reason, session.facts)
            from .serving.metrics import MeteredBackend  # prometheus_client: not before the first reply

            metered = MeteredBackend(session.backend, settings.backend, metrics)
            limiter = anyio.CapacityLimiter(settings.max_concurrent)
            runtime_slots = RuntimeSlots(session.slots.slots)
            places = min(settings.max_concurrent, runtime_slots.slots)
            quotas = TokenQuotas(settings, callers, places)
            if (sharing := place_sharing_note(places, len(callers))) is not None:
                logger.log(*sharing)
            metrics.watch_queue("token", lambda: quotas.waiting)
            metrics.watch_queue("worker", lambda: limiter.statistics().tasks_waiting)
            metrics.watch_queue("runtime_slot", lambda: runtime_slots.waiting)
            metrics.in_flight.set_function(lambda: gate.in_flight)
            metrics.watch_sqlite_workers(lambda: engine.starts, lambda: engine.kills)
            if session.budget_note is not None:
                logger.warning("%s", session.budget_note)
            ongoing = OngoingQuestions(
                keep_seconds=settings.working_timeout, per_token=settings.token_max_working
            )
            metrics.questions_working.set_function(lambda: ongoing.unwaited)
            async with ongoing.running():  # what is still being answered is cancelled at the end
                yield ServerState(
                    settings=settings,
                    catalog=catalog,
                    databases=databases,
                    backend=metered,
                    model_label=session.model_label,
                    prompts=prompts,
                    episode_settings=session.episode,
                    limiter=limiter,
                    slots=runtime_slots,
                    episode_log=EpisodeLog(settings.episode_log) if settings.episode_log else None,
                    quotas=quotas,
                    gate=gate,
                    metrics=metrics,
                    limits=limits,
                    verified=libraries,
                    cache_watch=CacheWatch(
                        lambda where: cache_advice(session.engine_at(where)), logger.warning
                    ),
                    engine_label=session.backend.replica_label,
                    ongoing=ongoing,
                )
    finally:
        # Shielded: a server stopped by cancellation must still stop its worker processes (the
        # session closes the backend first, shielded too).
        for database in databases.values():
            database.close()  # its own connections (the owner's statements run in this process)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(engine.close)


class StateOpening(Generic[T]):
    """What the server's state opens into (app.py: the answering service), opened by `hold`; `ready()`
    waits for it."""

    def __init__(self) -> None:
        self._opened = anyio.Event()
        self._state: T | None = None

    async def hold(self, opening: AbstractAsyncContextManager[T]) -> None:
        """Open the state and keep it open until cancelled, which closes it (the lifespan is ending).

        Cancelled while it is still opening (a client that hung up after the handshake), it stops
        there and closes what it opened. An error opening it propagates (a bug of ours: a runtime
        that is down is a warning, not an error) and ends the server, as an error of the lifespan
        would.
        """
        async with opening as state:
            self._state = state
            self._opened.set()
            await anyio.sleep_forever()

    async def ready(self) -> T:
        """The open state, once it is open."""
        await self._opened.wait()
        assert self._state is not None  # set before the event
        return self._state


def log_runtime_slots(slots: int, reason: str, facts: Sequence[EngineFacts]) -> None:
    """Log the runtime slots and why; warn when they exceed what the engines serve at once."""
    logger.info("runtime slots: %d (%s)", slots, reason)
    told = engine_slots(facts)
    if told is not None and slots > told.slots:
        logger.warning(
            "--runtime-slots %d is more than the engine serves at once (%d: %s); the extra "
            "questions evict each other's cached prompt, or fail where the engine cuts a "
            "request off: give --runtime-slots %d",
            slots,
            told.slots,
            told.reason,
            told.slots,
        )
    for f in facts:
        for note in f.notes:
            logger.info("%s: %s", f.where, note)
        for warning in f.warnings:
            logger.warning("%s: %s", f.where, warning)


def log_model_check(session: EngineSession) -> None:
    """Log the runtime's word on the model; a warning when it is down or lacks the model.

    The server runs on regardless: an MCP client shows a server that exits as broken, and the
    tool reports the problem per call.
    """
    check, model = session.model_check, session.backend.model
    if check.error is not None:
        logger.warning(
            "%s (the server keeps running; every question will fail until this is fixed)", check.error
        )
    elif check.timed_out:
        logger.warning(
            "the model runtime did not describe model '%s' within %g s; questions may fail or be slow",
            model,
            STARTUP_PROBE_SECONDS,
        )
    elif check.info is not None and check.info.served_as is None:
        logger.info("model '%s' is available", model)
    elif check.info is not None:
        logger.info(
            "the engine does not list model '%s' but answers that name with its own model "
            "'%s'; answers are labelled '%s'",
            model,
            check.info.served_as,
            check.info.served_as,
        )

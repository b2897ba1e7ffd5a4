"""One sample's episode: the shape of run_episode as a question's samples call it, run under the
sample's episode timeout and told to answer early as agent/sampling.py says.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from .backends.base import ModelBackend
from .episode import EpisodeResult, EpisodeSettings, Round
from .sqlite import Database

if TYPE_CHECKING:  # agent.prompt loads the tools; this module only passes a PromptSet along
    from .prompt import PromptSet

T = TypeVar("T")
# The end of an episode's time kept for its final turn: at least this share of the episode timeout
# (a model request under way then is cut), or twice the sample's longest model request so far.
ANSWER_RESERVE_SHARE = 0.2
ANSWER_RESERVE_REQUESTS = 2.0


class EpisodeFn(Protocol):
    """The shape of agent.loop.run_episode as a question's samples call it."""

    def __call__(
        self,
        question: str,
        database: Database,
        backend: ModelBackend,
        *,
        evidence: str | None = ...,
        prompts: PromptSet = ...,
        settings: EpisodeSettings = ...,
        on_round: Callable[[Round], Awaitable[None]] | None = ...,
        finish_now: anyio.Event | None = ...,
    ) -> Awaitable[EpisodeResult]: ...


async def play_sample(
    episode: EpisodeFn,
    question: str,
    database: Database,
    backend: ModelBackend,
    *,
    evidence: str | None,
    settings: EpisodeSettings,
    options: dict[str, Any],
    timeout: float | None,
    finish_now: anyio.Event | None,
    reported: Callable[[Round], Awaitable[None]] | None,
) -> EpisodeResult | None:
    """A sample's episode, None past the episode timeout (which starts with the slot: waiting
    for one is not the episode's time); told to answer early as agent/sampling.py says."""
    if timeout is None and finish_now is None:
        return await episode(
            question,
            database,
            backend,
            evidence=evidence,
            settings=settings,
            **options,
            on_round=reported,
        )
    started, longest, finish = time.perf_counter(), 0.0, anyio.Event()

    async def played(done: Round) -> None:
        nonlocal longest
        longest = max(longest, done.model_seconds)
        reserve = max((timeout or 0.0) * ANSWER_RESERVE_SHARE, ANSWER_RESERVE_REQUESTS * longest)
        if timeout is not None and time.perf_counter() - started + reserve >= timeout:
            finish.set()
        if reported is not None:
            await reported(done)

    async def watch() -> None:  # the question told to finish, or the floor of the reserve reached
        with anyio.move_on_after(None if timeout is None else timeout * (1 - ANSWER_RESERVE_SHARE)):
            await (anyio.sleep_forever() if finish_now is None else finish_now.wait())
        finish.set()

    with anyio.move_on_after(timeout):
        return await beside(
            watch,
            lambda: episode(
                question,
                database,
                backend,
                evidence=evidence,
                settings=settings,
                **options,
                on_round=played,
                finish_now=finish,
            ),
        )
    return None


async def beside(watch: Callable[[], Coroutine[Any, Any, None]], work: Callable[[], Awaitable[T]]) -> T:
    """`work()`'s value, with `watch()` running beside it until work ends; work's errors are raised
    as themselves (not inside a task group's ExceptionGroup)."""
    done: list[T] = []
    failed: Exception | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            done.append(await work())
        except Exception as exc:  # raised below as itself
            failed = exc
        group.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return done[0]

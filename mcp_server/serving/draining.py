"""Questions in flight, and the drain on SIGTERM: refuse new ones, let these finish, cancel the rest."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio

from agent import plural

logger = logging.getLogger(__name__)

CANCEL_GRACE_SECONDS = 10.0  # a cancelled question writes its log line well within this


class ServerStopping(Exception):
    """A question arrived after the server began to stop."""


@dataclass(frozen=True)
class DrainResult:
    """What a drain found: questions in flight when it began, and how many it had to cancel."""

    in_flight: int
    cancelled: int


def drain_summary(result: DrainResult) -> str:
    """What a drain found, for the log: `drained: 1 question was in flight, 0 cancelled; stopping`."""
    return (
        f"drained: {plural(result.in_flight, 'question was', 'questions were')} in flight, "
        f"{result.cancelled} cancelled; stopping"
    )


class QuestionGate:
    """Tracks each question's cancel scope so a drain can wait for them, then cancel the rest."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()
        self._idle: anyio.Event | None = None  # made inside the event loop, set when none is left
        self.draining = False

    @property
    def in_flight(self) -> int:
        """Questions admitted and not yet answered."""
        return len(self._scopes)

    @contextmanager
    def admit(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope for one question's work; ServerStopping once a drain has begun."""
        if self.draining:
            raise ServerStopping
        scope = anyio.CancelScope()
        self._scopes.add(scope)
        if self._idle is None or self._idle.is_set():
            self._idle = anyio.Event()
        try:
            yield scope
        finally:
            self._scopes.discard(scope)
            if not self._scopes and self._idle is not None:
                self._idle.set()

    async def drain(self, timeout: float) -> DrainResult:
        """Refuse new questions, wait up to `timeout` s for these, then cancel the rest."""
        self.draining = True
        in_flight = len(self._scopes)
        if self._scopes:
            logger.info(
                "stopping: waiting up to %g s for %s in flight", timeout, plural(len(self._scopes), "question")
            )
        if self._idle is None:
            return DrainResult(0, 0)
        with anyio.move_on_after(timeout):
            await self._idle.wait()
        cancelled = len(self._scopes)
        if cancelled:
            logger.warning("stopping: cancelling %d questions still running after %g s", cancelled, timeout)
            for scope in list(self._scopes):
                scope.cancel()
            with anyio.move_on_after(CANCEL_GRACE_SECONDS):
                await self._idle.wait()  # each writes its 'cancelled' line before it leaves
        return DrainResult(in_flight, cancelled)

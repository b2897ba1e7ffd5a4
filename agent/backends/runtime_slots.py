"""Admission to the model runtime by slot: at most N episodes talk to the model at a time.

A runtime keeps one prompt cache per slot (Ollama: OLLAMA_NUM_PARALLEL; llama.cpp: -np). Our
append-only prompt makes rounds 2..7 cheap only while an episode's prefix stays in its slot's
cache; rounds of several episodes interleaved on one slot evict each other's prefix, so every
round re-evaluates its whole prompt. So an episode holds a slot for all its rounds (its tool
calls take milliseconds), and the others wait in arrival order. Samples of one question (voting)
take the same slot one after another and reuse the shared system and question prefix.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from ..errors import ConfigError
from ..text import plural
from .base import EngineFacts, ModelBackend, SlotChoice

OnWait = Callable[[int], Awaitable[None]]  # called with the number of questions ahead


@dataclass(eq=False)
class _Waiter:
    """One episode waiting for a slot; `granted` is set when a leaving episode hands it over."""

    granted: bool = False


@dataclass(frozen=True)
class SlotTicket:
    """What a holder learns on admission: how long it waited."""

    queued_seconds: float


class RuntimeSlots:
    """A first-come, first-served admission gate with `slots` places (one per runtime slot)."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ConfigError(f"--runtime-slots must be at least 1 (got {slots})")
        self.slots = slots
        self._busy = 0
        self._queue: list[_Waiter] = []  # arrival order
        self._changed = anyio.Event()  # set (and replaced) whenever the queue moves

    @property
    def busy(self) -> int:
        """Episodes holding a slot now."""
        return self._busy

    @property
    def waiting(self) -> int:
        """Episodes waiting for a slot now."""
        return len(self._queue)

    @asynccontextmanager
    async def slot(self, on_wait: OnWait | None = None) -> AsyncIterator[SlotTicket]:
        """Hold a slot for the block; while waiting, `on_wait(questions ahead)` on every move."""
        started = time.perf_counter()
        if self._busy < self.slots and not self._queue:
            self._busy += 1
        else:
            await self._wait_turn(on_wait)
        try:
            yield SlotTicket(queued_seconds=time.perf_counter() - started)
        finally:
            self._release()

    async def _wait_turn(self, on_wait: OnWait | None) -> None:
        waiter = _Waiter()
        self._queue.append(waiter)
        admitted = False
        try:
            reported: int | None = None
            while not waiter.granted:
                ahead = self._queue.index(waiter) + self._busy
                changed = self._changed
                if on_wait is not None and ahead != reported:
                    reported = ahead
                    await on_wait(ahead)
                    continue  # the queue may have moved while the report was sent
                await changed.wait()
            admitted = True
        finally:
            if not admitted:  # cancelled while waiting
                if waiter.granted:
                    self._release()  # a slot was handed over in the same instant: pass it on
                else:
                    self._queue.remove(waiter)
                    self._notify()

    def _release(self) -> None:
        """Hand the slot to the first waiter (arrival order), or free it."""
        if self._queue:
            self._queue.pop(0).granted = True
        else:
            self._busy -= 1
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


def waiting_message(ahead: int) -> str:
    """The progress text of a question waiting for a runtime slot."""
    return f"waiting for the model: {plural(ahead, 'question')} ahead"


def engine_slots(facts: Sequence[EngineFacts]) -> SlotChoice | None:
    """The slots the engines say they have, summed over replicas; None unless every one says."""
    if not facts or any(f.slots is None for f in facts):
        return None
    total = sum(f.slots or 0 for f in facts)
    sources = sorted({f.slots_source for f in facts})
    replicas = f", {plural(len(facts), 'replica')}" if len(facts) > 1 else ""
    return SlotChoice(total, f"the engine's own: {'; '.join(sources)}{replicas}")


def resolve_runtime_slots(
    given: int | None,
    backend: ModelBackend,
    environ: Mapping[str, str],
    facts: Sequence[EngineFacts] = (),
    *,
    wanted: int | None = None,
) -> SlotChoice:
    """--runtime-slots when given, else what the engines say, else the backend's default.

    `wanted` (eval's --concurrency) replaces the backend's default, and the engines' word counts
    only when they serve fewer. A backend that has no default of its own gets one slot: nothing
    is assumed of its runtime.
    """
    if given is not None:
        if given < 1:
            raise ConfigError(f"--runtime-slots must be at least 1 (got {given})")
        return SlotChoice(given, "--runtime-slots")
    told = engine_slots(facts)
    if wanted is not None:
        return told if told is not None and told.slots < wanted else SlotChoice(wanted, "--concurrency")
    if told is not None:
        return told
    return backend.default_slots(environ)

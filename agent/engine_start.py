"""One engine session: the backend a front end talks to, and what its engines said before any question.

`ask`, `doctor`, `eval` and the server all start the same way, here: make the backend, ask its
engines about themselves (what they are, their slots and context: first, because it tells the
backend how to talk to each engine), check the model (the engine's own id labels the answers
when it ignores ours), choose the runtime slots, and fit the episode budget to the engines'
context. `engine_session` yields that as one frozen `EngineSession`; a front end adds only what
is its own (the server its metrics wrapper and start-up log, eval its per-run seed, doctor its
checks and report) and says it in its own words. The session's backend traces each model call
(agent/backends/traced.py): a no-op until OpenTelemetry is configured.

An engine that accepts connections but never answers costs `seconds` once: when its facts do
not come within them, the model check is not tried and counts as timed out.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import anyio

from .backends.base import EngineFacts, ModelBackend, ModelInfo, SlotChoice
from .backends.registry import BackendSettings, make_backend
from .backends.runtime_slots import resolve_runtime_slots
from .engine_fit import fit_to_engines
from .episode import EpisodeSettings
from .errors import BackendError
from .telemetry.gate import tracing_on

ENGINE_PROBE_SECONDS = 5.0  # asking the engines about themselves and the model (the server: less)

_S = TypeVar("_S", bound=BackendSettings)


@dataclass(frozen=True)
class ModelCheck:
    """What the runtime said of the model before any question (nothing of it when not asked)."""

    asked: bool = False  # False: the front end does not need the check (ask)
    info: ModelInfo | None = None  # the runtime's description; None when it gave none
    error: BackendError | None = None  # why there is none: the runtime failed (down, no such model)
    timed_out: bool = False  # why there is none: no answer within the session's seconds

    @property
    def cannot_check(self) -> bool:
        """True when the check was asked and the backend cannot check its model in advance."""
        return self.asked and self.info is None and self.error is None and not self.timed_out


@dataclass(frozen=True)
class EngineSession:
    """The backend and what its engines said: the start every front end shares."""

    backend: ModelBackend  # open for the session; closed when it ends
    where: str  # where the model runs, for messages: the backend's word, else the settings'
    facts: tuple[EngineFacts, ...]  # one per engine that said anything; () when none did
    model_check: ModelCheck
    slots: SlotChoice  # runtime slots: --runtime-slots, else the engines' word, else the backend's
    episode: EpisodeSettings  # the front end's episode settings, the budget fitted to the engines
    budget_note: str | None  # why the budget shrank; None when it did not

    @property
    def model_label(self) -> str:
        """The model to name in answers: the engine's own id when it ignores ours."""
        info = self.model_check.info
        return info.label if info is not None else self.backend.model

    @property
    def engine_kind(self) -> str | None:
        """What the first engine that says it is (llama-server, vLLM, ...); None when none says."""
        return next((f.engine for f in self.facts if f.engine is not None), None)

    def engine_at(self, where: str) -> str | None:
        """What the engine at `where` (a replica's address) is, when it said."""
        return next((f.engine for f in self.facts if f.where == where), None)


@asynccontextmanager
async def engine_session(
    settings: _S,
    episode: EpisodeSettings,
    *,
    runtime_slots: int | None = None,
    wanted_slots: int | None = None,
    check_model: bool = True,
    seconds: float = ENGINE_PROBE_SECONDS,
    environ: Mapping[str, str] | None = None,
    build: Callable[[_S], ModelBackend] | None = None,
) -> AsyncIterator[EngineSession]:
    """Make the backend `settings` describe (with `build`, else make_backend), learn what its
    engines say, and close it when the block ends.

    `runtime_slots` is --runtime-slots (None: not given); `wanted_slots` a front end's own
    default in place of the backend's (eval's --concurrency, lowered only when the engines serve
    fewer); `check_model=False` skips the model check (its label is then our model name).
    """
    # Off the event loop: making a backend imports its HTTP client (a fifth of a second on a small
    # machine), which the loop of a server answering its first requests meanwhile must not wait for.
    backend = await anyio.to_thread.run_sync(build if build is not None else make_backend, settings)
    try:
        facts, answered = await _engine_facts(backend, seconds)
        used = traced_backend(backend, settings.backend, facts)  # each model call a span
        check = ModelCheck()
        if check_model:
            check = await _check_model(backend, seconds) if answered else ModelCheck(asked=True, timed_out=True)
        slots = resolve_runtime_slots(
            runtime_slots, backend, os.environ if environ is None else environ, facts, wanted=wanted_slots
        )
        fitted, note = fit_to_engines(episode, facts)
        yield EngineSession(
            backend=used,
            where=backend.where or settings.address,
            facts=facts,
            model_check=check,
            slots=slots,
            episode=fitted,
            budget_note=note,
        )
    finally:
        with anyio.CancelScope(shield=True):  # a cancelled front end still closes its connections
            await backend.aclose()


async def _engine_facts(backend: ModelBackend, seconds: float) -> tuple[tuple[EngineFacts, ...], bool]:
    """What the engines say within `seconds`, told to the backend; False when they did not finish."""
    with anyio.move_on_after(seconds):
        facts = await backend.engine_facts()
        backend.remember_engines(facts)
        return facts, True
    return (), False


async def _check_model(backend: ModelBackend, seconds: float) -> ModelCheck:
    """The runtime's description of the model within `seconds`, or why there is none."""
    try:
        with anyio.fail_after(seconds):
            return ModelCheck(asked=True, info=await backend.describe_model())
    except BackendError as exc:
        return ModelCheck(asked=True, error=exc)
    except TimeoutError:
        return ModelCheck(asked=True, timed_out=True)


def traced_backend(backend: ModelBackend, provider: str, facts: Sequence[EngineFacts]) -> ModelBackend:
    """`backend` with each model call a GenAI span (agent/backends/traced.py) once OpenTelemetry is
    on; as it is otherwise (the front ends start it before they make their backends)."""
    if not tracing_on():
        return backend
    from .backends.traced import Engines, traced

    return traced(backend, Engines.of(provider, facts))

"""A backend in front of another: each capability passed on explicitly, and what returns a backend
re-wrapped, so the wrapper's own work (the server's metrics, a test's recording) applies to every
seeded sample and every replica as it does to the backend it was given.

No `__getattr__` pass-through: a capability the wrapper does not name would silently reach the
inner backend unwrapped. `tests/backends/test_backend_wrapper.py` fails when `ModelBackend` gains a
public method or property that this class does not override.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Self

from .base import Completion, EngineFacts, ModelBackend, ModelInfo, SlotChoice


class BackendWrapper(ModelBackend):
    """Passes every method to `inner`; `with_seed` and `per_replica` come back wrapped by `rewrap`.

    A subclass overrides what it changes (MeteredBackend: `complete`) and says in `rewrap` how it
    stands in front of another backend (a seeded copy or a replica of `inner`).
    """

    def __init__(self, inner: ModelBackend) -> None:
        self.inner = inner
        self.model = inner.model

    @abc.abstractmethod
    def rewrap(self, inner: ModelBackend) -> Self:
        """This wrapper in front of `inner` (a seeded copy or a replica of `self.inner`), sharing
        what this one records into."""

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        """The inner backend's completion."""
        return await self.inner.complete(prompt, max_tokens=max_tokens)

    async def aclose(self) -> None:
        """Close the inner backend."""
        await self.inner.aclose()

    def with_seed(self, seed: int) -> ModelBackend:
        """The inner backend's seeded copy, wrapped; this wrapper itself when the inner cannot seed."""
        seeded = self.inner.with_seed(seed)
        return self if seeded is self.inner else self.rewrap(seeded)

    async def describe_model(self) -> ModelInfo | None:
        """The inner backend's word on the model."""
        return await self.inner.describe_model()

    @property
    def where(self) -> str | None:
        """Where the inner backend's model runs."""
        return self.inner.where

    @property
    def replica_label(self) -> str:
        """The inner backend's replica label."""
        return self.inner.replica_label

    def default_slots(self, environ: Mapping[str, str]) -> SlotChoice:
        """The inner backend's default runtime slots."""
        return self.inner.default_slots(environ)

    async def engine_facts(self) -> tuple[EngineFacts, ...]:
        """What the inner backend's engines say about themselves."""
        return await self.inner.engine_facts()

    def remember_engines(self, facts: Sequence[EngineFacts]) -> None:
        """Tell the inner backend what its engines said."""
        self.inner.remember_engines(facts)

    def per_replica(self) -> tuple[ModelBackend, ...]:
        """The inner backend's replicas, each wrapped (this wrapper itself for the inner alone)."""
        return tuple(self if one is self.inner else self.rewrap(one) for one in self.inner.per_replica())

"""Self-consistency: K samples of one question, a vote by execution result, an early stop.

One implementation for the MCP server, `ask` and `eval`:
- Answers whose results are equal (`answer_key`: the rows as a set or a multiset, the same
  comparison the benchmarks' accuracy uses) form a group. A result with more rows than the
  comparison reads is not compared and does not vote.
- The largest group wins; a tie goes to the group with the earliest submitted sample
  (sample k is submitted before sample k + 1, so the outcome does not depend on timing).
- Samples that produced nothing runnable do not vote.
- With early stop, once a group holds a strict majority of K the samples still running are
  cancelled: no later answer could change the winner.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

import anyio

from .backends.base import ModelBackend, SeedableBackend
from .episode import EpisodeResult, EpisodeStatus
from .errors import SqaleError
from .sqlite import Database, QueryResult

T = TypeVar("T")
Row = tuple[Any, ...]
SEED_RANGE = 2**31 - 1024  # base seeds drawn when none is given stay below 2**31 with seed + k


class MatchRule(StrEnum):
    """How two results are compared."""

    SET = "set"  # BIRD: rows as a set
    MULTISET = "multiset"  # Spider and KaggleDBQA; also the server's vote


@dataclass(frozen=True)
class CompareLimits:
    """How an answer's SQL is executed to be compared."""

    timeout: float = 30.0
    max_rows: int = 100_000  # a result with more rows is not compared (it does not vote)


def vote_key(rows: Sequence[Row], rule: MatchRule) -> Hashable:
    """What two results must share to vote together: their rows as a set (BIRD) or multiset."""
    if rule is MatchRule.SET:
        return frozenset(rows)
    return frozenset(Counter(rows).items())


def answer_key(result: QueryResult | None, sql: str | None, rule: MatchRule) -> Hashable | None:
    """The vote of one answer executed for comparison; None when it has nothing runnable."""
    if result is None or sql is None or not result.ok or result.truncated:
        return None
    return vote_key(result.rows, rule)


async def execute_for_comparison(db: Database, sql: str, limits: CompareLimits) -> QueryResult:
    """Run `sql` with whole cells and up to max_rows rows (one more tells a fit from an overflow)."""
    return await db.aquery(sql, max_rows=limits.max_rows, count_cap=limits.max_rows + 1,
                           timeout=limits.timeout)


async def episode_vote(db: Database, result: EpisodeResult, limits: CompareLimits, rule: MatchRule,
                       executed: dict[str, QueryResult]) -> Hashable | None:
    """The vote of an episode's answer; identical SQL of several samples runs once (`executed`)."""
    # The episode's own result is capped and its cells clipped: run the SQL again, whole.
    if result.sql is None or result.status is EpisodeStatus.FAILED:
        return None
    compared = executed.get(result.sql)
    if compared is None:
        compared = executed[result.sql] = await execute_for_comparison(db, result.sql, limits)
    return answer_key(compared, result.sql, rule)


@dataclass(frozen=True)
class Group:
    """Samples whose answers have equal results."""

    key: Hashable
    members: tuple[int, ...]  # sample indexes, ascending

    @property
    def votes(self) -> int:
        """How many samples gave this result."""
        return len(self.members)


class Tally:
    """The votes of the samples finished so far."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self._keys: dict[int, Hashable | None] = {}
        self.arrivals: list[int] = []  # samples in the order they finished

    def add(self, sample: int, key: Hashable | None) -> None:
        """Record a finished sample's vote (None: it abstains)."""
        self._keys[sample] = key
        self.arrivals.append(sample)

    def groups(self) -> tuple[Group, ...]:
        """Groups, most votes first; ties in order of their earliest sample."""
        members: dict[Hashable, list[int]] = {}
        for sample in sorted(self._keys):
            key = self._keys[sample]
            if key is not None:
                members.setdefault(key, []).append(sample)
        groups = [Group(key, tuple(m)) for key, m in members.items()]
        return tuple(sorted(groups, key=lambda g: (-g.votes, g.members[0])))

    def winner(self) -> int | None:
        """The earliest sample of the winning group; None when no sample voted."""
        groups = self.groups()
        return groups[0].members[0] if groups else None

    def has_majority(self) -> bool:
        """True when one group holds more than half of all K samples."""
        groups = self.groups()
        return bool(groups) and groups[0].votes * 2 > self.samples


def vote(keys: Sequence[Hashable | None]) -> int | None:
    """Index of the winning sample among finished ones: earliest of the largest group."""
    tally = Tally(len(keys))
    for sample, key in enumerate(keys):
        tally.add(sample, key)
    return tally.winner()


@dataclass(frozen=True)
class VoteOutcome(Generic[T]):
    """What K samples gave: the finished ones, their groups, the winner."""

    samples: int
    results: Mapping[int, T]  # finished samples by index
    groups: tuple[Group, ...]
    winner: int | None
    stopped_early: bool
    arrivals: tuple[int, ...]  # finished samples in the order they finished

    @property
    def agreement(self) -> float:
        """Votes of the winning group over K (1.0 for a single sample that answered)."""
        return self.groups[0].votes / self.samples if self.groups else 0.0

    @property
    def cancelled(self) -> tuple[int, ...]:
        """Samples stopped before they finished."""
        return tuple(k for k in range(self.samples) if k not in self.results)


SampleFn = Callable[[int], Awaitable[tuple[T, Hashable | None]]]
FinishFn = Callable[[int, T, Tally], Awaitable[None]]


async def run_samples(samples: int, run_one: SampleFn[T], *, early_stop: bool = True,
                      on_finished: FinishFn[T] | None = None) -> VoteOutcome[T]:
    """Run samples 0..K-1 concurrently and tally them; stop the rest once a majority agrees.

    `run_one(k)` returns the sample's value and its vote. The first of our own errors
    (SqaleError) any sample raises cancels the others and is raised as itself.
    """
    tally = Tally(samples)
    results: dict[int, T] = {}
    failures: list[SqaleError] = []
    stopped = False
    async with anyio.create_task_group() as group:

        async def one(k: int) -> None:
            nonlocal stopped
            try:
                value, key = await run_one(k)
            except SqaleError as exc:
                failures.append(exc)
                group.cancel_scope.cancel()
                return
            results[k] = value
            tally.add(k, key)
            if early_stop and len(results) < samples and tally.has_majority():
                stopped = True
                group.cancel_scope.cancel()
            if on_finished is not None:
                with anyio.CancelScope(shield=True):
                    await on_finished(k, value, tally)

        for k in range(samples):
            group.start_soon(one, k)
    if failures:
        raise failures[0]
    return VoteOutcome(samples=samples, results=results, groups=tally.groups(), winner=tally.winner(),
                       stopped_early=stopped, arrivals=tuple(tally.arrivals))


def sample_seeds(samples: int, seed: int | None) -> tuple[int | None, ...]:
    """Seeds of K samples: seed + k; one sample keeps `seed` (None: the runtime's own)."""
    if samples == 1:
        return (seed,)
    base = random.SystemRandom().randrange(SEED_RANGE) if seed is None else seed
    return tuple(base + k for k in range(samples))


def seeded_backends(backend: ModelBackend, seeds: Sequence[int | None]) -> list[ModelBackend]:
    """One backend per sample, sharing `backend`'s connections, each sampling with its seed."""
    if not isinstance(backend, SeedableBackend):
        return [backend] * len(seeds)  # cannot set a seed: the runtime's own randomness varies them
    return [backend if seed is None else backend.with_seed(seed) for seed in seeds]

"""The vote among K answers to one question: which results are equal, which group wins.

One rule for the MCP server, `ask` and `eval` (agent/sampling.py plays each sample and chooses the
answer; `run_samples` here runs the K of them and tallies their votes):
- A sample votes with its final SQL run again whole, under the comparison limits. Answers
  whose results are equal (`answer_key`: the rows as a set or a multiset, the same
  comparison the benchmarks' accuracy uses) form a group. A result with more rows than the
  comparison reads is not compared and does not vote.
- Samples that produced nothing runnable do not vote: no SQL, SQL that fails when run for
  the comparison, or an episode that ended failed (its user got no result from it).
- The largest group wins; a tie goes to the group with the earliest submitted sample
  (sample k is submitted before sample k + 1, so the outcome does not depend on timing).
- With early stop, once a group holds a strict majority of K the samples still running are
  cancelled: no later answer could change the winner.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

import anyio

from .episode import EpisodeResult, EpisodeStatus
from .errors import SqaleError
from .sqlite import Database, QueryResult

T = TypeVar("T")
Row = tuple[Any, ...]


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


async def execute_for_comparison(
    db: Database, sql: str, limits: CompareLimits, *, reads: bool = True
) -> QueryResult:
    """Run `sql` with whole cells and up to max_rows rows (one more tells a fit from an overflow).

    Without `reads`, what it read is the authorizer's alone (see Database.query).
    """
    return await db.aquery(
        sql, max_rows=limits.max_rows, count_cap=limits.max_rows + 1, timeout=limits.timeout, reads=reads
    )


def ran_sql(result: EpisodeResult) -> bool:
    """True when an episode ended with SQL that ran (not failed): only such answers vote."""
    return result.sql is not None and result.status is not EpisodeStatus.FAILED


class Comparison:
    """One question's answers run whole for the vote; identical SQL of several samples runs once."""

    def __init__(self, db: Database, limits: CompareLimits, rule: MatchRule) -> None:
        self.db, self.limits, self.rule = db, limits, rule
        self._executed: dict[str, QueryResult] = {}

    async def execute(self, sql: str) -> QueryResult:
        """`sql` run with whole cells and up to the limits' rows (once per distinct SQL)."""
        compared = self._executed.get(sql)
        if compared is None:
            # Only the rows vote: what the SQL read is the episode's own run's to report.
            compared = self._executed[sql] = await execute_for_comparison(
                self.db, sql, self.limits, reads=False
            )
        return compared

    async def vote(self, result: EpisodeResult) -> tuple[QueryResult | None, Hashable | None]:
        """An episode's answer run for comparison (None: it does not vote) and its vote."""
        # The episode's own result is capped and its cells clipped: run the SQL again, whole.
        if result.sql is None or not ran_sql(result):
            return None, None
        compared = await self.execute(result.sql)
        return compared, answer_key(compared, result.sql, self.rule)


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
    def agreement(self) -> float | None:
        """Votes of the winning group over K; None when no sample voted."""
        return self.groups[0].votes / self.samples if self.groups else None

    @property
    def cancelled(self) -> tuple[int, ...]:
        """Samples stopped before they finished."""
        return tuple(k for k in range(self.samples) if k not in self.results)


SampleFn = Callable[[int], Awaitable[tuple[T, Hashable | None]]]
FinishFn = Callable[[int, T, Tally], Awaitable[None]]


async def run_samples(
    samples: int,
    run_one: SampleFn[T],
    *,
    early_stop: bool = True,
    on_finished: FinishFn[T] | None = None,
    on_stop: Callable[[], None] | None = None,
) -> VoteOutcome[T]:
    """Run samples 0..K-1 concurrently and tally them; stop the rest once a majority agrees.

    `run_one(k)` returns the sample's value and its vote. The first of our own errors
    (SqaleError) any sample raises cancels the others and is raised as itself. `on_stop` is
    called just before a majority stops the others (so they can tell that from a cancel).
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
                if on_stop is not None:
                    on_stop()
                group.cancel_scope.cancel()
            if on_finished is not None:
                with anyio.CancelScope(shield=True):
                    await on_finished(k, value, tally)

        for k in range(samples):
            group.start_soon(one, k)
    if failures:
        raise failures[0]
    return VoteOutcome(
        samples=samples,
        results=results,
        groups=tally.groups(),
        winner=tally.winner(),
        stopped_early=stopped,
        arrivals=tuple(tally.arrivals),
    )

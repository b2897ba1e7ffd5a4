"""Per-token quotas, counted in episodes (a question with K samples is K episodes): episodes at
once (the rest queue, as for runtime slots), episodes per minute, and open HTTP sessions.

Every call of our tools counts its first episode of its token's minute when it arrives, before
anything else of ours reads it (`TokenQuotas.admit`, in the first middleware: answer/door.py),
so a call that fails later (bad arguments, a hostile `_meta`, a bug) has still counted, and a
flood of them meets the quota and the refusal-log budget. `check_rate`, where a call learns how
many episodes it runs, counts that first one among them: a question refused there for its quota
gives it back (refused questions cost nothing; anything else costs at least one).

A server has `places`: an episode holds a worker and a runtime slot from start to end, so as many
episodes run at once as the smaller of --max-concurrent and the runtime slots. When several tokens
share them, no token's episodes may hold the last place (`token_places`): its further episodes
wait in its own queue, so while one token is busy another token's question starts at once, and
waits behind no other token's queue. This holds whatever the settings say: a token's own
max-concurrent above that is lowered to it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from agent import RuntimeSlots

from ..config.server_settings import ServerSettings
from .access import Caller

WINDOW_SECONDS = 60.0
REFUSAL_LINES_PER_MINUTE = 10  # log lines one token's refused calls may write in a minute


@dataclass(frozen=True)
class QuotaExceeded(Exception):
    """A token asked for more episodes in the last minute than it may run."""

    token: str
    limit: int
    retry_after: float  # seconds until enough episodes of the window leave it
    episodes: int = 1  # what the refused question needed (its samples)

    def __str__(self) -> str:
        if self.episodes > self.limit:
            return (
                f"Too many samples: token '{self.token}' may run {self.limit} episodes per "
                f"minute (each sample is one) and this question asks for {self.episodes}. Ask "
                f"for at most {self.limit} samples."
            )
        seconds = max(1, math.ceil(self.retry_after))
        if self.episodes == 1:
            return (
                f"Too many questions: token '{self.token}' may ask {self.limit} per minute. "
                f"Retry in {seconds} s."
            )
        return (
            f"Too many questions: token '{self.token}' may run {self.limit} episodes per minute "
            f"(each sample is one) and this question needs {self.episodes}. Retry in {seconds} "
            "s, or ask for fewer samples."
        )


class MinuteWindow:
    """Admits at most `limit` events in any 60 s window; the clock is injectable for tests."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._times: deque[float] = deque()

    def retry_after(self, events: int = 1) -> float | None:
        """Record `events` events now and return None, or the seconds to wait for room for all.

        More events than the limit never fit: the wait is then infinite.
        """
        now = self._clock()
        while self._times and now - self._times[0] >= WINDOW_SECONDS:
            self._times.popleft()
        if events > self.limit:
            return math.inf
        excess = len(self._times) + events - self.limit
        if excess > 0:  # the `excess` oldest must leave the window first
            return WINDOW_SECONDS - (now - self._times[excess - 1])
        self._times.extend([now] * events)
        return None

    @property
    def newest(self) -> float:
        """When the last event counted was (the window holds one at least)."""
        return self._times[-1]

    def give_back(self, at: float) -> None:
        """Forget one event counted at `at` (a call's first episode, when the call is refused)."""
        if at in self._times:  # not when it has left the window already
            self._times.remove(at)


class LogBudget:
    """At most `per_minute` log lines; says how many it held back when the next one is let through."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = MinuteWindow(per_minute, clock)
        self._held_back = 0

    def allow(self) -> int | None:
        """None when this line must be left out, else how many lines were left out before it."""
        if self._window.retry_after() is not None:
            self._held_back += 1
            return None
        held, self._held_back = self._held_back, 0
        return held


@dataclass(frozen=True)
class QuotaLimits:
    """One token's limits, from its [tokens.NAME] table or the server-wide defaults."""

    concurrent: int  # episodes at once
    per_minute: int  # episodes per minute
    sessions: int  # HTTP sessions open at once


def quota_limits(settings: ServerSettings, name: str) -> QuotaLimits:
    """The limits of the token called `name` (a token without its own values gets the defaults)."""
    spec = next((t for t in settings.tokens if t.name == name), None)
    return QuotaLimits(
        concurrent=(spec.max_concurrent if spec and spec.max_concurrent else settings.token_max_concurrent),
        per_minute=(
            spec.questions_per_minute if spec and spec.questions_per_minute else settings.token_per_minute
        ),
        sessions=spec.max_sessions if spec and spec.max_sessions else settings.token_sessions,
    )


@dataclass(frozen=True)
class TokenQuota:
    """One token's gates: its own episode queue (runtime-slot mechanism), its minute window, and
    the budget of log lines its refused calls may write."""

    concurrent: RuntimeSlots
    per_minute: MinuteWindow
    refusal_lines: LogBudget


def token_places(places: int, tokens: int) -> int | None:
    """The most of the server's `places` one of `tokens` tokens may hold at once: all but one when
    several share them (one when there is only one place); None (no limit) for a lone token."""
    if tokens < 2:
        return None
    return max(1, places - 1)


def place_sharing_note(places: int, tokens: int) -> tuple[int, str] | None:
    """The start-up log line (level, text) saying how `tokens` tokens share `places`, or None."""
    most = token_places(places, tokens)
    if most is None:
        return None
    if places < 2:
        return logging.WARNING, (
            f"{tokens} tokens share one place (the smaller of --max-concurrent and the runtime slots): "
            "they take turns, and a question can wait for another token's running episode (up to "
            "--episode-timeout); give both 2 or more, so that one place stays free for the others"
        )
    return logging.INFO, (
        f"{tokens} tokens share {places} places (the smaller of --max-concurrent and the runtime "
        f"slots): each runs at most {most} episodes at once (fewer where its max-concurrent says so), "
        "so one place is always left for the others"
    )


@dataclass
class _Admitted:
    """The first episode of the call under way, counted when it arrived (see `TokenQuotas.admit`)."""

    caller: str
    at: float  # when it was counted, to give it back
    counted: bool = False  # check_rate has counted it among the call's episodes (or given it back)


# The call under way's first episode: set by `admit` around the call, so the call's own check_rate
# (same task) counts it among its episodes. A context variable, not shared state: each call has its own.
_ADMITTED: ContextVar[_Admitted | None] = ContextVar("sqale_admitted_episode", default=None)


@contextmanager
def _held(admitted: _Admitted) -> Iterator[None]:
    token = _ADMITTED.set(admitted)
    try:
        yield
    finally:
        _ADMITTED.reset(token)


class TokenQuotas:
    """The quotas of every caller, made on first use for callers without a configured token.

    `places` is how many episodes the server runs at once; when several tokens are configured, a
    token may hold all but one of them (`token_places`).
    """

    def __init__(self, settings: ServerSettings, callers: Sequence[Caller], places: int) -> None:
        self._settings = settings
        self._most = token_places(places, len(callers))
        self._quotas: dict[str, TokenQuota] = {}
        for caller in callers:
            self.of(caller)

    def of(self, caller: Caller) -> TokenQuota:
        """The quota of `caller` (the local caller gets the defaults)."""
        if caller.name not in self._quotas:
            limits = quota_limits(self._settings, caller.name)
            concurrent = limits.concurrent if self._most is None else min(limits.concurrent, self._most)
            self._quotas[caller.name] = TokenQuota(
                RuntimeSlots(concurrent), MinuteWindow(limits.per_minute), LogBudget(REFUSAL_LINES_PER_MINUTE)
            )
        return self._quotas[caller.name]

    def admit(self, caller: Caller) -> AbstractContextManager[None]:
        """Count the first episode of a call of `caller` now, before anything else reads the call
        (QuotaExceeded, counting nothing, when it does not fit); the block this returns holds it for
        the call's `check_rate`."""
        quota = self.of(caller)
        wait = quota.per_minute.retry_after(1)
        if wait is not None:
            raise QuotaExceeded(caller.name, quota.per_minute.limit, wait, 1)
        return _held(_Admitted(caller.name, quota.per_minute.newest))

    def check_rate(self, caller: Caller, episodes: int = 1) -> None:
        """Count `episodes` episodes of `caller` (all or none); QuotaExceeded when they do not fit.

        Within an admitted call (`admit`), the call's first episode, counted when it arrived, is
        the first of them; refused, it is given back.
        """
        quota = self.of(caller)
        admitted = _ADMITTED.get()
        own = admitted is not None and not admitted.counted and admitted.caller == caller.name
        wait = quota.per_minute.retry_after(episodes - 1 if own else episodes)
        if admitted is not None and own:
            admitted.counted = True
            if wait is not None:
                quota.per_minute.give_back(admitted.at)
        if wait is not None:
            raise QuotaExceeded(caller.name, quota.per_minute.limit, wait, episodes)

    @property
    def waiting(self) -> int:
        """Episodes waiting for their token's turn, over all tokens."""
        return sum(q.concurrent.waiting for q in self._quotas.values())


def token_waiting_message(ahead: int) -> str:
    """The progress text of an episode waiting behind its own token's earlier episodes."""
    return f"waiting for this token's earlier questions: {ahead} ahead"

"""Per-token quotas: questions at once (the rest queue, as for runtime slots) and per minute."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.backends.slots import RuntimeSlots

from ..config.settings import ServerSettings
from .access import Caller

WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class QuotaExceeded(Exception):
    """A token asked more questions in the last minute than it may."""

    token: str
    limit: int
    retry_after: float  # seconds until the oldest question of the window leaves it

    def __str__(self) -> str:
        seconds = max(1, math.ceil(self.retry_after))
        return (f"Too many questions: token '{self.token}' may ask {self.limit} per minute. "
                f"Retry in {seconds} s.")


class MinuteWindow:
    """Admits at most `limit` events in any 60 s window; the clock is injectable for tests."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._times: deque[float] = deque()

    def retry_after(self) -> float | None:
        """Record one event now and return None, or the seconds to wait when the window is full."""
        now = self._clock()
        while self._times and now - self._times[0] >= WINDOW_SECONDS:
            self._times.popleft()
        if len(self._times) >= self.limit:
            return WINDOW_SECONDS - (now - self._times[0])
        self._times.append(now)
        return None


@dataclass(frozen=True)
class TokenQuota:
    """One token's gates: its own queue (runtime-slot mechanism) and its minute window."""

    concurrent: RuntimeSlots
    per_minute: MinuteWindow


class TokenQuotas:
    """The quotas of every caller, made on first use for callers without a configured token."""

    def __init__(self, settings: ServerSettings, callers: Sequence[Caller]) -> None:
        self._settings = settings
        configured = {t.name: t for t in settings.tokens}
        self._quotas: dict[str, TokenQuota] = {}
        for caller in callers:
            spec = configured.get(caller.name)
            self._quotas[caller.name] = self._make(
                spec.max_concurrent if spec and spec.max_concurrent else settings.token_max_concurrent,
                spec.questions_per_minute if spec and spec.questions_per_minute
                else settings.token_per_minute)

    def _make(self, concurrent: int, per_minute: int) -> TokenQuota:
        return TokenQuota(RuntimeSlots(concurrent), MinuteWindow(per_minute))

    def of(self, caller: Caller) -> TokenQuota:
        """The quota of `caller` (the local caller gets the defaults)."""
        if caller.name not in self._quotas:
            self._quotas[caller.name] = self._make(self._settings.token_max_concurrent,
                                                   self._settings.token_per_minute)
        return self._quotas[caller.name]

    def check_rate(self, caller: Caller) -> None:
        """Count one question of `caller`; QuotaExceeded when its minute is full."""
        quota = self.of(caller)
        wait = quota.per_minute.retry_after()
        if wait is not None:
            raise QuotaExceeded(caller.name, quota.per_minute.limit, wait)

    @property
    def waiting(self) -> int:
        """Questions waiting for their token's turn, over all tokens."""
        return sum(q.concurrent.waiting for q in self._quotas.values())

"""Which replicas of an OpenAI-compatible backend exist, which are down until when, which to try next."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# An engine that does not say its slots is taken for a batching one (vLLM, SGLang): they run many
# sequences at once and share cached prefixes, so several episodes per replica do not evict
# each other.
SLOTS_PER_REPLICA = 4


def replicas_address(base_urls: Sequence[str]) -> str:
    """Where the model runs, for messages: the replicas' base URLs, normalised (no trailing slash)."""
    return ", ".join(url.rstrip("/") for url in base_urls)


@dataclass(eq=False)  # identity matters: two replicas may share a URL
class Replica:
    """Live bookkeeping for one base URL; mutable by nature, owned by one pool."""

    base_url: str
    outstanding: int = 0
    down_until: float = 0.0  # the pool's clock reading before which the replica is skipped
    last_error: str | None = None


class ReplicaPool:
    """The replicas of one backend: requests in flight, failures and cooldowns; no I/O.

    A failed replica is skipped for `cooldown` seconds; `clock` is time.monotonic unless a
    test passes its own.
    """

    def __init__(
        self, base_urls: Sequence[str], *, cooldown: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.cooldown = cooldown
        self._clock = clock
        self._replicas = tuple(Replica(url) for url in base_urls)

    @property
    def replicas(self) -> tuple[Replica, ...]:
        """Every replica, in the order given."""
        return self._replicas

    def pick(self, tried: Sequence[Replica] = (), prefer: str | None = None) -> Replica | None:
        """The healthy untried replica `prefer` names, else the one with the fewest outstanding
        requests (ties: first listed).

        When every replica is cooling down, the first attempt still probes the one whose
        cooldown ends soonest, so a recovered server is used without waiting out the cooldown.
        """
        now = self._clock()
        untried = [r for r in self._replicas if r not in tried]
        healthy = [r for r in untried if r.down_until <= now]
        preferred = [r for r in healthy if r.base_url == prefer]
        if preferred:
            return preferred[0]
        if healthy:
            return min(healthy, key=lambda r: r.outstanding)
        if not tried and untried:
            return min(untried, key=lambda r: r.down_until)
        return None

    def attempts(self, limit: int, prefer: str | None = None) -> Iterator[Replica]:
        """Up to `limit` distinct replicas to try in turn, each picked when the previous one failed;
        the first is the one `prefer` names when it is healthy."""
        tried: list[Replica] = []
        for _ in range(limit):
            replica = self.pick(tried, prefer)
            if replica is None:
                return
            tried.append(replica)
            yield replica

    @contextmanager
    def in_flight(self, replica: Replica) -> Iterator[Replica]:
        """Count a request as outstanding on `replica` while the block runs."""
        replica.outstanding += 1
        try:
            yield replica
        finally:
            replica.outstanding -= 1

    def mark_down(self, replica: Replica, reason: str) -> None:
        """Skip `replica` for the cooldown, remembering why (a warning when others serve meanwhile)."""
        replica.last_error = reason
        replica.down_until = self._clock() + self.cooldown
        if len(self._replicas) == 1:
            # Nothing to skip it for, and the request fails with an error that says the same:
            # the caller reports it (doctor and ask print it, the server logs it as a warning).
            logger.debug("the model server %s failed (%s)", replica.base_url, reason)
        else:
            logger.warning(
                "replica %s failed (%s); skipping it for %g s",
                replica.base_url,
                reason,
                self.cooldown,
            )

    def mark_answered(self, replica: Replica) -> None:
        """Forget `replica`'s last error: it answered as a healthy server does."""
        replica.last_error = None

    def failure_listing(self) -> str:
        """One line per replica: its URL and its last error, and whether its cooldown is over."""
        now = self._clock()
        lines = []
        for r in self._replicas:
            if r.last_error is None:
                state = "no error recorded"
            elif r.down_until > now:
                state = r.last_error
            else:
                state = f"{r.last_error} (cooldown over)"
            lines.append(f"  {r.base_url}: {state}")
        return "\n".join(lines)


class PrefixAffinity:
    """Which replica evaluated a prompt the next one continues: an episode's rounds go back to the
    engine that holds their prefix in its cache (elsewhere they would be evaluated whole).

    Bookkeeping only, bounded: the last `size` prompts and the replica that answered each.
    """

    def __init__(self, size: int = 64) -> None:
        self._recent: deque[tuple[str, str]] = deque(maxlen=size)

    def replica_for(self, prompt: str) -> str | None:
        """The replica of the longest remembered prompt that `prompt` continues, if any."""
        best, longest = None, 0
        for text, base_url in self._recent:
            if len(text) > longest and prompt.startswith(text):
                best, longest = base_url, len(text)
        return best

    def served(self, prompt: str, base_url: str) -> None:
        """Remember that `base_url` evaluated `prompt`."""
        self._recent.append((prompt, base_url))

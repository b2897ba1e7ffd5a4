"""ReplicaPool: which replica to try next, cooldowns and the failure listing, on a fake clock."""

from __future__ import annotations

import logging

import pytest

from agent.backends._replicas import ReplicaPool


class FakeClock:
    """A clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _pool(clock: FakeClock, *urls: str, cooldown: float = 30.0) -> ReplicaPool:
    return ReplicaPool(urls or ("http://a/v1", "http://b/v1"), cooldown=cooldown, clock=clock)


def test_idle_pool_picks_the_first_listed(clock: FakeClock) -> None:
    """Ties in outstanding requests go to the replica listed first."""
    pool = _pool(clock)
    assert pool.pick() is pool.replicas[0]


def test_pick_prefers_fewest_outstanding(clock: FakeClock) -> None:
    """A replica with a request in flight loses to an idle one, and wins again once it is idle."""
    pool = _pool(clock)
    a, b = pool.replicas
    with pool.in_flight(a):
        assert (a.outstanding, pool.pick()) == (1, b)
    assert (a.outstanding, pool.pick()) == (0, a)


def test_in_flight_counts_down_when_the_block_raises(clock: FakeClock) -> None:
    """A request that fails still stops counting as outstanding."""
    pool = _pool(clock)
    a = pool.replicas[0]
    with pytest.raises(RuntimeError), pool.in_flight(a):
        raise RuntimeError("broke")
    assert a.outstanding == 0


def test_a_replica_marked_down_is_skipped_for_the_cooldown(clock: FakeClock) -> None:
    """After a failure the other replica is picked until the cooldown is over."""
    pool = _pool(clock)
    a, b = pool.replicas
    pool.mark_down(a, "HTTP 500: boom")
    clock.now += 29.9
    assert pool.pick() is b
    clock.now += 0.1
    assert pool.pick() is a


def test_all_cooling_the_first_attempt_probes_the_soonest_back(clock: FakeClock) -> None:
    """With every replica down, a first attempt still gets the one whose cooldown ends first."""
    pool = _pool(clock)
    a, b = pool.replicas
    pool.mark_down(b, "refused")
    clock.now += 1
    pool.mark_down(a, "refused")
    assert (pool.pick(), pool.pick(tried=[b])) == (b, None)


def test_attempts_yield_distinct_replicas_up_to_the_limit(clock: FakeClock) -> None:
    """attempts(n) gives each replica at most once and at most n of them."""
    pool = _pool(clock, "http://a/v1", "http://b/v1", "http://c/v1")
    assert list(pool.attempts(2)) == list(pool.replicas[:2])
    assert list(pool.attempts(5)) == list(pool.replicas)


def test_attempts_pick_lazily_after_each_failure(clock: FakeClock) -> None:
    """The retry is picked after the first attempt failed, so it skips what went down meanwhile."""
    pool = _pool(clock, "http://a/v1", "http://b/v1", "http://c/v1")
    a, b, c = pool.replicas
    attempts = pool.attempts(2)
    assert next(attempts) is a
    pool.mark_down(a, "refused")
    pool.mark_down(b, "refused")
    assert (next(attempts), next(attempts, None)) == (c, None)


def test_attempts_stop_when_every_replica_is_cooling(clock: FakeClock) -> None:
    """With every replica down, one probe is made and no retry."""
    pool = _pool(clock)
    for replica in pool.replicas:
        pool.mark_down(replica, "refused")
    assert len(list(pool.attempts(2))) == 1


def test_replicas_sharing_a_url_are_distinct(clock: FakeClock) -> None:
    """Two replicas with the same URL are two replicas (identity, not equality)."""
    pool = _pool(clock, "http://a/v1", "http://a/v1")
    first, second = pool.replicas
    assert pool.pick(tried=[first]) is second


def test_mark_down_logs_the_reason_and_the_cooldown(clock: FakeClock, caplog) -> None:
    """A failure is logged once as a warning naming the replica, the reason and the cooldown."""
    pool = _pool(clock, cooldown=12.5)
    with caplog.at_level(logging.WARNING, logger="agent.backends"):
        pool.mark_down(pool.replicas[0], "HTTP 503: busy")
    assert [r.getMessage() for r in caplog.records] == [
        "replica http://a/v1 failed (HTTP 503: busy); skipping it for 12.5 s",
    ]


def test_failure_listing_says_each_replicas_state(clock: FakeClock) -> None:
    """Each replica's line: no error, its error while cooling, or its error with the cooldown over."""
    pool = _pool(clock, "http://a/v1", "http://b/v1", "http://c/v1")
    a, b, _ = pool.replicas
    pool.mark_down(a, "refused")
    clock.now += 31
    pool.mark_down(b, "HTTP 500: boom")
    assert pool.failure_listing() == (
        "  http://a/v1: refused (cooldown over)\n"
        "  http://b/v1: HTTP 500: boom\n"
        "  http://c/v1: no error recorded"
    )


def test_an_answer_clears_the_last_error(clock: FakeClock) -> None:
    """mark_answered forgets the error, so the listing says none is recorded."""
    pool = _pool(clock, "http://a/v1")
    a = pool.replicas[0]
    pool.mark_down(a, "refused")
    pool.mark_answered(a)
    assert pool.failure_listing() == "  http://a/v1: no error recorded"

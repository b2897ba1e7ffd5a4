"""Prometheus metrics of one server, in its own CollectorRegistry (no process-global state)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent import BackendError, BackendWrapper, Completion, ModelBackend

EPISODE_SECONDS_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
ROUNDS_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 15)
MODEL_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
ANSWER_BYTES_BUCKETS = (256, 1_024, 4_096, 16_384, 65_536, 262_144, 1_048_576)


class ServerMetrics:
    """Every metric the server exports; `render()` is the body of GET /metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.questions = Counter(
            "sqale_questions",
            "Questions answered or refused, by database, token, status and stop reason",
            ("database", "token", "status", "stop_reason"),
            registry=r,
        )
        self.episode_seconds = Histogram(
            "sqale_episode_seconds",
            "Seconds one question took, queue excluded",
            ("database",),
            buckets=EPISODE_SECONDS_BUCKETS,
            registry=r,
        )
        self.episode_rounds = Histogram(
            "sqale_episode_rounds",
            "Model rounds one question took",
            ("database",),
            buckets=ROUNDS_BUCKETS,
            registry=r,
        )
        self.model_seconds = Histogram(
            "sqale_model_request_seconds",
            "Seconds per model request",
            ("backend", "replica"),
            buckets=MODEL_SECONDS_BUCKETS,
            registry=r,
        )
        self.model_failures = Counter(
            "sqale_model_request_failures",
            "Model requests that failed",
            ("backend", "replica", "error"),
            registry=r,
        )
        self.queue_length = Gauge(
            "sqale_queue_length",
            "Questions waiting: for a token's turn, a worker or a runtime slot",
            ("queue",),
            registry=r,
        )
        self.in_flight = Gauge(
            "sqale_questions_in_flight", "Questions admitted and not yet answered", registry=r
        )
        self.sessions_refused = Counter(
            "sqale_http_sessions_refused",
            "New HTTP sessions refused because the token holds its most (--token-max-sessions)",
            ("token",),
            registry=r,
        )
        self.prompt_tokens = Counter(
            "sqale_model_prompt_tokens",
            "Prompt tokens of model requests, by what the engine said it did "
            "with them: evaluated, reused (served from its prompt cache) or unknown (it does not say)",
            ("backend", "replica", "cache"),
            registry=r,
        )
        self.saves = Counter(
            "sqale_verified_saves",
            "Save-as-verified calls, by database, token and outcome (proposed, "
            "already_verified, already_proposed, refused, invalid, not_permitted, no_library, quota, error)",
            ("database", "token", "outcome"),
            registry=r,
        )
        self.working_calls = Counter(
            "sqale_working_answers",
            "Calls that ended with status working: the answer was not ready within "
            "--call-budget (the question goes on, and a call of the same question waits for it again)",
            ("database", "token"),
            registry=r,
        )
        self.questions_working = Gauge(
            "sqale_questions_working",
            "Questions being answered (or holding an answer) that no call waits "
            "on: their last call said working",
            registry=r,
        )
        self.answer_bytes = Histogram(
            "sqale_answer_bytes",
            "UTF-8 bytes of the answer's text",
            ("database",),
            buckets=ANSWER_BYTES_BUCKETS,
            registry=r,
        )

    def observe_answer(self, database: str, seconds: float, rounds: int, text_bytes: int) -> None:
        """Record one answered question's time, rounds and answer size."""
        self.episode_seconds.labels(database).observe(seconds)
        self.episode_rounds.labels(database).observe(rounds)
        self.answer_bytes.labels(database).observe(text_bytes)

    def watch_queue(self, name: str, length: Callable[[], float]) -> None:
        """Report `length()` as the queue `name` at every scrape."""
        self.queue_length.labels(name).set_function(length)

    def watch_sqlite_workers(self, starts: Callable[[], int], kills: Callable[[], int]) -> None:
        """Export the SQLite worker pool's counters, read at every scrape (the pool stays free of
        metrics code)."""
        self.registry.register(
            _Scraped(
                lambda: [
                    CounterMetricFamily(
                        "sqale_sqlite_worker_starts", "SQLite worker processes started", value=starts()
                    ),
                    CounterMetricFamily(
                        "sqale_sqlite_worker_kills",
                        "SQLite worker processes killed (query over its limits, cancelled, or found dead)",
                        value=kills(),
                    ),
                ]
            )
        )

    def watch_sessions(self, by_token: Callable[[], Mapping[str, int]]) -> None:
        """Export the open HTTP sessions per token, read at every scrape: a sample per token holding some."""

        def sessions() -> list[Metric]:
            family = GaugeMetricFamily("sqale_http_sessions", "Open HTTP sessions, by token", labels=("token",))
            for token, count in sorted(by_token().items()):
                family.add_metric((token,), count)
            return [family]

        self.registry.register(_Scraped(sessions))

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class _Scraped(Collector):
    """Metric families made from their owner's own figures at each scrape."""

    def __init__(self, families: Callable[[], list[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        """The families, as they are now."""
        yield from self._families()


class MeteredBackend(BackendWrapper):
    """A backend that times every request and counts failures and prompt tokens, by backend and
    replica; its seeded copies and replicas are metered too (BackendWrapper re-wraps them)."""

    def __init__(self, inner: ModelBackend, backend: str, metrics: ServerMetrics) -> None:
        super().__init__(inner)
        # A request that fails before its completion names a replica is counted under this one.
        self._backend, self._replica, self._metrics = backend, inner.replica_label, metrics

    def rewrap(self, inner: ModelBackend) -> MeteredBackend:
        """`inner` (a seeded copy or a replica) metered into the same metrics."""
        return MeteredBackend(inner, self._backend, self._metrics)

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        """The inner completion, measured."""
        started = time.perf_counter()
        try:
            completion = await self.inner.complete(prompt, max_tokens=max_tokens)
        except BackendError as exc:
            self._metrics.model_failures.labels(self._backend, self._replica, type(exc).__name__).inc()
            raise
        replica = completion.details.get("replica", self._replica)
        self._metrics.model_seconds.labels(self._backend, replica).observe(time.perf_counter() - started)
        self._count_prompt(replica, completion)
        return completion

    def _count_prompt(self, replica: str, completion: Completion) -> None:
        """Evaluated and reused prompt tokens, as the engine reported them (unknown when it did not)."""
        counter = self._metrics.prompt_tokens
        if completion.cached_tokens is None:
            counter.labels(self._backend, replica, "unknown").inc(completion.prompt_tokens)
            return
        cached = min(completion.cached_tokens, completion.prompt_tokens)
        counter.labels(self._backend, replica, "reused").inc(cached)
        counter.labels(self._backend, replica, "evaluated").inc(completion.prompt_tokens - cached)

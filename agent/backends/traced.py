"""Each model call as an OpenTelemetry GenAI client span, with the conventions' two metrics.

`TracedBackend` stands in front of the backend every front end uses (engine_session wraps the
session's backend; eval wraps each of its per-seed backends with `traced`): one
`text_completion MODEL` span per completion (CLIENT kind: the engine is another process) with
the provider (our --backend), the engine (what it says it is), where it runs, max_tokens, the
prompt, cached, evaluated and output tokens as the engine reports them, and the finish reason;
and `gen_ai.client.operation.duration` and `gen_ai.client.token.usage`. With content capture
on, the completion's text is the span's `gen_ai.output.messages` (the prompt is not recorded:
it is the episode so far, whose tool results are on the tool spans).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import metrics
from opentelemetry.trace import SpanKind

from ..telemetry import names as n
from ..telemetry.content import content_policy
from ..telemetry.gate import tracing_on
from ..telemetry.spans import failure_kind, span
from ..version import package_version
from .base import Completion, EngineFacts, ModelBackend
from .wrapper import BackendWrapper

_METER = metrics.get_meter(n.INSTRUMENTATION_SCOPE, package_version())
OPERATION_DURATION = _METER.create_histogram(
    n.OPERATION_DURATION,
    unit="s",
    description="GenAI operation duration.",
    explicit_bucket_boundaries_advisory=n.OPERATION_DURATION_BUCKETS,
)
TOKEN_USAGE = _METER.create_histogram(
    n.TOKEN_USAGE,
    unit="{token}",
    description="Number of input and output tokens used.",
    explicit_bucket_boundaries_advisory=n.TOKEN_USAGE_BUCKETS,
)


@dataclass(frozen=True)
class Engines:
    """What the engines said they are, by the address a completion names (its replica)."""

    provider: str  # the --backend it is reached through: ollama, openai
    kinds: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, provider: str, facts: Sequence[EngineFacts]) -> Engines:
        """From the engines' facts (engine_session's, eval's)."""
        return cls(provider, MappingProxyType({f.where: f.engine for f in facts if f.engine is not None}))

    def kind(self, where: str) -> str | None:
        """What the engine at `where` is; the only one's when it names no replica; None: it did not say."""
        found = self.kinds.get(where)
        if found is None and len(self.kinds) == 1:
            return next(iter(self.kinds.values()))
        return found


def address_of(where: str) -> tuple[str | None, int | None]:
    """Host and port of an engine address (`http://host:8000/v1`, `localhost:11434`); no credentials."""
    parts = urlsplit(where if "://" in where else f"http://{where}")
    try:
        return parts.hostname, parts.port
    except ValueError:  # a port that is no number: the host alone
        return parts.hostname, None


class TracedBackend(BackendWrapper):
    """A backend whose every completion is a GenAI client span, timed and counted by the conventions."""

    def __init__(self, inner: ModelBackend, engines: Engines) -> None:
        super().__init__(inner)
        self.engines = engines

    def rewrap(self, inner: ModelBackend) -> TracedBackend:
        """`inner` (a seeded copy or a replica) traced the same way."""
        return TracedBackend(inner, self.engines)

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        """The inner completion inside its span."""
        if not tracing_on():  # nothing would record a span or a measurement
            return await self.inner.complete(prompt, max_tokens=max_tokens)
        # The metrics count every call, sampled or not; the span only when it would be recorded.
        base = {
            n.OPERATION_NAME: n.COMPLETION,
            n.PROVIDER_NAME: self.engines.provider,
            n.REQUEST_MODEL: self.model,
        }
        started = time.perf_counter()
        with span(
            f"{n.COMPLETION} {self.model}", {**base, n.REQUEST_MAX_TOKENS: max_tokens}, kind=SpanKind.CLIENT
        ) as current:
            try:
                completion = await self.inner.complete(prompt, max_tokens=max_tokens)
            except BaseException as exc:
                OPERATION_DURATION.record(
                    time.perf_counter() - started, {**base, n.ERROR_TYPE: failure_kind(exc)}
                )
                raise
            where = completion.details.get("replica") or self.inner.where or ""
            host, port = address_of(where) if where else (None, None)
            served: dict[str, Any] = {
                **base,
                **({n.SERVER_ADDRESS: host} if host else {}),
                **({n.SERVER_PORT: port} if port else {}),
            }
            OPERATION_DURATION.record(time.perf_counter() - started, served)
            TOKEN_USAGE.record(completion.prompt_tokens, {**served, n.TOKEN_TYPE: "input"})
            TOKEN_USAGE.record(completion.completion_tokens, {**served, n.TOKEN_TYPE: "output"})
            if current.is_recording():
                current.set_attributes(self._attributes(completion, served, self.engines.kind(where)))
            return completion

    @staticmethod
    def _attributes(completion: Completion, served: Mapping[str, Any], engine: str | None) -> dict[str, Any]:
        """What the engine said of this completion, as the conventions name it."""
        found: dict[str, Any] = {
            **served,
            n.INPUT_TOKENS: completion.prompt_tokens,
            n.OUTPUT_TOKENS: completion.completion_tokens,
            n.FINISH_REASONS: (completion.finish_reason,),
        }
        if completion.cached_tokens is not None:
            cached = min(completion.cached_tokens, completion.prompt_tokens)
            found[n.CACHE_READ_TOKENS] = cached
            found[n.EVALUATED_TOKENS] = completion.prompt_tokens - cached
        if engine is not None:
            found[n.ENGINE] = engine
        text = content_policy().text(completion.text)
        if text is not None:
            found[n.OUTPUT_MESSAGES] = (
                content_policy().json(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": text}],
                            "finish_reason": completion.finish_reason,
                        }
                    ]
                )
                or ""
            )
        return found


def traced(backend: ModelBackend, engines: Engines) -> ModelBackend:
    """`backend` with its model calls traced (a no-op span each while no SDK is configured)."""
    return TracedBackend(backend, engines)

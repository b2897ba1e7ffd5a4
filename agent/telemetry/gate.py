"""The span helpers as the product calls them: OpenTelemetry is imported only once it is on.

`sqale-agent ask`, `tool` and `golden`, and the stdio server before its first reply, import no
more OpenTelemetry than the MCP SDK itself does (tests/project/test_startup.py): so loop, asking, the
SQLite package and the front ends call these helpers, which hand out an `Untraced` handle while
no OpenTelemetry implementation is configured and import `spans` and `steps` only once one is.
An SDK can only be configured after `opentelemetry.trace` was imported, so `tracing_on` looks for
that module before asking it anything.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from .names import SCHEMA_READ

if TYPE_CHECKING:
    from .spans import QuestionTrace
    from .steps import EpisodeTrace, StatementTrace, ToolTrace

__all__ = [
    "SCHEMA_READ",
    "Untraced",
    "episode_span",
    "question_span",
    "question_trace",
    "round_played",
    "round_span",
    "statement_span",
    "tool_span",
    "tracing_on",
]


def tracing_on() -> bool:
    """True once an OpenTelemetry implementation provides the tracers in this process."""
    trace = sys.modules.get("opentelemetry.trace")
    return trace is not None and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class Untraced:
    """What every helper hands out while tracing is off: each method does nothing."""

    ended = False
    stopped_early = False

    def describe(
        self,
        *,
        database: str,
        samples: int,
        token: str | None = None,
        question: str | None = None,
        evidence: str | None = None,
        hidden_names: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        """Nothing to describe."""

    def finish(self, status: str, stop_reason: str, **outcome: Any) -> None:
        """Nothing to end."""

    def slot_granted(self, queued_seconds: float) -> None:
        """Nothing to note."""

    def finished(self, **outcome: Any) -> None:
        """Nothing to end."""

    def failed(self, kind: str) -> None:
        """Nothing to end."""

    def timed_out(self) -> None:
        """Nothing to end."""


def question_span(
    front_end: str,
    *,
    capture_content: bool,
    attributes: Mapping[str, Any] | None = None,
) -> AbstractContextManager[QuestionTrace | Untraced]:
    """The question's span (spans.question_span), current for the block."""
    if not tracing_on():
        return nullcontext(Untraced())
    from .spans import question_span as started

    return started(front_end, capture_content=capture_content, attributes=attributes)


def question_trace() -> QuestionTrace | Untraced:
    """The question being answered in this context (spans.question_trace)."""
    if not tracing_on():
        return Untraced()
    from .spans import question_trace as current

    return current()


def episode_span(sample: int, seed: int | None, model: str) -> AbstractContextManager[EpisodeTrace | Untraced]:
    """A sample's episode (steps.episode_span)."""
    if not tracing_on():
        return nullcontext(Untraced())
    from .steps import episode_span as started

    return started(sample, seed, model)


def round_span(index: int, final: bool) -> AbstractContextManager[object]:
    """One model turn and what it called (steps.round_span)."""
    if not tracing_on():
        return nullcontext()
    from .steps import round_span as started

    return started(index, final)


def round_played(*, tool_calls: int, context_tokens: int) -> None:
    """What the round being played did (steps.round_played)."""
    if tracing_on():
        from .steps import round_played as played

        played(tool_calls=tool_calls, context_tokens=context_tokens)


def tool_span(
    tool: str, known: bool, arguments: Mapping[str, Any], *, implicit: bool = False
) -> AbstractContextManager[ToolTrace | Untraced]:
    """A call of `tool` (steps.tool_span)."""
    if not tracing_on():
        return nullcontext(Untraced())
    from .steps import tool_span as started

    return started(tool, known, arguments, implicit=implicit)


def statement_span(
    operation: str, namespace: str, sql: str | None
) -> AbstractContextManager[StatementTrace | Untraced]:
    """A statement the worker runs (steps.statement_span)."""
    if not tracing_on():
        return nullcontext(Untraced())
    from .steps import statement_span as started

    return started(operation, namespace, sql)

"""The spans of one answer, from the question down to each SQLite statement, and how each ends.

    invoke_workflow answer_sql_question      the question (front end, alias, token, samples, outcome)
      invoke_agent sqale-agent               one sample's episode (seed, queue time, status, rounds)
        sqale.round                          one model turn and the calls it made
          text_completion MODEL              the model call (agent/backends/traced.py)
          execute_tool TOOL                  one tool call (ok, rows)
            SELECT                           each statement the worker runs (agent/sqlite)

Only the OpenTelemetry API is used. A span that would not be recorded is not even started
(`wanted`: no SDK configured, or a parent the sampler dropped): the API's own no-op would still
attach a context for each span.
Spans never record exceptions or their messages (either may quote a question or SQL): a
failure sets `error.type` and a status description from a fixed list.
Content goes in only through `content.ContentPolicy` (off by default).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ..version import package_version
from . import names as n
from .content import ContentPolicy, capture, content_policy, narrow

TRACER = trace.get_tracer(n.INSTRUMENTATION_SCOPE, package_version())
# Outcomes a question ends in that are no answer: its span ends in error, saying which.
UNANSWERED = frozenset({"refused", "cancelled", "error", "failed"})


def wanted() -> bool:
    """Whether a span started here would be recorded: never while no SDK (or other implementation)
    provides the tracers (asked first, the cheaper question: a span skipped outright costs less than
    the API's own no-op, which still attaches a context); under a current span, when that one
    records (a trace the sampler dropped costs its children nothing); with none, always."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return False
    parent = trace.get_current_span()
    return parent.is_recording() if parent.get_span_context().is_valid else True


def fail(span: Span, kind: str, description: str | None = None) -> None:
    """End-state of a failed operation: `error.type` and an ERROR status (both from fixed lists)."""
    span.set_attribute(n.ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, description or kind))


def failure_kind(exc: BaseException) -> str:
    """A low-cardinality name for what ended an operation: `cancelled`, or the exception's class."""
    return "cancelled" if isinstance(exc, anyio.get_cancelled_exc_class()) else type(exc).__qualname__


def span(
    name: str, attributes: Mapping[str, Any], *, kind: SpanKind = SpanKind.INTERNAL
) -> AbstractContextManager[Span]:
    """A current span that, when the block raises, ends in error naming the exception's class only
    (the invalid span, at the cost of a null context, when it would not be recorded: `wanted`)."""
    return _recorded(name, attributes, kind) if wanted() else NOTHING


NOTHING = nullcontext(trace.INVALID_SPAN)


@contextmanager
def _recorded(name: str, attributes: Mapping[str, Any], kind: SpanKind) -> Iterator[Span]:
    with TRACER.start_as_current_span(
        name, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            if current.is_recording():
                fail(current, failure_kind(exc))
            raise


class QuestionTrace:
    """The span of the question being answered, filled in as the front end learns about it."""

    def __init__(self, current: Span, capture_content: bool) -> None:
        self.span = current
        self.capture_content = capture_content
        self.ended = False

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
        """What is asked, where, by whom; the content (when captured) without the database's hidden
        names (`hidden_names()`, asked only when content is captured)."""
        if not self.span.is_recording():
            return
        policy = ContentPolicy.of(True, hidden_names()) if self.capture_content else ContentPolicy()
        narrow(policy)
        self.span.set_attributes({n.DATABASE: database, n.SAMPLES: samples})
        if token is not None:
            self.span.set_attribute(n.TOKEN, token)
        if policy.capture:
            parts = [{"type": "text", "content": policy.text(text)} for text in (question, evidence) if text]
            self.span.set_attribute(n.INPUT_MESSAGES, policy.json([{"role": "user", "parts": parts}]) or "")

    def finish(
        self,
        status: str,
        stop_reason: str,
        *,
        rows: int | None = None,
        agreement: float | None = None,
        verified_tier: str | None = None,
        sql: str | None = None,
    ) -> None:
        """How the question ended; an outcome that is no answer (refused, cancelled, error, failed)
        ends the span in error, saying which as the log line does: `refused (quota)`."""
        self.ended = True
        if not self.span.is_recording():
            return
        self.span.set_attributes({n.STATUS: status, n.STOP_REASON: stop_reason})
        extra = {n.ROWS: rows, n.AGREEMENT: agreement, n.VERIFIED_TIER: verified_tier}
        self.span.set_attributes({k: v for k, v in extra.items() if v is not None})
        policy = content_policy()
        if sql is not None and policy.capture:
            answer = [{"role": "assistant", "parts": [{"type": "text", "content": policy.text(sql)}]}]
            self.span.set_attribute(n.OUTPUT_MESSAGES, policy.json(answer) or "")
        if status in UNANSWERED:
            fail(self.span, stop_reason, f"{status} ({stop_reason})")


_QUESTION: ContextVar[QuestionTrace | None] = ContextVar("sqale_question_trace", default=None)


def question_trace() -> QuestionTrace:
    """The question being answered in this context (a non-recording one outside any question)."""
    current = _QUESTION.get()
    return current if current is not None else QuestionTrace(trace.INVALID_SPAN, False)


def question_span(
    front_end: str, *, capture_content: bool, attributes: Mapping[str, Any] | None = None
) -> AbstractContextManager[QuestionTrace]:
    """The question's span, current for the block; content captured only with `capture_content`."""
    if not wanted():
        return nullcontext(QuestionTrace(trace.INVALID_SPAN, False))
    return _question(front_end, capture_content, attributes)


@contextmanager
def _question(
    front_end: str, capture_content: bool, attributes: Mapping[str, Any] | None
) -> Iterator[QuestionTrace]:
    started = {
        n.OPERATION_NAME: n.WORKFLOW,
        n.WORKFLOW_NAME_KEY: n.WORKFLOW_NAME,
        n.FRONT_END: front_end,
        **(attributes or {}),
    }
    with (
        TRACER.start_as_current_span(
            f"{n.WORKFLOW} {n.WORKFLOW_NAME}",
            attributes=started,
            record_exception=False,
            set_status_on_exception=False,
        ) as current,
        capture(ContentPolicy.of(capture_content)),
    ):
        handle = QuestionTrace(current, capture_content)
        token = _QUESTION.set(handle)
        try:
            yield handle
        except BaseException as exc:
            if not handle.ended and current.is_recording():  # the front end did not say how it ended
                fail(current, failure_kind(exc))
            raise
        finally:
            _QUESTION.reset(token)

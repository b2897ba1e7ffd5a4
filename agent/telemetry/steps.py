"""The spans below the question: each sample's episode, its rounds, tool calls and statements.

Their callers (agent/sampling.py, agent/loop.py, agent/sqlite) pass plain values, so this module
imports nothing of theirs. The model call's span is the backend wrapper's
(agent/backends/traced.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from . import names as n
from .content import content_policy
from .names import SCHEMA_READ
from .spans import NOTHING, TRACER, fail, failure_kind, span, wanted

# Statement kinds a statement span names (db.operation.name); any other first word is _OTHER,
# so text the model wrote never becomes a span's name.
STATEMENT_KINDS = frozenset(
    {
        "SELECT",
        "WITH",
        "VALUES",
        "PRAGMA",
        "EXPLAIN",
        "INSERT",
        "UPDATE",
        "DELETE",
        "REPLACE",
        "CREATE",
        "DROP",
        "ALTER",
        "ATTACH",
        "DETACH",
        "BEGIN",
        "COMMIT",
        "END",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE",
        "ANALYZE",
        "VACUUM",
        "REINDEX",
    }
)
INTERRUPTED = frozenset({"timeout", "killed", "cancelled"})  # QueryStatus values that stopped a statement


class EpisodeTrace:
    """One sample's episode span."""

    def __init__(self, current: Span) -> None:
        self.span = current
        self.stopped_early = False  # set when a majority agreed and the question stopped this sample

    def slot_granted(self, queued_seconds: float) -> None:
        """The sample got its runtime slot after waiting `queued_seconds`."""
        if self.span.is_recording():
            self.span.set_attribute(n.QUEUED_SECONDS, round(queued_seconds, 6))
            self.span.add_event("runtime slot granted")

    def finished(
        self, *, status: str, stop_reason: str, rounds: int, tool_calls: int, tokens: int, rows: int
    ) -> None:
        """How the episode ended; `failed` (nothing runnable) ends the span in error."""
        if not self.span.is_recording():
            return
        self.span.set_attributes(
            {
                n.STATUS: status,
                n.STOP_REASON: stop_reason,
                n.ROUNDS: rounds,
                n.TOOL_CALLS: tool_calls,
                n.CONTEXT_TOKENS: tokens,
                n.ROWS: rows,
            }
        )
        if status == "failed":
            fail(self.span, stop_reason, f"failed ({stop_reason})")

    def failed(self, kind: str) -> None:
        """The episode's backend failed (`kind`: the error's class)."""
        if self.span.is_recording():
            fail(self.span, kind)

    def timed_out(self) -> None:
        """The episode ran past the server's episode timeout."""
        if self.span.is_recording():
            self.span.set_attributes({n.STATUS: "error", n.STOP_REASON: "episode_timeout"})
            fail(self.span, "episode_timeout", "error (episode_timeout)")


def episode_span(sample: int, seed: int | None, model: str) -> AbstractContextManager[EpisodeTrace]:
    """A sample's episode, current for the block; a sample the vote stopped is no error."""
    return _episode(sample, seed, model) if wanted() else nullcontext(EpisodeTrace(trace.INVALID_SPAN))


@contextmanager
def _episode(sample: int, seed: int | None, model: str) -> Iterator[EpisodeTrace]:
    attributes: dict[str, Any] = {
        n.OPERATION_NAME: n.AGENT,
        n.AGENT_NAME_KEY: n.AGENT_NAME,
        n.REQUEST_MODEL: model,
        n.SAMPLE_INDEX: sample,
    }
    if seed is not None:
        attributes[n.REQUEST_SEED] = seed
    with TRACER.start_as_current_span(
        f"{n.AGENT} {n.AGENT_NAME}",
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        handle = EpisodeTrace(current)
        try:
            yield handle
        except BaseException as exc:
            if current.is_recording():
                if handle.stopped_early and isinstance(exc, anyio.get_cancelled_exc_class()):
                    current.set_attributes({n.STATUS: "stopped", n.STOP_REASON: "majority_agreed"})
                else:
                    fail(current, failure_kind(exc))
            raise


def round_span(index: int, final: bool) -> AbstractContextManager[Span]:
    """One model turn and what it called."""
    return span(n.ROUND, {n.ROUND_INDEX: index, n.ROUND_FINAL: final}) if wanted() else NOTHING


def round_played(*, tool_calls: int, context_tokens: int) -> None:
    """What the round being played did (inside its `round_span`): its calls, the episode's tokens after it."""
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes({n.TOOL_CALLS: tool_calls, n.CONTEXT_TOKENS: context_tokens})


class ToolTrace:
    """One tool call's span."""

    def __init__(self, current: Span) -> None:
        self.span = current

    def finished(self, *, ok: bool, rows: int | None, result: str) -> None:
        """Whether it worked, the rows its statement produced, and (content only) what the model read."""
        if not self.span.is_recording():
            return
        self.span.set_attribute(n.TOOL_OK, ok)
        if rows is not None:
            self.span.set_attribute(n.ROWS, rows)
        text = content_policy().text(result)
        if text is not None:
            self.span.set_attribute(n.TOOL_RESULT, text)
        if not ok:
            fail(self.span, "tool_error")


def tool_span(
    tool: str, known: bool, arguments: Mapping[str, Any], *, implicit: bool = False
) -> AbstractContextManager[ToolTrace]:
    """A call of `tool` (named only when `known`: the model may write any name)."""
    return _tool(tool, known, arguments, implicit) if wanted() else _NO_TOOL


@contextmanager
def _tool(tool: str, known: bool, arguments: Mapping[str, Any], implicit: bool) -> Iterator[ToolTrace]:
    name = tool if known else n.OTHER
    attributes: dict[str, Any] = {n.OPERATION_NAME: n.TOOL, n.TOOL_NAME: name, n.TOOL_TYPE: "function"}
    if implicit:
        attributes[n.TOOL_IMPLICIT] = True
    with span(f"{n.TOOL} {name}", attributes) as current:
        given = content_policy().json(dict(arguments))
        if given is not None:
            current.set_attribute(n.TOOL_ARGUMENTS, given)
        yield ToolTrace(current)


class StatementTrace:
    """One statement's span."""

    def __init__(self, current: Span) -> None:
        self.span = current

    def finished(self, *, status: str, returned: int, total: int, cut: bool, seconds: float) -> None:
        """How the statement ended (a QueryStatus value), its rows, what was cut, its time in the worker."""
        if not self.span.is_recording():
            return
        interrupted = status in INTERRUPTED
        self.span.set_attributes(
            {
                n.SQLITE_STATUS: status,
                n.DB_RETURNED_ROWS: returned,
                n.SQLITE_TOTAL_ROWS: total,
                n.SQLITE_CUT: cut,
                n.SQLITE_INTERRUPTED: interrupted,
                n.SQLITE_SECONDS: round(seconds, 6),
            }
        )
        if status != "ok":
            fail(self.span, status)


def statement_span(operation: str, namespace: str, sql: str | None) -> AbstractContextManager[StatementTrace]:
    """A statement the worker runs (`operation`: its first keyword; SCHEMA_READ for the schema)."""
    return _statement(operation, namespace, sql) if wanted() else _NO_STATEMENT


@contextmanager
def _statement(operation: str, namespace: str, sql: str | None) -> Iterator[StatementTrace]:
    kind = operation if operation in STATEMENT_KINDS or operation == SCHEMA_READ else n.OTHER
    with span(
        kind, {n.DB_SYSTEM: "sqlite", n.DB_OPERATION: kind, n.DB_NAMESPACE: namespace}, kind=SpanKind.CLIENT
    ) as current:
        text = content_policy().text(sql)
        if text is not None:
            current.set_attribute(n.DB_QUERY_TEXT, text)
        yield StatementTrace(current)


# What the helpers hand out while no SDK is configured: non-recording, reusable, free.
_NO_TOOL = nullcontext(ToolTrace(trace.INVALID_SPAN))
_NO_STATEMENT = nullcontext(StatementTrace(trace.INVALID_SPAN))

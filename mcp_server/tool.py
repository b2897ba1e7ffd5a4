"""The answer_sql_question tool: checks the arguments, runs one episode, shapes the answer."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from agent.episode import Round
from agent.errors import SqaleError
from agent.loop import run_episode
from agent.report import progress_message
from agent.slots import waiting_message

from .access import Caller, caller_of
from .draining import ServerStopping
from .output import (
    AnswerOutput,
    answer_from_episode,
    queued_message,
    render_answer_text,
)
from .quotas import QuotaExceeded
from .runtime import ServerRuntime
from .tool_errors import (
    empty_question,
    episode_timeout,
    server_stopped_answering,
    server_stopping,
    text_too_long,
    tool_error_for,
    unknown_database,
)

logger = logging.getLogger("mcp_server")

TOOL_NAME = "answer_sql_question"
ReportProgress = Callable[[float, float | None, str | None], Awaitable[None]]


async def answer_sql_question(
    question: Annotated[str, Field(description="The question in plain language, e.g. "
                                               "'Which 5 artists have the most tracks?'")],
    ctx: Context,
    database: Annotated[str | None, Field(description="Alias of a configured database (listed "
                                                      "in the tool description); may be omitted "
                                                      "when only one is configured")] = None,
    evidence: Annotated[str | None, Field(description="Optional hints about the data, e.g. what "
                                                      "a term means in columns and values")] = None,
) -> Annotated[CallToolResult, AnswerOutput]:
    """Answer a question about a configured SQLite database with a small local text-to-SQL model."""
    runtime: ServerRuntime = ctx.request_context.lifespan_context
    return await answer_question(runtime, question, database, evidence,
                                 report_progress=ctx.report_progress,
                                 caller=caller_of(ctx.request_context.request))


def resolve_alias(given: str | None, aliases: Sequence[str]) -> str:
    """The configured alias `given` names (exact, else the only case-insensitive match)."""
    if given is None or not given.strip():
        if len(aliases) == 1:
            return aliases[0]
        raise unknown_database(None, aliases)
    name = given.strip()
    if name in aliases:
        return name
    folded = [a for a in aliases if a.casefold() == name.casefold()]
    if len(folded) == 1:
        return folded[0]
    raise unknown_database(name, aliases)


def checked_text(name: str, value: str | None, limit: int) -> str | None:
    """`value` stripped, None when empty; ToolError when longer than `limit`."""
    text = (value or "").strip()
    if len(text) > limit:
        raise text_too_long(name, len(text), limit)
    return text or None


async def answer_question(runtime: ServerRuntime, question: str, database: str | None,
                          evidence: str | None, *, report_progress: ReportProgress,
                          caller: Caller) -> CallToolResult:
    """Run one episode for the call and return its CallToolResult; errors are ToolErrors."""
    settings = runtime.settings
    asked = checked_text("question", question, settings.max_question_chars)
    if asked is None:
        raise empty_question()
    hint = checked_text("evidence", evidence, settings.max_evidence_chars)
    # Out of scope and nonexistent aliases get the same error: it lists only the caller's own.
    alias = resolve_alias(database, caller.visible(runtime.catalog.aliases))
    question_id = uuid.uuid4().hex[:12]
    audit = _Audit(runtime, question_id, caller, asked, hint, alias)
    try:
        runtime.quotas.check_rate(caller)
        with runtime.gate.admit() as stop_scope:
            return await _answer(runtime, audit, report_progress, stop_scope)
    except QuotaExceeded as exc:
        runtime.metrics.questions.labels(alias, caller.name, "refused", "quota").inc()
        logger.info("refused on '%s' for token '%s': %s", alias, caller.name, exc,
                    extra={"question_id": question_id, "token": caller.name})
        raise ToolError(str(exc)) from exc
    except ServerStopping as exc:
        runtime.metrics.questions.labels(alias, caller.name, "refused", "stopping").inc()
        raise server_stopping() from exc


async def _answer(runtime: ServerRuntime, audit: _Audit, report_progress: ReportProgress,
                  stop_scope: anyio.CancelScope) -> CallToolResult:
    settings, alias, metrics = runtime.settings, audit.alias, runtime.metrics
    max_turns = runtime.episode_settings.max_tool_turns

    async def on_round(played: Round) -> None:
        await report_progress(played.index, max_turns + 1, progress_message(played, max_turns))

    async def on_wait(ahead: int) -> None:
        await report_progress(0, max_turns + 1, waiting_message(ahead))

    queued = time.perf_counter()
    deadline: anyio.CancelScope | None = None
    with stop_scope:
        async with runtime.quotas.of(audit.caller).concurrent.slot(on_wait):
            if runtime.limiter.available_tokens < 1:
                # Tell the client why nothing happens yet (progress also keeps client timeouts alive).
                await report_progress(0, max_turns + 1, queued_message(runtime.limiter.total_tokens))
            # The episode keeps its runtime slot for all its rounds, so its cached prompt prefix
            # stays; the timeout starts once it has the slot.
            async with runtime.limiter, runtime.slots.slot(on_wait):
                waited = time.perf_counter() - queued
                try:
                    with anyio.move_on_after(settings.episode_timeout) as deadline:
                        result = await run_episode(
                            audit.question, runtime.databases[alias], runtime.backend,
                            evidence=audit.evidence, prompts=runtime.prompts,
                            settings=runtime.episode_settings, on_round=on_round)
                except SqaleError as exc:
                    error = tool_error_for(exc, database=alias)
                    metrics.questions.labels(alias, audit.caller.name, "error", type(exc).__name__).inc()
                    await audit.write({"status": "error", "error": str(error)})
                    raise error from exc
    if stop_scope.cancelled_caught:
        error = server_stopped_answering()
        metrics.questions.labels(alias, audit.caller.name, "cancelled", "server_stopping").inc()
        await audit.write({"status": "cancelled", "error": str(error)})
        raise error
    if deadline is not None and deadline.cancelled_caught:
        error = episode_timeout(settings.episode_timeout)
        metrics.questions.labels(alias, audit.caller.name, "error", "episode_timeout").inc()
        await audit.write({"status": "error", "error": str(error)})
        raise error
    answer = answer_from_episode(result, database=alias, model=runtime.backend.model,
                                 max_rows=settings.max_rows, queued_seconds=waited)
    text = render_answer_text(answer)
    metrics.questions.labels(alias, audit.caller.name, answer.status, answer.stop_reason).inc()
    metrics.episode_seconds.labels(alias).observe(answer.seconds)
    metrics.episode_rounds.labels(alias).observe(answer.rounds)
    metrics.answer_bytes.labels(alias).observe(len(text.encode()))
    logger.info("answered on '%s' for token '%s': %s after %d rounds, %d tool calls, %.1f s "
                "(queued %.1f s)", alias, audit.caller.name, answer.status, answer.rounds,
                answer.tool_calls, answer.seconds, waited,
                extra={"question_id": audit.question_id, "token": audit.caller.name})
    await audit.write({
        "status": answer.status, "sql": answer.sql, "error": answer.error,
        "stop_reason": answer.stop_reason, "row_count": answer.row_count,
        "rounds": answer.rounds, "tool_calls": answer.tool_calls, "tokens": answer.tokens,
        "seconds": answer.seconds, "model_seconds": round(result.model_seconds, 3),
        "tool_seconds": round(result.tool_seconds, 3), "queued_seconds": round(waited, 3),
        "trace": [entry.model_dump(mode="json") for entry in answer.trace],
    })
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=answer.model_dump(mode="json"))


@dataclass(frozen=True)
class _Audit:
    """One question's episode-log line: who asked what, on which database."""

    runtime: ServerRuntime
    question_id: str
    caller: Caller
    question: str
    evidence: str | None
    alias: str

    async def write(self, fields: dict[str, Any]) -> None:
        """Append the line; shielded, so a cancelled question still leaves a whole line."""
        log = self.runtime.episode_log
        if log is None:
            return
        with anyio.CancelScope(shield=True):
            await log.append({
                "question_id": self.question_id, "token": self.caller.name,
                "question": self.question, "evidence": self.evidence, "database": self.alias,
                "model": self.runtime.backend.model, **fields})

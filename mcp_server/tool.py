"""The answer_sql_question tool: checks the arguments, runs one episode, shapes the answer."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from agent.episode import Round
from agent.errors import SqaleError
from agent.loop import run_episode
from agent.report import progress_message
from agent.slots import waiting_message

from .output import (
    AnswerOutput,
    answer_from_episode,
    queued_message,
    render_answer_text,
)
from .runtime import ServerRuntime
from .tool_errors import (
    empty_question,
    episode_timeout,
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
                                 report_progress=ctx.report_progress)


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
                          evidence: str | None, *, report_progress: ReportProgress) -> CallToolResult:
    """Run one episode for the call and return its CallToolResult; errors are ToolErrors."""
    settings = runtime.settings
    asked = checked_text("question", question, settings.max_question_chars)
    if asked is None:
        raise empty_question()
    hint = checked_text("evidence", evidence, settings.max_evidence_chars)
    alias = resolve_alias(database, runtime.catalog.aliases)
    max_turns = runtime.episode_settings.max_tool_turns

    async def on_round(played: Round) -> None:
        await report_progress(played.index, max_turns + 1, progress_message(played, max_turns))

    async def on_wait(ahead: int) -> None:
        await report_progress(0, max_turns + 1, waiting_message(ahead))

    queued = time.perf_counter()
    if runtime.limiter.available_tokens < 1:
        # Tell the client why nothing happens yet (progress also keeps some client timeouts alive).
        await report_progress(0, max_turns + 1, queued_message(runtime.limiter.total_tokens))
    # The episode keeps its runtime slot for all its rounds, so its cached prompt prefix stays;
    # the timeout starts once it has the slot.
    async with runtime.limiter, runtime.slots.slot(on_wait):
        waited = time.perf_counter() - queued
        try:
            with anyio.move_on_after(settings.episode_timeout) as deadline:
                result = await run_episode(
                    asked, runtime.databases[alias], runtime.backend, evidence=hint,
                    prompts=runtime.prompts, settings=runtime.episode_settings, on_round=on_round)
        except SqaleError as exc:
            error = tool_error_for(exc, database=alias)
            await _audit(runtime, asked, hint, alias, {"status": "error", "error": str(error)})
            raise error from exc
    if deadline.cancelled_caught:
        error = episode_timeout(settings.episode_timeout)
        await _audit(runtime, asked, hint, alias, {"status": "error", "error": str(error)})
        raise error
    answer = answer_from_episode(result, database=alias, model=runtime.backend.model,
                                 max_rows=settings.max_rows, queued_seconds=waited)
    logger.info("answered on '%s': %s after %d rounds, %d tool calls, %.1f s (queued %.1f s)",
                alias, answer.status, answer.rounds, answer.tool_calls, answer.seconds, waited)
    await _audit(runtime, asked, hint, alias, {
        "status": answer.status, "sql": answer.sql, "error": answer.error,
        "stop_reason": answer.stop_reason, "row_count": answer.row_count,
        "rounds": answer.rounds, "tool_calls": answer.tool_calls, "tokens": answer.tokens,
        "seconds": answer.seconds, "model_seconds": round(result.model_seconds, 3),
        "tool_seconds": round(result.tool_seconds, 3), "queued_seconds": round(waited, 3),
        "trace": [entry.model_dump(mode="json") for entry in answer.trace],
    })
    return CallToolResult(content=[TextContent(type="text", text=render_answer_text(answer, runtime.limits))],
                          structured_content=answer.model_dump(mode="json"))


async def _audit(runtime: ServerRuntime, question: str, evidence: str | None, alias: str,
                 fields: dict[str, Any]) -> None:
    if runtime.episode_log is not None:
        hide = runtime.databases[alias].hide
        hidden = {"hide_rules": list(hide.texts)} if hide else {}
        await runtime.episode_log.append({
            "question": question, "evidence": evidence, "database": alias,
            "model": runtime.backend.model, **hidden, **fields})

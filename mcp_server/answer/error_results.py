"""Structured content on the failed calls the SDK answers itself (bad arguments, a crash)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from pydantic import BaseModel

from ..serving.access import caller_of
from .output import unanswered
from .tool import ERROR_PREFIX, TOOL_NAME, known_alias
from .tool_errors import INVALID_ARGUMENTS


class StructuredToolErrors(ServerMiddleware[Any]):
    """Adds structured content to an isError result of answer_sql_question that has none.

    Our own failures already carry it (tool.error_response); arguments that fail the SDK's
    validation, and crashes, come back from the SDK without it. Cursor rejects a result of a
    tool with an output schema that has no structured content, errors included.
    """

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The call's result, with the structured content of a failed call when it lacks one."""
        result = await call_next(ctx)
        params = ctx.params or {}
        if ctx.method != "tools/call" or params.get("name") != TOOL_NAME:
            return result
        wire = result.model_dump(mode="json", by_alias=True, exclude_none=True) \
            if isinstance(result, BaseModel) else result
        if not isinstance(wire, dict) or not wire.get("isError") or wire.get("structuredContent") is not None:
            return result
        texts = [c.get("text", "") for c in wire.get("content", []) if c.get("type") == "text"]
        message = texts[0] if texts else "the call failed"
        # The SDK words an argument error as its prefix and the reason; a crash as the bare prefix.
        kind = INVALID_ARGUMENTS if message.startswith(ERROR_PREFIX) else "internal_error"
        return {**wire, "structuredContent": failed_call_content(
            ctx, message.removeprefix(ERROR_PREFIX), kind, params.get("arguments"))}


def failed_call_content(ctx: ServerRequestContext[Any, Any], message: str, kind: str,
                        arguments: object) -> dict[str, Any]:
    """The structured content of a failed call, from what the call's arguments say."""
    given = arguments if isinstance(arguments, Mapping) else {}
    runtime = ctx.lifespan_context
    database, question = given.get("database"), given.get("question")
    aliases = caller_of(ctx.request).visible(runtime.catalog.aliases)
    return unanswered(
        message, status="error", kind=kind,
        database=known_alias(database, aliases) if isinstance(database, str) else None,
        question=question[:runtime.settings.max_question_chars] if isinstance(question, str) else "",
        model=runtime.model_label).model_dump(mode="json")

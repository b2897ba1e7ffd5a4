"""Structured content on the failed calls the SDK answers itself (bad arguments, a crash)."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from pydantic import BaseModel, TypeAdapter, ValidationError

from ..opening import ready_state
from ..serving.access import caller_of
from .arguments import known_alias
from .output import unanswered
from .tool import ERROR_PREFIX, TOOL_NAME, answer_sql_question
from .tool_errors import ARGUMENTS_ACCEPTED, INVALID_ARGUMENTS, wrong_arguments


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
        # The SDK words an argument error as its prefix and pydantic's report (the input echoed, a
        # model name, a URL); a crash as the bare prefix. Ours names each argument instead.
        arguments = params.get("arguments")
        if not message.startswith(ERROR_PREFIX):
            content = await failed_call_content(ctx, message, "internal_error", arguments)
            return {**wire, "structuredContent": content}
        server_state = await ready_state(ctx.lifespan_context)
        reason = str(argument_error(arguments, server_state.settings.max_samples))
        return {**wire, "content": [{"type": "text", "text": f"{ERROR_PREFIX}{reason}"}],
                "structuredContent": await failed_call_content(ctx, reason, INVALID_ARGUMENTS, arguments)}


def argument_error(arguments: object, max_samples: int) -> Exception:
    """The one-line error for arguments the SDK refused: each missing or mistyped one, and what it accepts.

    Each argument is checked against the tool function's own annotation, with the same
    (pydantic) validation the SDK applies, so the two never disagree about a value.
    """
    given = arguments if isinstance(arguments, Mapping) else {}
    adapters = _argument_adapters()
    missing = [name for name, (_, required) in adapters.items() if required and name not in given]
    wrong = []
    for name, (adapter, _) in adapters.items():
        if name in given:
            try:
                adapter.validate_python(given[name])
            except ValidationError:
                wrong.append((name, given[name]))
    return wrong_arguments(wrong, missing, max_samples)


@functools.cache
def _argument_adapters() -> dict[str, tuple[TypeAdapter[Any], bool]]:
    """Each argument of answer_sql_question: a validator of its annotation, and whether it is required."""
    hints = typing.get_type_hints(answer_sql_question, include_extras=True)
    parameters = inspect.signature(answer_sql_question).parameters
    return {name: (TypeAdapter(hints[name]), parameters[name].default is inspect.Parameter.empty)
            for name in ARGUMENTS_ACCEPTED}


async def failed_call_content(ctx: ServerRequestContext[Any, Any], message: str, kind: str,
                        arguments: object) -> dict[str, Any]:
    """The structured content of a failed call, from what the call's arguments say."""
    given = arguments if isinstance(arguments, Mapping) else {}
    runtime = await ready_state(ctx.lifespan_context)
    database, question = given.get("database"), given.get("question")
    aliases = caller_of(ctx.request).visible(runtime.catalog.aliases)
    return unanswered(
        message, status="error", kind=kind,
        database=known_alias(database, aliases) if isinstance(database, str) else None,
        question=question[:runtime.settings.max_question_chars] if isinstance(question, str) else "",
        model=runtime.model_label).model_dump(mode="json")

"""What runs first on every message the server gets, in this order (app.py puts it outermost):

1. a call of one of our tools counts its first episode of its token's minute
   (serving/quotas.TokenQuotas.admit) and is refused past it, the refusal counted and logged
   within the token's refusal-log budget (audit.record_refusal), before anything reads the call;
   a call of a question its token already has being answered (ongoing.py) starts no episode and
   counts none;
2. the request's `_meta`, any JSON a client sent, is checked (serving/meta.py): trace fields that
   are no header text are left out, a `progressToken` that cannot be echoed is refused;

then our telemetry (serving/tracing.py), the SDK's span, and the rest. So a call that fails
anywhere after it (its `_meta`, its arguments, a bug of ours) has counted against its token, and
nothing past this point reads an unchecked `_meta` field.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, RequestParams, TextContent

from agent.telemetry.gate import question_span

from ..opening import ready_state
from ..serving.access import Caller, caller_of
from ..serving.meta import MetaRefused, checked_meta, trace_fields
from ..serving.quotas import QuotaExceeded
from ..state import ServerState
from .arguments import known_alias
from .audit import CallLog, Refused, record_refusal
from .saving import SAVE_TOOL_NAME
from .tool import TOOL_NAME, error_response


class Admission(ServerMiddleware[Any]):
    """The quota of a call of `tools` (ours), then the `_meta` of every message; see the module."""

    def __init__(self, tools: frozenset[str]) -> None:
        self.tools = tools
        self.fields = trace_fields()

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The rest of the chain, once the call is admitted and its `_meta` checked."""
        params = ctx.params or {}
        name = params.get("name") if ctx.method == "tools/call" else None
        if not isinstance(name, str) or name not in self.tools:
            return await call_next(self._checked(ctx))
        server_state = await ready_state(ctx.lifespan_context)
        caller = caller_of(ctx.request)
        if name == TOOL_NAME and server_state.ongoing.asks(caller.name, params.get("arguments")):
            return await call_next(self._checked(ctx))  # it waits for a question already counted
        try:
            admitted = server_state.quotas.admit(caller)
        except QuotaExceeded as exc:
            return await refused(server_state, caller, name, params.get("arguments"), str(exc))
        with admitted:
            return await call_next(self._checked(ctx))

    def _checked(self, ctx: ServerRequestContext[Any, Any]) -> ServerRequestContext[Any, Any]:
        """`ctx` with its `_meta` checked (MCPError naming the field when it cannot be served)."""
        params = ctx.params
        if not params or "_meta" not in params:
            return ctx
        try:
            meta = checked_meta(params["_meta"], self.fields, request=ctx.request_id is not None)
        except MetaRefused as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
        if meta is params["_meta"]:
            return ctx
        # Past here the SDK reads `ctx.params` (the handler's arguments) and `ctx.meta` (its own
        # validated view of `_meta`): both are the checked ones.
        cleaned = {**params, "_meta": meta}
        return dataclasses.replace(ctx, params=cleaned,
                                   meta=RequestParams.model_validate({"_meta": meta}, by_name=False).meta)


async def refused(server_state: ServerState, caller: Caller, tool: str, arguments: object,
                  message: str) -> HandlerResult:
    """The failed result of a call refused for its quota when it arrived, counted and logged as a
    refused question (a save: as a refused save)."""
    given = arguments if isinstance(arguments, Mapping) else {}
    question = given.get("question") if isinstance(given.get("question"), str) else ""
    database = given.get("database") if isinstance(given.get("database"), str) else None
    alias = known_alias(database, caller.visible(server_state.catalog.aliases)) or ""
    samples = given.get("samples")
    refusal = Refused(message, "quota")
    log = CallLog(uuid.uuid4().hex[:12], caller.name)
    if tool == SAVE_TOOL_NAME:
        server_state.metrics.saves.labels(alias, caller.name, "quota").inc()
        return CallToolResult(content=[TextContent(type="text", text=f"Not saved: {message}")], is_error=True)
    with question_span("mcp", capture_content=server_state.settings.trace_content) as traced:
        traced.finish("refused", "quota")  # a question's span, as one refused where it runs has
    await record_refusal(server_state, log, caller, alias=alias, question=str(question),
                         samples=samples if isinstance(samples, int) else None, refused=refusal)
    if tool == TOOL_NAME:
        return error_response(refusal, database=alias or None, model=server_state.model_label,
                              question=str(question)[:server_state.settings.max_question_chars])
    return CallToolResult(content=[TextContent(type="text", text=f"Error executing tool {tool}: {message}")],
                          is_error=True)

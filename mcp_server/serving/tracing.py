"""The MCP side of OpenTelemetry: the caller's trace from the HTTP headers, and the MCP metric.

The SDK's own `OpenTelemetryMiddleware` (on by default in every `MCPServer`) makes the
`{mcp.method.name} {target}` SERVER span of each message, continuing the trace context the
request's `_meta` carries (`traceparent`, `tracestate`, `baggage`), in either protocol
era. `McpTelemetry` runs just outside it (first in the server's middleware list) and adds what
the SDK does not do:

- a request whose `_meta` carries no valid `traceparent` continues the one its HTTP request's
  headers carry (W3C Trace Context, read by the configured propagators): the SDK's span then
  takes it as its ambient parent, as the conventions say a server should when `_meta` has none;
- `mcp.server.operation.duration` (seconds, the conventions' buckets) for every message, with
  `mcp.method.name`, `gen_ai.tool.name` and `gen_ai.operation.name` for a tool call,
  `mcp.protocol.version`, `network.transport` (pipe on stdio, tcp on HTTP), and `error.type`
  (the JSON-RPC error code, `tool_error` for an isError result, else the exception's class).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from opentelemetry import context, metrics, propagate, trace
from pydantic import BaseModel

from agent import package_version, tracing_on
from agent.telemetry import names as n

_METER = metrics.get_meter(n.INSTRUMENTATION_SCOPE, package_version())
SERVER_DURATION = _METER.create_histogram(
    n.MCP_SERVER_DURATION,
    unit="s",
    description="MCP request or notification duration as observed on the receiver from the time it was "
    "received until the result or ack is sent.",
    explicit_bucket_boundaries_advisory=n.MCP_SERVER_DURATION_BUCKETS,
)


def carries_trace(carrier: Mapping[str, Any] | None) -> bool:
    """True when `carrier` (a `_meta`, HTTP headers) holds a valid W3C trace context."""
    if not carrier:
        return False
    return trace.get_current_span(propagate.extract(carrier)).get_span_context().is_valid


def headers_of(request: Any) -> Mapping[str, str] | None:
    """The HTTP request's headers (None on stdio, where there is no request)."""
    headers = getattr(request, "headers", None)
    return headers if isinstance(headers, Mapping) else None


def error_type(result: HandlerResult) -> str | None:
    """`tool_error` for a result that reaches the wire as a failed tool call; None otherwise."""
    wire = result.model_dump(by_alias=True, exclude_none=True) if isinstance(result, BaseModel) else result
    return "tool_error" if isinstance(wire, Mapping) and wire.get("isError") is True else None


class McpTelemetry(ServerMiddleware[Any]):
    """The HTTP headers' trace context where `_meta` has none, and mcp.server.operation.duration.

    The metric names a method or tool only when it is a known one (`tools`: the server's), so a
    client cannot add labels by sending made-up names.
    """

    def __init__(self, tools: frozenset[str]) -> None:
        self.tools = tools

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The rest of the chain, timed, under the caller's trace."""
        if not tracing_on():  # nothing would record it
            return await call_next(ctx)
        headers = headers_of(ctx.request)
        token = None
        if headers is not None and not carries_trace(ctx.meta) and carries_trace(headers):
            token = context.attach(propagate.extract(headers))
        attributes = self._attributes(ctx, headers is None)
        started = time.perf_counter()
        try:
            result = await call_next(ctx)
        except BaseException as exc:
            code = str(exc.error.code) if isinstance(exc, MCPError) else type(exc).__qualname__
            SERVER_DURATION.record(time.perf_counter() - started, {**attributes, n.ERROR_TYPE: code})
            raise
        finally:
            if token is not None:
                context.detach(token)
        failed = error_type(result) if ctx.method == "tools/call" else None
        SERVER_DURATION.record(
            time.perf_counter() - started, {**attributes, **({n.ERROR_TYPE: failed} if failed else {})}
        )
        return result

    def _attributes(self, ctx: ServerRequestContext[Any, Any], stdio: bool) -> dict[str, Any]:
        method = ctx.method if ctx.method in n.MCP_METHODS else n.OTHER
        found: dict[str, Any] = {n.MCP_METHOD: method, n.NETWORK_TRANSPORT: "pipe" if stdio else "tcp"}
        if ctx.protocol_version:
            found[n.MCP_PROTOCOL_VERSION] = ctx.protocol_version
        if method == "tools/call":
            target = (ctx.params or {}).get("name")
            found.update({n.TOOL_NAME: target if target in self.tools else n.OTHER, n.OPERATION_NAME: n.TOOL})
        return found

"""The real wire: a server and `sqale-agent ask`, configured only by OTEL_* variables, export
with the official OTLP/HTTP exporter to a receiver in this test, which decodes each request
with the official protobuf definitions (opentelemetry-proto).

The server runs as `sqale-mcp` does for an operator (a subprocess, streamable HTTP); a caller's
trace arrives in `_meta` in both protocol eras and in the HTTP headers; the metrics arrive with
the conventions' names.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

pytest.importorskip("opentelemetry.proto", reason="the otel extra is not installed (pip install -e '.[dev]')")
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import context, propagate, trace
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from agent.sqlite import create_database
from agent.telemetry import names as n
from tests.support.console import console_script
from tests.support.mcp import BOOK_GOLD, REPO, TOOL, running_http_server, server_env
from tests.support.policies import OraclePolicy
from tests.support.telemetry import Telemetry

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
HEADER_TRACE = "0af7651916cd43dd8448eb211c80319c"
HEADER_SPAN = "b7ad6b7169203331"
QUESTION = "How many books are there?"


class Receiver:
    """What an OTLP/HTTP collector received, decoded: the spans, the metrics' names, the resources."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: set[str] = set()
        self.resources: list[dict[str, Any]] = []
        self.content_types: set[str] = set()
        self.lock = threading.Lock()

    def take(self, path: str, content_type: str, body: bytes) -> bytes:
        with self.lock:
            self.content_types.add(content_type)
            if path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    self.resources.append(_values(resource.resource.attributes))
                    for scope in resource.scope_spans:
                        self.spans += [
                            {
                                "name": s.name,
                                "trace": s.trace_id.hex(),
                                "id": s.span_id.hex(),
                                "parent": s.parent_span_id.hex(),
                                "attributes": _values(s.attributes),
                                "status": s.status.code,
                            }
                            for s in scope.spans
                        ]
                return ExportTraceServiceResponse().SerializeToString()
            sent = ExportMetricsServiceRequest.FromString(body)
            self.metrics |= {m.name for r in sent.resource_metrics for s in r.scope_metrics for m in s.metrics}
            return ExportMetricsServiceResponse().SerializeToString()

    def named(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.spans if s["name"] == name]

    def under(self, root: dict[str, Any]) -> list[dict[str, Any]]:
        """`root` and every span below it."""
        with self.lock:
            spans = list(self.spans)
        found, frontier = [root], [root["id"]]
        while frontier:
            children = [s for s in spans if s["parent"] in frontier]
            found += children
            frontier = [s["id"] for s in children]
        return found


def _values(attributes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None
    return out


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Receiver]]:
    """An OTLP/HTTP receiver on a free loopback port: its base URL and what it received."""
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            reply = received.take(self.path, self.headers.get("content-type", ""), body)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def otel_env(endpoint: str) -> dict[str, str]:
    """Only standard variables: where to send, and export soon (the defaults wait 5 s and 60 s)."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
    }


async def eventually(check: Any, seconds: float = 30.0) -> None:
    with anyio.fail_after(seconds):
        while not check():
            await anyio.sleep(0.1)


@contextmanager
def caller_span(trace_hex: str, span_hex: str) -> Iterator[None]:
    """The caller's own (remote) span, current while its client calls."""
    parent = trace.NonRecordingSpan(
        trace.SpanContext(
            int(trace_hex, 16), int(span_hex, 16), is_remote=True, trace_flags=trace.TraceFlags(1)
        )
    )
    token = context.attach(trace.set_span_in_context(parent))
    try:
        yield
    finally:
        context.detach(token)


@contextmanager
def client_without_meta_propagation() -> Iterator[None]:
    """The SDK's client injects nothing into `_meta` (no propagator in this test process)."""
    previous = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([]))
    try:
        yield
    finally:
        propagate.set_global_textmap(previous)


@pytest.mark.timeout(240)
async def test_the_server_exports_one_trace_per_answer_over_otlp(
    tmp_path: Path, fake_ollama: Any, otel: Telemetry
) -> None:
    """Both eras carry the caller's trace in `_meta`; a request without one continues the trace of
    its HTTP `traceparent` header; spans and metrics arrive as OTLP protobuf, under the service
    sqale-mcp, with the conventions' metric names. (`otel` records the client's own spans, so the
    handshake-era client sends a sampled `traceparent` as a traced caller would.)"""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    with (
        otlp_receiver() as (endpoint, received),
        running_http_server(tmp_path, "--demo", "--ollama-host", fake.url, **otel_env(endpoint)) as url,
    ):
        for mode, trace_hex in (("legacy", CALLER_TRACE), ("auto", CALLER_TRACE[::-1])):
            async with (
                httpx2.AsyncClient(timeout=60) as http,
                Client(streamable_http_client(url, http_client=http), mode=mode) as client,
            ):  # type: ignore[arg-type]
                with caller_span(trace_hex, CALLER_SPAN):
                    result = await client.call_tool(
                        TOOL, {"question": QUESTION}, meta={"traceparent": f"00-{trace_hex}-{CALLER_SPAN}-01"}
                    )
            assert not result.is_error
        headers = {"traceparent": f"00-{HEADER_TRACE}-{HEADER_SPAN}-01"}
        with client_without_meta_propagation():  # a caller whose trace is in its HTTP headers only
            async with (
                httpx2.AsyncClient(timeout=60, headers=headers) as http,
                Client(streamable_http_client(url, http_client=http), mode="auto") as client,
            ):
                assert not (await client.call_tool(TOOL, {"question": QUESTION})).is_error
        await eventually(
            lambda: (
                len(received.named(f"tools/call {TOOL}")) == 3
                and len(received.named("invoke_workflow answer_sql_question")) == 3
                and {n.MCP_SERVER_DURATION, n.TOKEN_USAGE, n.OPERATION_DURATION} <= received.metrics
            )
        )
    calls = {c["trace"]: c for c in received.named(f"tools/call {TOOL}")}
    assert set(calls) == {CALLER_TRACE, CALLER_TRACE[::-1], HEADER_TRACE}
    for trace_hex in (CALLER_TRACE, CALLER_TRACE[::-1]):  # the client's own span, child of the caller's
        sent = [
            s
            for s in otel.named(f"MCP send tools/call {TOOL}")
            if format(s.context.trace_id, "032x") == trace_hex
        ]
        parent = format(sent[0].context.span_id, "016x") if sent else CALLER_SPAN
        assert calls[trace_hex]["parent"] == parent
    assert calls[HEADER_TRACE]["parent"] == HEADER_SPAN  # no trace in _meta: the HTTP header's
    for trace_hex, call in calls.items():
        spans = received.under(call)
        assert {s["trace"] for s in spans} == {trace_hex}
        names = [s["name"] for s in spans]
        assert {
            "invoke_workflow answer_sql_question",
            "invoke_agent sqale-agent",
            "sqale.round",
            "execute_tool run_query",
            "SELECT",
        } <= set(names)
        assert names.count("sqale.round") == 3
    completion = next(s for s in received.spans if s["name"].startswith("text_completion "))
    assert (completion["attributes"][n.PROVIDER_NAME], completion["attributes"][n.SERVER_ADDRESS]) == (
        "ollama",
        "127.0.0.1",
    )
    assert {r.get("service.name") for r in received.resources} == {"sqale-mcp"}
    assert received.content_types == {"application/x-protobuf"}


@pytest.mark.timeout(120)
def test_ask_exports_the_same_spans_over_otlp(tmp_path: Path, fake_ollama: Any) -> None:
    """`sqale-agent ask` with OTEL_EXPORTER_OTLP_ENDPOINT: one trace, rooted at its question, the
    same spans as the server's below it, under the service sqale-agent, flushed as it exits."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    db = create_database(
        tmp_path / "books.db",
        "CREATE TABLE books (id INTEGER PRIMARY KEY, title TEXT);"
        "INSERT INTO books (title) VALUES ('a'), ('b');",
    )
    with otlp_receiver() as (endpoint, received):
        done = subprocess.run(
            [console_script("sqale-agent"), "ask", "--db", str(db), "--ollama-host", fake.url, QUESTION],
            cwd=REPO,
            env=server_env(tmp_path, **otel_env(endpoint)),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stderr
    roots = [s for s in received.spans if not s["parent"] and s["name"] != "read_schema"]
    assert [r["name"] for r in roots] == ["invoke_workflow answer_sql_question"]
    question = roots[0]
    assert (
        question["attributes"][n.FRONT_END],
        question["attributes"][n.DATABASE],
        question["attributes"][n.STATUS],
    ) == ("ask", "books.db", "submitted")
    names = [s["name"] for s in received.under(question)]
    assert names.count("sqale.round") == 3 and names.count("execute_tool run_query") == 1
    assert {"invoke_agent sqale-agent", "text_completion qwen3.5-2b-grpo-synsql", "SELECT"} <= set(names)
    assert {r.get("service.name") for r in received.resources} == {"sqale-agent"}

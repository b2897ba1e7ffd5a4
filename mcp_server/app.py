"""Building the MCP server from settings, and running it on the configured transport."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.context import ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.request_state import RequestStateSecurity
from mcp_types import ToolAnnotations

from agent import (
    AskMode,
    ConfigError,
    PromptSet,
    WorkerLimits,
    WorkerPool,
    make_backend,
    package_version,
    tracing_on,
)

from .answer.door import Admission, StructuredToolErrors, answer_sql_question
from .answer.output import TOOL_NAME
from .answer.view import (
    Advertise,
    AnswerView,
    ClientListing,
    advertised_input_schema,
    app_only_tools,
    choice_tools,
)
from .config.catalog import (
    Catalog,
    attach_notes,
    attach_verified,
    collect_databases,
    hide_rules_by_alias,
    load_catalog,
)
from .config.description import example_question, tool_description
from .config.libraries import library_paths
from .config.limits import MAX_ROWS_BYTES, AnswerLimits, answer_size_notice, result_size_meta
from .config.server_settings import ServerSettings
from .serving.access import TokenTable, caller_of, token_table
from .serving.draining import QuestionGate
from .serving.log_format import configure_logging
from .serving.stdio_shim import sdk_logging_skipped, serve_stdio
from .serving.stopping import exit_on_stop_signal, print_tty_notice
from .state import BackendFactory, EpisodeLog, ServerState, StateOpening, open_state, server_prompts

if TYPE_CHECKING:
    from .answer.question import Answering
    from .serving.metrics import ServerMetrics

__all__ = ["SqaleServer", "build_server", "configure_logging"]  # configure_logging: for callers

logger = logging.getLogger(__name__)

SERVICE = "sqale-mcp"  # OpenTelemetry's service name, unless OTEL_SERVICE_NAME says otherwise
# `mcp dev` adds these to the `uv run --with mcp==X mcp run ...` it starts: `mcp run` needs typer.
MCP_DEV_DEPENDENCIES = ("mcp[cli]",)
# A 2026-07-28 reply later than --ask-timeout still gets the vote's answer (saying it came late)
# for this long; after that the SDK refuses the state ("Invalid or expired requestState").
LATE_REPLY_SECONDS = 600.0
# The stdio server opens its state once its first reply is written, or after this long without one.
FIRST_REPLY_WAIT = 0.25
INSTRUCTIONS = (
    "Use answer_sql_question to answer questions about the configured SQLite databases. "
    "A small local model writes the SQL: read the SQL it returns before trusting the numbers."
)


class SqaleServer(MCPServer["StateOpening[Answering]"]):
    """The MCPServer with one tool; `run()` honours our transport, host, port and auth settings."""

    def __init__(
        self,
        settings: ServerSettings,
        catalog: Catalog,
        prompts: PromptSet,
        backend_factory: BackendFactory,
        tokens: TokenTable,
        libraries: Mapping[str, Path] | None = None,  # the verified libraries' files, by alias
    ) -> None:
        gate = QuestionGate()
        tool, advertise = answer_tool(settings, catalog, AnswerLimits.from_settings(settings))
        state_closed = threading.Event()  # set once the runtime's workers are stopped

        def answering() -> AbstractAsyncContextManager[Answering]:
            # Called when the state opens (on stdio after the first reply): the metrics are made then.
            state = open_state(
                settings,
                catalog,
                prompts,
                backend_factory,
                gate=gate,
                metrics=self.metrics,
                callers=tokens.callers,
                library_paths=libraries,
            )
            return answering_over(state)

        @asynccontextmanager
        async def lifespan(_: MCPServer[StateOpening[Answering]]) -> AsyncIterator[StateOpening[Answering]]:
            # On stdio (and in-process) the state opens beside the serving loop, so the handshake
            # does not wait for it (state.py); the handlers that need it wait for it instead.
            opening: StateOpening[Answering] = StateOpening()
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._open_state, opening, answering)
                    if self.state_before_serving:
                        await opening.ready()
                    try:
                        yield opening
                    finally:
                        group.cancel_scope.cancel()  # closes the state, or stops its opening
            finally:
                state_closed.set()

        view = AnswerView() if settings.answer_view else None
        extras = (*app_only_tools(settings), *choice_tools(settings))
        if view is not None:
            # App-only tools (e.g. "Propose as verified" with --verified-writable): hosts with MCP
            # Apps list them for the view's buttons, to the callers they are offered to; the model
            # never sees them.
            for extra in extras:
                view.app_tool(
                    extra.fn,
                    name=extra.name,
                    title=extra.title,
                    description=extra.description,
                    offered=extra.offered,
                )
        with sdk_logging_skipped():  # ours is configured: the SDK's would import rich for nothing
            super().__init__(
                name="sqale-mcp",
                version=package_version(),
                instructions=INSTRUCTIONS,
                lifespan=lifespan,
                log_level=settings.log_level,
                middleware=[
                    ClientListing(
                        catalog, advertise, view=view, asks=settings.ask_to_choose is not AskMode.OFF
                    ),
                    StructuredToolErrors(),
                ],
                extensions=[view] if view else None,
                request_state_security=request_state_security(settings),
                dependencies=list(MCP_DEV_DEPENDENCIES),
                tools=[tool],
            )
        # Ahead of the SDK's OpenTelemetry span, in this order: a call's quota and every message's
        # `_meta` checked (door.Admission: nothing after reads an unchecked field, and a call that
        # fails after it has counted), then our telemetry (the HTTP headers' trace, the MCP metric).
        tools = frozenset({TOOL_NAME, *(extra.name for extra in extras)})
        first: list[ServerMiddleware[Any]] = [Admission(tools)]
        if tracing_on():  # started before the server is built (__main__, server.py)
            from .serving.tracing import McpTelemetry

            first.append(McpTelemetry(tools))
        self.middleware[0:0] = first
        self.sqale_settings = settings
        self.catalog = catalog
        self.state_closed = state_closed
        # True: the lifespan opens the state before serving starts (HTTP: a server that takes
        # connections is ready, its metrics whole); False: beside it (stdio, in-process).
        self.state_before_serving = False
        self._first_reply: anyio.Event | None = None  # stdio: set once the first reply is written
        self.tokens = tokens
        self.gate = gate

    @functools.cached_property
    def metrics(self) -> ServerMetrics:
        """The server's Prometheus metrics, made at first use: over HTTP before it serves, on stdio
        when the state opens (prometheus_client is no part of the handshake; its figures are served
        over HTTP only)."""
        from .serving.metrics import ServerMetrics

        return ServerMetrics()

    async def _open_state(
        self, opening: StateOpening[Answering], service: Callable[[], AbstractAsyncContextManager[Answering]]
    ) -> None:
        """Open the answering service (opening.hold), on stdio once the first reply is written or
        after FIRST_REPLY_WAIT: opening it imports the answer path (answering_over), and the model
        backend's HTTP client in a thread, whose share of the interpreter would slow the handshake
        the client is waiting for."""
        if self._first_reply is not None:
            with anyio.move_on_after(FIRST_REPLY_WAIT):
                await self._first_reply.wait()
        await opening.hold(service())

    def run(self, transport: str | None = None, **kwargs: Any) -> None:
        """Serve on `transport` (default: the configured one) until stopped."""
        if kwargs:
            raise ConfigError(
                f"transport options {sorted(kwargs)} are not taken here; give "
                "--host/--port/--auth-token-env in the settings instead"
            )
        chosen = transport or self.sqale_settings.transport
        if chosen == "stdio":
            print_tty_notice()
            anyio.run(self.serve_stdio)
        elif chosen == "streamable-http":
            # Re-validate: the loopback/auth rule depends on the transport.
            settings = ServerSettings.model_validate({**self.sqale_settings.model_dump(), "transport": chosen})
            anyio.run(self.serve_http, settings)
        else:
            raise ConfigError(f"transport {chosen!r} is not supported; use stdio or streamable-http")

    async def serve_stdio(self) -> None:
        """Serve MCP on stdin/stdout until the client hangs up or SIGINT/SIGTERM stops the process."""
        self._first_reply = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(exit_on_stop_signal, group.cancel_scope, self.state_closed)
            # The pipes read and written on the event loop (stdio_shim.py).
            await serve_stdio(self, replied=self._first_reply.set)
            group.cancel_scope.cancel()  # the client hung up: stop watching for signals

    async def serve_http(self, settings: ServerSettings) -> None:
        """Serve streamable HTTP on settings.host:port, behind the bearer token when one is set."""
        # Imported here: the HTTP layers (uvicorn, starlette's middleware) are no part of a stdio
        # server, which Claude Desktop and IDEs start, and wait for, at every launch.
        from .serving.http_transport import MCP_PATH, http_app, serve_http

        self.state_before_serving = True
        mcp_app = self.streamable_http_app(
            streamable_http_path=MCP_PATH,
            host=settings.host,
            session_idle_timeout=settings.session_idle_timeout,
            max_sessions=settings.max_sessions,
        )
        await serve_http(
            http_app(mcp_app, settings, self.tokens, self.metrics), settings, drain=self.gate.drain
        )


@asynccontextmanager
async def answering_over(opening: AbstractAsyncContextManager[ServerState]) -> AsyncIterator[Answering]:
    """The answering service over the server state `opening` opens, for as long as it is open.

    The answer path is imported here, when the state opens: building the server and answering the
    handshake need none of it (tests/project/test_startup.py checks it is not loaded by then).
    """
    from .answer.question import Answering

    async with opening as state:
        yield Answering(state)


def request_state_security(settings: ServerSettings) -> RequestStateSecurity:
    """How the SDK seals a 2026-07-28 question awaiting its person's choice (AES-256-GCM): under
    --request-state-key-env's key (shared by every process behind one address) or one this process
    makes; for --ask-timeout plus LATE_REPLY_SECONDS; bound to the caller's token."""
    key = settings.request_state_key
    return RequestStateSecurity(
        keys=[key.get_secret_value() if key is not None else os.urandom(32)],
        ttl=settings.ask_timeout + LATE_REPLY_SECONDS,
        bind_principal=state_principal,
    )


def state_principal(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Whom a sealed state belongs to: the HTTP caller's token name (another token's retry is
    refused); None on stdio, whose one client started the server."""
    caller = caller_of(ctx.request)
    return caller.name if caller.remote else None


def answer_tool(settings: ServerSettings, catalog: Catalog, limits: AnswerLimits) -> tuple[Tool, Advertise]:
    """The one tool, built with the SDK's public `Tool.from_function`, and how it is advertised to a
    caller that sees a catalog: its description, and its input schema, made from the function's
    signature, stating the aliases, lengths and ranges in force (each stated once)."""
    tool = Tool.from_function(
        answer_sql_question,
        name=TOOL_NAME,
        title="Answer a question with SQL",
        annotations=ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
        meta=result_size_meta(limits),  # a larger answer budget than Claude Code takes by default
        structured_output=True,
    )
    parameters = tool.parameters

    def advertise(shown: Catalog, asks: bool = False) -> tuple[str, dict[str, Any]]:
        description = tool_description(
            shown, model=settings.model, limits=limits, max_samples=settings.max_samples, asks=asks
        )
        return description, advertised_input_schema(
            parameters,
            aliases=shown.aliases,
            max_question_chars=settings.max_question_chars,
            max_evidence_chars=settings.max_evidence_chars,
            max_samples=settings.max_samples,
            default_samples=settings.ask_samples if asks else settings.samples,
            example=example_question(shown),
            verified=any(e.verified for e in shown.entries),
        )

    # The outputSchema stays published (AnswerOutput's); the SDK, given no output model, does not
    # validate each result against it again: every result is an AnswerOutput dumped (or an error,
    # which it never validates), and the tests check each against the published schema.
    tool.fn_metadata.output_model = None
    description, schema = advertise(catalog)
    return tool.model_copy(update={"description": description, "parameters": schema}), advertise


def build_server(
    settings: ServerSettings,
    *,
    environ: Mapping[str, str],
    backend_factory: BackendFactory = make_backend,
    checks: WorkerPool | None = None,
) -> SqaleServer:
    """Validate every database, the prompts and the log path, then build the server.

    `checks`: the engine the databases are checked on (its owner closes it); None: one of its own,
    closed when they are checked. The verified libraries' entries are checked when the state opens
    (config/libraries.py).
    """
    settings.address  # noqa: B018 - a malformed address (Ollama's host) is a ConfigError now
    specs = collect_databases(settings, environ)
    limits = WorkerLimits(query_timeout=settings.query_timeout)
    catalog = load_catalog(specs, limits, hide_rules_by_alias(settings, specs), engine=checks)
    catalog = attach_notes(catalog, settings.notes, settings.max_notes_chars)
    catalog = attach_verified(catalog, settings.verified)
    libraries = library_paths(catalog)
    prompts = server_prompts(settings)
    if settings.episode_log is not None:
        EpisodeLog.check_writable(settings.episode_log)
    for entry in catalog.entries:
        logger.info(
            "database '%s': %s (%s)",
            entry.alias,
            entry.path,
            "busy: its first question reads its tables"
            if entry.busy
            else f"{len(entry.tables)} tables, {len(entry.views)} views",
        )
        if entry.notes is not None:
            logger.info(
                "database '%s': notes %s (%d facts, %d characters)",
                entry.alias,
                entry.notes.path,
                entry.notes.facts,
                entry.notes.chars,
            )
    notice = answer_size_notice(settings)
    if notice is not None:  # what a client will take of an answer, and what the server cuts first
        too_large = settings.max_result_bytes > MAX_ROWS_BYTES
        logger.log(logging.WARNING if too_large else logging.INFO, "%s", notice)
    tokens = token_table(settings, catalog.aliases)
    return SqaleServer(settings, catalog, prompts, backend_factory, tokens, libraries)

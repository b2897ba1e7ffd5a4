"""Streamable HTTP transport: security headers, bearer tokens, GET /metrics, and a drain on SIGTERM."""

from __future__ import annotations

import asyncio
import errno
import hmac
import logging
import socket
from collections.abc import Awaitable, Callable

import anyio
import uvicorn
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from agent import ConfigError

from ..config.server_settings import ServerSettings
from .access import TokenTable
from .connections import BodyDeadline, ensure_file_limit
from .draining import DrainResult, drain_summary
from .headers import SecurityHeaderCheck, security_headers
from .http_responses import send_json
from .metrics import ServerMetrics
from .sessions import SessionBook, SessionGuard
from .uvicorn_shim import DrainingServer, guarded_protocol

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HEALTH_PATH = "/health"  # unauthenticated liveness probe: 200, no data
METRICS_PATH = "/metrics"
WELL_KNOWN = "/.well-known/"  # a path with this segment is discovery metadata (RFC 8615)
# Where MCP clients (2025-03-26 spec) register and authorize when a server publishes no metadata.
OAUTH_FALLBACK_PATHS = frozenset({"/authorize", "/token", "/register"})
SHUTDOWN_GRACE_SECONDS = 3  # after the drain, for answers already written to reach their clients
SESSION_CLOSE_SECONDS = 1.0  # after the drain, still listening: clients close their sessions


class RequireToken:
    """Answers 401 to every HTTP request the SDK's bearer backend did not authenticate.

    The SDK's own `RequireAuthMiddleware` cannot say where the token comes from, or name our realm:
    its 401 is always `Bearer error="invalid_token", error_description="Authentication required"`
    (mcp/server/auth/middleware/bearer_auth.py, `_send_auth_error`).
    """

    def __init__(self, app: ASGIApp, hint: str) -> None:
        self.app = app
        self._hint = hint  # where the client's token comes from, for the refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not isinstance(scope.get("user"), AuthenticatedUser):
            await send_json(
                send,
                401,
                {
                    "error": "invalid_token",
                    "error_description": f"missing or wrong bearer token: send 'Authorization: Bearer "
                    f"<token>' with {self._hint}",
                },
                [(b"www-authenticate", b'Bearer realm="sqale-mcp", error="invalid_token"')],
            )
            return
        await self.app(scope, receive, send)


def bearer_auth(app: ASGIApp, tokens: TokenTable, hint: str) -> ASGIApp:
    """`app` behind the client tokens: the SDK's bearer backend authenticates (its user binds the
    sessions), and a request it does not authenticate gets our 401."""
    return AuthenticationMiddleware(RequireToken(app, hint), backend=BearerAuthBackend(tokens))


class OwnPaths:
    """The paths the server answers itself, before any client token is checked.

    - `GET /health`: 200 and no data, for probes.
    - `GET /metrics` with the metrics token: the Prometheus text. Its own token: a scraper's
      credential cannot ask questions, a client's cannot scrape.
    - Behind client tokens (`oauth_hint`: where a client's token comes from), 404 where OAuth clients
      look for an authorization server: any `/.well-known/` path (OAuth and OpenID metadata, every
      place they look) and the endpoints they fall back to without metadata (/authorize, /token,
      /register), as a server without OAuth does. A 401 there read as "OAuth, behind auth"; the 404
      body says how to send the token, which is what clients that try OAuth anyway show.
    """

    def __init__(
        self, app: ASGIApp, metrics: ServerMetrics, *, metrics_token: str | None, oauth_hint: str | None
    ) -> None:
        self.app = app
        self._metrics = metrics
        self._token = None if metrics_token is None else metrics_token.encode()
        self._hint = oauth_hint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif path == HEALTH_PATH and scope["method"] in ("GET", "HEAD"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", b"0"), (b"cache-control", b"no-store")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
        elif path == METRICS_PATH and self._token is not None:
            await self._metrics_text(scope, send, self._token)
        elif self._hint is not None and (WELL_KNOWN in f"{path}/" or path.rstrip("/") in OAUTH_FALLBACK_PATHS):
            await send_json(
                send,
                404,
                {
                    "error": "not_found",
                    "error_description": f"this server has no OAuth: send 'Authorization: Bearer <token>' "
                    f"to /mcp with {self._hint}",
                },
            )
        else:
            await self.app(scope, receive, send)

    async def _metrics_text(self, scope: Scope, send: Send, token: bytes) -> None:
        """The Prometheus text, or 401 without the metrics token."""
        presented = (security_headers(scope).bearer_token or "").encode("latin-1")
        if not hmac.compare_digest(presented, token):
            await send_json(
                send,
                401,
                {
                    "error": "invalid_token",
                    "error_description": "GET /metrics needs 'Authorization: Bearer <token>' with the "
                    "token from the server's --metrics-token-env variable",
                },
                [(b"www-authenticate", b'Bearer realm="sqale-mcp-metrics", error="invalid_token"')],
            )
            return
        body = self._metrics.render()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", CONTENT_TYPE_LATEST.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def http_app(mcp_app: ASGIApp, settings: ServerSettings, tokens: TokenTable, metrics: ServerMetrics) -> ASGIApp:
    """The ASGI app to serve: security headers read once (a repeat is 400), the server's own paths
    (/health, /metrics behind its token, OAuth's paths 404), the MCP app behind the client tokens,
    each token's sessions capped and bound to it, each request's body on a deadline."""
    book = SessionBook(settings.session_idle_timeout)
    metrics.watch_sessions(book.by_token)
    app: ASGIApp = BodyDeadline(mcp_app, settings.http_body_timeout)
    app = SessionGuard(
        app, settings, book, on_refused=lambda token: metrics.sessions_refused.labels(token).inc()
    )
    hint = None
    if tokens.enabled:
        hint = (
            f"the token the server reads from its {settings.auth_token_env} environment variable"
            if settings.auth_token_env and not settings.tokens
            else "the token the server's operator gave you"
        )
        app = bearer_auth(app, tokens, hint)
    token = settings.metrics_token
    return SecurityHeaderCheck(
        OwnPaths(app, metrics, metrics_token=token.get_secret_value() if token else None, oauth_hint=hint)
    )


async def serve_http(
    app: ASGIApp, settings: ServerSettings, drain: Callable[[float], Awaitable[DrainResult]]
) -> None:
    """Serve `app` until SIGTERM (drain, then return) or SIGINT; logs go through logging."""
    auth = (
        "bearer tokens"
        if settings.tokens
        else f"bearer token from ${settings.auth_token_env}"
        if settings.auth_token
        else "no auth"
    )
    sock = listening_socket(settings.host, settings.port)  # a busy port: one line, before "serving"
    logger.info("serving MCP on http://%s:%d%s (%s)", settings.host, settings.port, MCP_PATH, auth)
    ensure_file_limit(settings.http_max_connections)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        http=guarded_protocol(settings.http_header_timeout, settings.http_max_connections),
    )
    loop = asyncio.get_running_loop()
    terminated = anyio.Event()

    def on_terminate() -> None:  # in the signal handler: wake the loop safely
        loop.call_soon_threadsafe(terminated.set)

    server = DrainingServer(config, on_terminate)

    async def drain_on_terminate() -> None:
        await terminated.wait()
        logger.info("SIGTERM: taking no new questions; draining for up to %g s", settings.drain_timeout)
        drained = await drain(settings.drain_timeout)
        logger.info("%s", drain_summary(drained))
        if drained.in_flight:
            # Still listening a moment: clients that just got their answers end their sessions
            # (DELETE /mcp) instead of meeting a closed port.
            await anyio.sleep(SESSION_CLOSE_SECONDS)
        server.stop()

    async with anyio.create_task_group() as group:
        group.start_soon(drain_on_terminate)
        with sock:
            await server.serve(sockets=[sock])
        group.cancel_scope.cancel()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port, ready for uvicorn; ConfigError saying what to change if not."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(
            f"--host {host}: not an address of this machine ({exc.strerror}); give an IP "
            "address or a host name that resolves, e.g. 127.0.0.1"
        ) from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: restart over TIME_WAIT
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"--port {port}: {host}:{port} is already in use by another program; stop "
                "it or give another --port"
            ) from exc
        if exc.errno == errno.EACCES:
            raise ConfigError(
                f"--port {port}: not allowed to listen on it (ports below 1024 need root); "
                "give a --port above 1023"
            ) from exc
        raise ConfigError(
            f"--host {host} --port {port}: cannot listen there ({exc.strerror}); give an "
            "address of this machine, e.g. 127.0.0.1 or 0.0.0.0"
        ) from exc
    return sock

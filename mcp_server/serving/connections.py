"""Connections a slow or silent client cannot hold: each request's headers and body must arrive in
time, and open connections are capped below the process's file limit.

The header deadline and the cap live in uvicorn's h11 protocol (uvicorn_shim.py, the one module
that knows uvicorn's internals); here are what they count with (`ConnectionCap`), the ASGI layer
that gives each request's body a deadline, and the open-file limit.
"""

from __future__ import annotations

import logging
import resource
import time
from collections import deque

import anyio
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .http_responses import send_json

logger = logging.getLogger(__name__)

FILES_BESIDES_CONNECTIONS = 128  # log files, SQLite workers' pipes, the model backend's sockets
WARNING_INTERVAL_SECONDS = 10.0  # at most one "refused connections" warning this often


class ConnectionCap:
    """How many connections may be open, and a warning (now and then) when some are refused."""

    def __init__(self, header_timeout: float, max_connections: int) -> None:
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self.refused = 0  # since the last warning
        self._warned_at = -WARNING_INTERVAL_SECONDS

    def refuse_one(self) -> None:
        """Count a refused connection; warn at most once per interval."""
        self.refused += 1
        now = time.monotonic()
        if now - self._warned_at >= WARNING_INTERVAL_SECONDS:
            logger.warning(
                "refused %d connections: %d are open (--http-max-connections)",
                self.refused,
                self.max_connections,
            )
            self._warned_at, self.refused = now, 0


class BodyDeadline:
    """Reads each request's body within `timeout` seconds (408 otherwise), then hands it on.

    At most the SDK's body limit (and one chunk) is held; a longer body is handed on as it
    stands and the SDK refuses it with 413.
    """

    def __init__(self, app: ASGIApp, timeout: float, max_bytes: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        self.app = app
        self._timeout = timeout
        self._max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more, trailing = 0, True, None
        with anyio.move_on_after(self._timeout) as timer:
            while more and size <= self._max_bytes:
                message = await receive()
                if message["type"] != "http.request":
                    trailing = message  # the client left
                    break
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                more = message.get("more_body", False)
        if timer.cancelled_caught:
            await send_json(
                send,
                408,
                {
                    "error": "request_timeout",
                    "error_description": (
                        f"the request body did not arrive within {self._timeout:g} s; send it whole and "
                        "promptly"
                    ),
                },
                [(b"connection", b"close")],
            )
            return
        replay: deque[Message] = deque([{"type": "http.request", "body": b"".join(chunks), "more_body": more}])
        if trailing is not None:
            replay.append(trailing)

        async def replayed() -> Message:
            return replay.popleft() if replay else await receive()

        await self.app(scope, replayed, send)


def ensure_file_limit(max_connections: int) -> None:
    """Raise this process's open-file limit to fit the connections (up to the hard limit), or warn."""
    needed = max_connections + FILES_BESIDES_CONNECTIONS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            logger.warning("could not raise the open-file limit to %d (%s)", target, exc)
        if soft < needed:
            logger.warning(
                "this process may open %d files, fewer than --http-max-connections %d needs "
                "(%d); lower it or raise `ulimit -n`",
                soft,
                max_connections,
                needed,
            )

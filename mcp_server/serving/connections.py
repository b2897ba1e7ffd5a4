"""Connections a slow or silent client cannot hold: each request's headers and body must arrive in
time, and open connections are capped below the process's file limit.

uvicorn times a connection out only between requests (`timeout_keep_alive`, armed after a
response): a client that connects and sends nothing, or sends its headers a byte at a time,
keeps its socket for ever. So the h11 protocol is extended with a header deadline and a cap on
open connections, and an ASGI layer gives each request's body a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import deque
from typing import Any

import anyio
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

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
            logger.warning("refused %d connections: %d are open (--http-max-connections)",
                           self.refused, self.max_connections)
            self._warned_at, self.refused = now, 0


class _GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for every request's headers and a connection cap."""

    cap: ConnectionCap  # set on the subclass made for one server

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Accept, then close at once past the cap; else start the first request's header deadline."""
        super().connection_made(transport)
        if len(self.connections) > self.cap.max_connections:
            self.cap.refuse_one()
            transport.close()
            return
        self._arm_header_deadline()

    def on_response_complete(self) -> None:
        """After a response the next request's headers get their own deadline."""
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the deadline with the connection."""
        if self._header_timer is not None:
            self._header_timer.cancel()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        waiting_after = self.cycle  # a new request replaces the cycle as soon as its headers are in
        self._header_timer = self.loop.call_later(self.cap.header_timeout, self._header_deadline,
                                                  waiting_after)

    def _header_deadline(self, waiting_after: object) -> None:
        if self.cycle is waiting_after and not self.transport.is_closing():
            self.transport.close()  # connection_lost tells h11 and uvicorn


def guarded_protocol(header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """The h11 protocol class for one server, with its header deadline and connection cap."""
    cap = ConnectionCap(header_timeout, max_connections)
    return type("GuardedH11Protocol", (_GuardedH11Protocol,), {"cap": cap})


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
            await send_json(send, 408, {"error": "request_timeout", "error_description": (
                f"the request body did not arrive within {self._timeout:g} s; send it whole and "
                "promptly")}, [(b"connection", b"close")])
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
            logger.warning("this process may open %d files, fewer than --http-max-connections %d needs "
                           "(%d); lower it or raise `ulimit -n`", soft, max_connections, needed)

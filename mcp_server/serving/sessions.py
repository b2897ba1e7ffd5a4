"""Streamable HTTP sessions per token: each token may hold fewer than the server's cap (so the
others always find room), idle ones close, and a session answers only the token that opened it.

The MCP SDK keeps the sessions and enforces the server-wide cap and the idle timeout; this layer
in front of it counts each token's sessions from what passes through (a response that opens a
session carries its id; DELETE or a 404 ends it; no request in flight for the idle timeout
expires it, the SDK's own rule), and refuses a token's next session past its cap. It reads the
session id and protocol version from `headers.security_headers`, which holds the one copy of
each the SDK routes on. Binding is the SDK's own: its bearer backend leaves the token's user in
the scope, and the SDK answers a session's id from another token exactly as an unknown id (404).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config.server_settings import ServerSettings
from .access import Caller, scope_caller
from .headers import security_headers
from .http_responses import send_jsonrpc_error
from .log_format import session_tag
from .quotas import REFUSAL_LINES_PER_MINUTE, LogBudget, quota_limits

logger = logging.getLogger(__name__)

SESSION_ID_HEADER = MCP_SESSION_ID_HEADER.encode()  # of the SDK's responses


@dataclass
class _Session:
    token: str
    in_flight: int  # requests being served (an open GET stream included)
    idle_since: float  # when the last of them ended


class SessionBook:
    """Which token holds which session, and which sessions the SDK's idle rule has closed."""

    def __init__(self, idle_timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._idle_timeout = idle_timeout
        self._clock = clock
        self._sessions: dict[str, _Session] = {}
        self._opening: dict[str, int] = {}  # per token: requests that may open a session now

    def held(self, token: str) -> int:
        """Sessions `token` holds, counting those being opened."""
        self._expire()
        return self._opening.get(token, 0) + sum(s.token == token for s in self._sessions.values())

    def by_token(self) -> dict[str, int]:
        """Open sessions per token (for the metrics)."""
        self._expire()
        counts: dict[str, int] = {}
        for session in self._sessions.values():
            counts[session.token] = counts.get(session.token, 0) + 1
        return counts

    def retry_after(self, token: str) -> float:
        """Seconds until the first of `token`'s idle sessions expires (the timeout if none is idle)."""
        now = self._clock()
        waits = [
            self._idle_timeout - (now - s.idle_since)
            for s in self._sessions.values()
            if s.token == token and s.in_flight == 0
        ]
        return max(1.0, min(waits, default=self._idle_timeout))

    def opening(self, token: str, delta: int) -> None:
        """A request that may open a session for `token` starts (+1) or ends (-1)."""
        self._opening[token] = self._opening.get(token, 0) + delta
        if not self._opening[token]:
            del self._opening[token]

    def opened(self, session_id: str, token: str) -> None:
        """The SDK opened `session_id` for `token`; its opening request is still in flight."""
        self._sessions[session_id] = _Session(token, 1, self._clock())

    def owner(self, session_id: str) -> str | None:
        """The token that opened `session_id`, if it is open."""
        self._expire()
        session = self._sessions.get(session_id)
        return session.token if session else None

    def started(self, session_id: str) -> None:
        """A request of the session is being served."""
        if (session := self._sessions.get(session_id)) is not None:
            session.in_flight += 1

    def ended(self, session_id: str) -> None:
        """A request of the session ended; the idle clock starts when none is left."""
        if (session := self._sessions.get(session_id)) is not None:
            session.in_flight -= 1
            if not session.in_flight:
                session.idle_since = self._clock()

    def closed(self, session_id: str) -> None:
        """The session ended (DELETE) or the SDK no longer knows it (404)."""
        self._sessions.pop(session_id, None)

    def _expire(self) -> None:
        now = self._clock()
        for session_id in [
            sid
            for sid, s in self._sessions.items()
            if s.in_flight == 0 and now - s.idle_since >= self._idle_timeout
        ]:
            del self._sessions[session_id]


class SessionGuard:
    """ASGI layer before the MCP app: caps each token's sessions and binds sessions to tokens."""

    def __init__(
        self,
        app: ASGIApp,
        settings: ServerSettings,
        book: SessionBook,
        on_refused: Callable[[str], None] = lambda token: None,
    ) -> None:
        self.app = app
        self._settings = settings
        self._book = book
        self._on_refused = on_refused
        self._log_budgets: dict[str, LogBudget] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        caller = scope_caller(scope)
        headers = security_headers(scope)
        if headers.session_id is not None:
            await self._in_session(headers.session_id, caller, scope, receive, send)
        elif scope["method"] == "POST" and _opens_sessions(headers.protocol_version):
            await self._opening(caller, scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _opening(self, caller: Caller, scope: Scope, receive: Receive, send: Send) -> None:
        """A request that may open a session: refused past the token's cap, else watched for its id."""
        cap = quota_limits(self._settings, caller.name).sessions
        held = self._book.held(caller.name)
        if held >= cap:
            await self._refuse(caller, held, send)
            return
        self._book.opening(caller.name, +1)
        opened: str | None = None

        async def watch(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] < 400:
                found = dict(message.get("headers", ())).get(SESSION_ID_HEADER)
                if found is not None:
                    opened = found.decode("latin-1")
                    self._book.opening(caller.name, -1)
                    self._book.opened(opened, caller.name)
                    logger.info(
                        "session %s opened for token '%s' (%d of its %d)",
                        session_tag(opened),
                        caller.name,
                        held + 1,
                        cap,
                    )
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if opened is None:
                self._book.opening(caller.name, -1)
            else:
                self._book.ended(opened)

    async def _in_session(
        self, session_id: str, caller: Caller, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request naming a session: counted as activity only when its token opened it."""
        if self._book.owner(session_id) != caller.name:
            await self.app(scope, receive, send)  # the SDK answers 404, as for an unknown id
            return
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self._book.started(session_id)
        try:
            await self.app(scope, receive, watch)
        finally:
            self._book.ended(session_id)
            if status == 404 or (scope["method"] == "DELETE" and 200 <= status < 300):
                self._book.closed(session_id)

    async def _refuse(self, caller: Caller, held: int, send: Send) -> None:
        self._on_refused(caller.name)
        retry = math.ceil(self._book.retry_after(caller.name))
        budget = self._log_budgets.setdefault(caller.name, LogBudget(REFUSAL_LINES_PER_MINUTE))
        held_back = budget.allow()
        if held_back is not None:
            logger.warning(
                "refused a new session for token '%s': it holds %d (--token-max-sessions)%s",
                caller.name,
                held,
                f" ({held_back} earlier refusals not logged)" if held_back else "",
            )
        await send_jsonrpc_error(
            send,
            429,
            (
                f"Too many open sessions for token '{caller.name}': it holds {held}, the most one token "
                "may have. End the sessions you no longer use (DELETE /mcp with their Mcp-Session-Id) "
                f"or wait for idle ones to close (after {self._settings.session_idle_timeout:g} s without "
                f"a request); retry in {retry} s."
            ),
            [(b"retry-after", str(retry).encode())],
        )


def _opens_sessions(protocol_version: str | None) -> bool:
    """True when a request without a session id may open one: the 2025 protocol era (the SDK's
    session manager sends other versions to its sessionless path by the same test)."""
    return protocol_version is None or protocol_version in HANDSHAKE_PROTOCOL_VERSIONS

"""The one reader of the request headers security rests on: Authorization, Mcp-Protocol-Version,
Mcp-Session-Id, Mcp-Method and Mcp-Name.

Two readers of one header disagree when it comes twice: the SDK routes on the first copy
(`StreamableHTTPSessionManager` takes the first Mcp-Protocol-Version of the raw headers, Starlette's
`Headers.get` the first Mcp-Session-Id and Authorization), while a reader that folds the headers
into a dict sees the last. A session cap counted on one copy and a session opened on the other
is no cap. So the outermost layer (`SecurityHeaderCheck`) answers 400 to a request that repeats
any of these headers, in any case, or joins two values of one with a comma (RFC 9110 lets a
proxy fold repeated lines that way), and passes on a scope whose header names are lower case, as
ASGI requires and as the SDK compares them. Every one of our readers (the session guard, the
metrics token) takes the parsed values from the scope (`security_headers`); the SDK's bearer
backend reads Authorization itself (the first copy), which is then the one copy checked here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INVALID_REQUEST
from starlette.types import ASGIApp, Receive, Scope, Send

from .http_responses import send_jsonrpc_error

AUTHORIZATION_HEADER = "authorization"
BEARER_PREFIX = "bearer "  # as the SDK's BearerAuthBackend: any case, then exactly one space
SCOPE_KEY = "sqale.security_headers"  # where the check leaves the parsed headers in the ASGI scope

# Header -> how it is named in refusals.
SECURITY_HEADERS: Mapping[str, str] = {
    AUTHORIZATION_HEADER: "Authorization",
    MCP_PROTOCOL_VERSION_HEADER: "Mcp-Protocol-Version",
    MCP_SESSION_ID_HEADER: "Mcp-Session-Id",
    MCP_METHOD_HEADER: "Mcp-Method",
    MCP_NAME_HEADER: "Mcp-Name",
}
# Headers whose single value never holds a comma: a token (RFC 6750's b64token), a date, the
# SDK's hex session ids, a method name. Mcp-Name may (a resource URI), so only its repeats count.
NO_COMMA = frozenset(
    {AUTHORIZATION_HEADER, MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER, MCP_METHOD_HEADER}
)


@dataclass(frozen=True)
class RepeatedHeader(Exception):
    """A security header came more than once (or as two values joined by a comma)."""

    name: str  # lower case
    joined: bool = False  # one line with a comma, rather than two lines

    def __str__(self) -> str:
        shown = SECURITY_HEADERS[self.name]
        how = "holds several values joined by a comma" if self.joined else "appears more than once"
        return (
            f"Bad request: the {shown} header {how}. Send it once, with one value (a proxy in "
            "front may have joined two copies)."
        )


@dataclass(frozen=True)
class SecurityHeaders:
    """The one value of each security header a request carries (None: absent), decoded as the SDK
    decodes them (latin-1, nothing stripped)."""

    authorization: str | None = None
    protocol_version: str | None = None
    session_id: str | None = None
    method: str | None = None
    name: str | None = None

    @property
    def bearer_token(self) -> str | None:
        """The token of `Authorization: Bearer <token>` (read as the SDK's bearer backend reads it)."""
        value = self.authorization
        if value is None or not value.lower().startswith(BEARER_PREFIX):
            return None
        return value[len(BEARER_PREFIX) :]


def read_security_headers(raw: Iterable[tuple[bytes, bytes]]) -> SecurityHeaders:
    """The security headers of raw ASGI header lines; RepeatedHeader when one comes twice or joined."""
    found: dict[str, str] = {}
    for raw_name, raw_value in raw:
        name = raw_name.decode("latin-1").lower()
        if name not in SECURITY_HEADERS:
            continue
        value = raw_value.decode("latin-1")
        if name in found:
            raise RepeatedHeader(name)
        if name in NO_COMMA and "," in value:
            raise RepeatedHeader(name, joined=True)
        found[name] = value
    return SecurityHeaders(
        authorization=found.get(AUTHORIZATION_HEADER),
        protocol_version=found.get(MCP_PROTOCOL_VERSION_HEADER),
        session_id=found.get(MCP_SESSION_ID_HEADER),
        method=found.get(MCP_METHOD_HEADER),
        name=found.get(MCP_NAME_HEADER),
    )


def security_headers(scope: Mapping[str, Any]) -> SecurityHeaders:
    """The security headers of a request, as `SecurityHeaderCheck` parsed them."""
    parsed = scope.get(SCOPE_KEY)
    if isinstance(parsed, SecurityHeaders):
        return parsed
    return read_security_headers(scope.get("headers", ()))  # a layer used without the check


def can_be_sent(secret: str) -> bool:
    """False for a token no client can send in an Authorization header we accept (a comma there
    reads as two values joined)."""
    return "," not in secret


class SecurityHeaderCheck:
    """Outermost ASGI layer: 400 for a request repeating a security header; the rest pass on with
    their header names in lower case and the parsed values in the scope."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers", ())
        try:
            parsed = read_security_headers(raw)
        except RepeatedHeader as exc:
            await send_jsonrpc_error(send, 400, str(exc), code=INVALID_REQUEST)
            return
        if any(name != name.lower() for name, _ in raw):  # servers lower-case them; ASGI says they must
            raw = [(name.lower(), value) for name, value in raw]
        await self.app({**scope, "headers": raw, SCOPE_KEY: parsed}, receive, send)

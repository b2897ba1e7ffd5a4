"""Streamable HTTP transport with bearer-token authentication."""

from __future__ import annotations

import hmac
import json
import logging

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from .settings import ServerSettings

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"


class BearerTokenMiddleware:
    """Answers 401 to every HTTP request without `Authorization: Bearer <the token>`."""

    def __init__(self, app: ASGIApp, token: str, token_env: str) -> None:
        self.app = app
        self._token = token.encode()
        self._token_env = token_env

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorised(scope):
            await self._refuse(send)
            return
        await self.app(scope, receive, send)

    def _authorised(self, scope: Scope) -> bool:
        header = b""
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                header = value
                break
        scheme, _, token = header.partition(b" ")
        # compare_digest: the time taken must not tell how much of a guess was right.
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._token)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({
            "error": "invalid_token",
            "error_description": (
                "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the "
                f"token the server reads from its {self._token_env} environment variable"),
        }).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b'Bearer realm="sqale-mcp", error="invalid_token"'),
        ]})
        await send({"type": "http.response.body", "body": body})


def http_app(mcp_app: ASGIApp, settings: ServerSettings) -> ASGIApp:
    """The ASGI app to serve: the MCP app, behind the token check when a token is set."""
    if settings.auth_token is None:
        return mcp_app
    return BearerTokenMiddleware(mcp_app, settings.auth_token.get_secret_value(),
                                 settings.auth_token_env or "")


async def serve_http(app: ASGIApp, settings: ServerSettings) -> None:
    """Serve `app` with uvicorn until stopped; logs go through logging (stderr)."""
    auth = f"bearer token from ${settings.auth_token_env}" if settings.auth_token else "no auth"
    logger.info("serving MCP on http://%s:%d%s (%s)", settings.host, settings.port, MCP_PATH, auth)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None,
                            log_level=settings.log_level.lower(), access_log=False)
    await uvicorn.Server(config).serve()

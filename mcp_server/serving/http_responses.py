"""Small complete HTTP responses the serving layers send themselves (refusals, errors)."""

from __future__ import annotations

import json

from starlette.types import Send

SERVER_ERROR = -32000  # JSON-RPC: an implementation-defined server error


async def send_json(
    send: Send, status: int, payload: dict[str, object], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """One complete JSON response."""
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_jsonrpc_error(
    send: Send,
    status: int,
    message: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    code: int = SERVER_ERROR,
) -> None:
    """A JSON-RPC error without a request id, as the MCP SDK answers HTTP-level refusals."""
    await send_json(
        send, status, {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, headers
    )

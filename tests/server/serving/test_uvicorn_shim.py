"""uvicorn's internals that mcp_server/serving/uvicorn_shim.py relies on are still there, and used only there.

An upgrade of uvicorn that renames or reshapes one of them fails here, naming it, before any
server test hangs or a slow client keeps its socket again.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from packaging.requirements import Requirement
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from mcp_server.serving.uvicorn_shim import DrainingServer, guarded_protocol

ROOT = Path(__file__).resolve().parents[3]
UVICORN = version("uvicorn")


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def _uvicorns_own(owner: type, method: str) -> Any:
    """`owner.method` as uvicorn defines it: sse-starlette (the SDK's) wraps Server.handle_exit on import."""
    found = getattr(owner, method, None)
    if found is not None and not found.__module__.startswith("uvicorn"):
        from sse_starlette.sse import AppStatus

        assert found is AppStatus.handle_exit, f"{owner.__name__}.{method} is {found.__module__}'s"
        found = AppStatus.original_handler
    return found


def test_the_installed_uvicorn_is_in_the_pinned_range() -> None:
    """pyproject.toml pins uvicorn to a range with both bounds, and the installed one is inside it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (pinned,) = [Requirement(d) for d in project["dependencies"] if Requirement(d).name == "uvicorn"]
    assert {s.operator for s in pinned.specifier} == {">=", "<"}, pinned
    assert pinned.specifier.contains(UVICORN), f"uvicorn {UVICORN} is outside {pinned}: check the shim"


@pytest.mark.parametrize(
    ("owner", "method", "parameters"),
    [
        (H11Protocol, "connection_made", ["self", "transport"]),
        (H11Protocol, "connection_lost", ["self", "exc"]),
        (H11Protocol, "on_response_complete", ["self"]),
        (uvicorn.Server, "handle_exit", ["self", "sig", "frame"]),
    ],
)
def test_the_methods_the_shim_overrides_keep_their_signatures(
    owner: type, method: str, parameters: list[str]
) -> None:
    """Each method the shim overrides exists on uvicorn's class with the parameters it calls it with."""
    found = _uvicorns_own(owner, method)
    assert found is not None, f"uvicorn {UVICORN}: {owner.__name__}.{method} is gone; the shim overrides it"
    assert _parameters(found) == parameters, (
        f"uvicorn {UVICORN}: {owner.__name__}.{method}{inspect.signature(found)} changed; "
        f"uvicorn_shim.py expects ({', '.join(parameters)})"
    )


class _Transport(asyncio.Transport):
    """A socket's transport as the protocol sees it: what it wrote, and whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _hello(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _protocol(header_timeout: float, max_connections: int, state: ServerState) -> H11Protocol:
    config = uvicorn.Config(_hello, log_config=None, lifespan="off", ws="none")
    config.load()
    return guarded_protocol(header_timeout, max_connections)(config=config, server_state=state, app_state={})


@pytest.mark.anyio
async def test_the_protocol_attributes_the_shim_reads_are_there() -> None:
    """A new protocol has `connections` (the server's set), `cycle`, `loop`; after connection_made,
    `transport` and its place in `connections`."""
    state = ServerState()
    protocol = _protocol(5, 10, state)
    assert protocol.connections is state.connections, f"uvicorn {UVICORN}: H11Protocol.connections changed"
    assert protocol.cycle is None, f"uvicorn {UVICORN}: H11Protocol.cycle is no longer None before a request"
    assert protocol.loop is asyncio.get_running_loop(), f"uvicorn {UVICORN}: H11Protocol.loop changed"
    transport = _Transport()
    protocol.connection_made(transport)
    assert (protocol.transport, protocol in protocol.connections) == (transport, True), (
        f"uvicorn {UVICORN}: connection_made no longer keeps the transport or adds to `connections`"
    )
    protocol.connection_lost(None)
    assert protocol not in protocol.connections


@pytest.mark.anyio
async def test_headers_have_a_deadline_before_and_after_each_response() -> None:
    """Silent: closed at its deadline. A request stops the clock; on_response_complete starts it again."""
    protocol = _protocol(0.05, 10, ServerState())
    transport = _Transport()
    protocol.connection_made(transport)
    await asyncio.sleep(0.2)
    assert transport.closed, f"uvicorn {UVICORN}: a silent connection outlived its header deadline"

    protocol = _protocol(0.15, 10, ServerState())
    transport = _Transport()
    protocol.connection_made(transport)
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await asyncio.sleep(0.1)  # the response is written; on_response_complete armed a new deadline
    assert (transport.written.startswith(b"HTTP/1.1 200"), transport.closed) == (True, False)
    await asyncio.sleep(0.25)
    assert transport.closed, (
        f"uvicorn {UVICORN}: no deadline after a response: on_response_complete or cycle changed"
    )
    protocol.connection_lost(None)


@pytest.mark.anyio
async def test_connections_past_the_cap_are_closed_at_once() -> None:
    """The third connection of a server capped at two is closed in connection_made."""
    state = ServerState()
    transports = [_Transport() for _ in range(3)]
    protocols = [_protocol(5, 2, state) for _ in transports]
    for protocol, transport in zip(protocols, transports, strict=True):
        protocol.connection_made(transport)
    assert [t.closed for t in transports] == [False, False, True]
    for protocol in protocols:
        protocol.connection_lost(None)


def test_sigterm_drains_and_sigint_is_uvicorns() -> None:
    """handle_exit: SIGTERM calls the drain once and leaves serving on; SIGINT stops as uvicorn does."""
    drains: list[bool] = []
    server = DrainingServer(uvicorn.Config(_hello), lambda: drains.append(True))
    server.handle_exit(signal.SIGTERM, None)
    assert (drains, server.should_exit) == ([True], False)
    server.handle_exit(signal.SIGINT, None)
    assert server.should_exit, f"uvicorn {UVICORN}: Server.handle_exit no longer sets should_exit"
    server.handle_exit(signal.SIGTERM, None)
    assert drains == [True]

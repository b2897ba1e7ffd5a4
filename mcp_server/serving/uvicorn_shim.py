"""Every use of uvicorn beyond its documented `Config` and `Server.serve`: the one module that
knows uvicorn's internals, for the pinned range in pyproject.toml.

What it relies on, and tests/server/serving/test_uvicorn_shim.py checks against the installed uvicorn (naming
what changed when an upgrade breaks it):
- `uvicorn.protocols.http.h11_impl.H11Protocol`: `connection_made(transport)`,
  `connection_lost(exc)`, `on_response_complete()` (called when a response ends), and its
  attributes `connections` (the server's set of open protocols), `cycle` (the current request's
  cycle: replaced as soon as a new request's headers are in), `transport` and `loop`;
- `uvicorn.Server`: `handle_exit(sig, frame)` (its signal handler) and `should_exit`.

uvicorn times a connection out only between requests (`timeout_keep_alive`, armed after a
response): a client that connects and sends nothing, or sends its headers a byte at a time,
keeps its socket for ever. So the h11 protocol gets a header deadline and a cap on open
connections (`ConnectionCap`, in connections.py, says how many and warns).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .connections import ConnectionCap


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
        self._header_timer = self.loop.call_later(self.cap.header_timeout, self._header_deadline, waiting_after)

    def _header_deadline(self, waiting_after: object) -> None:
        if self.cycle is waiting_after and not self.transport.is_closing():
            self.transport.close()  # connection_lost tells h11 and uvicorn


def guarded_protocol(header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """The h11 protocol class for one server (uvicorn's `http=`), with its header deadline and cap."""
    cap = ConnectionCap(header_timeout, max_connections)
    return type("GuardedH11Protocol", (_GuardedH11Protocol,), {"cap": cap})


class DrainingServer(uvicorn.Server):
    """uvicorn, except that SIGTERM starts our drain instead of closing connections at once."""

    def __init__(self, config: uvicorn.Config, on_terminate: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_terminate = on_terminate

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """SIGTERM: drain (once); SIGINT: uvicorn's own behaviour (Ctrl-C, exit 130)."""
        if sig == signal.SIGTERM and not self.should_exit:
            self._on_terminate()
            return
        super().handle_exit(sig, frame)

    def stop(self) -> None:
        """Stop serving: uvicorn closes its sockets and connections and `serve` returns."""
        self.should_exit = True

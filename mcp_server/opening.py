"""The server's state, opened in the background: the MCP handshake never waits for it.

Claude Desktop and IDEs start the stdio server at every launch and wait for its `initialize`
reply. Opening the state (the model backend and its HTTP client, the engine's word on the model,
up to STARTUP_PROBE_SECONDS twice for a runtime that never answers) is none of the handshake's
business: the lifespan yields a `StateOpening` at once, and every handler that needs the state
awaits `ready_state()`, which returns as soon as it is open.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, cast

import anyio

if TYPE_CHECKING:  # state.py loads the backends and the HTTP client: not before the handshake
    from .state import ServerState


class StateOpening:
    """The server state being opened by `hold`; `ready()` waits for it."""

    def __init__(self) -> None:
        self._opened = anyio.Event()
        self._state: ServerState | None = None

    async def hold(self, opening: AbstractAsyncContextManager[ServerState]) -> None:
        """Open the state and keep it open until cancelled, which closes it (the lifespan is ending).

        Cancelled while it is still opening (a client that hung up after the handshake), it stops
        there and closes what it opened. An error opening it propagates (a bug of ours: a runtime
        that is down is a warning, not an error) and ends the server, as an error of the lifespan
        would.
        """
        async with opening as state:
            self._state = state
            self._opened.set()
            await anyio.sleep_forever()

    async def ready(self) -> ServerState:
        """The open state, once it is open."""
        await self._opened.wait()
        assert self._state is not None  # set before the event
        return self._state


async def ready_state(lifespan_context: object) -> ServerState:
    """The server state of a handler's lifespan context (a StateOpening), once it is open."""
    # The SDK types the lifespan's value loosely; ours is the StateOpening the lifespan yields.
    return await cast(StateOpening, lifespan_context).ready()

"""The handshake never waits for the server's state: it opens beside the serving loop (state.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from mcp import Client
from mcp_types import CallToolResult

import mcp_server.state as state
from agent.backends.base import EngineFacts, ModelBackend
from mcp_server.app import SqaleServer, build_server
from mcp_server.config.command_line import parse_settings
from mcp_server.config.server_settings import ServerSettings
from mcp_server.state import StateOpening
from tests.support.mcp import BOOK_GOLD, TOOL
from tests.support.mcp_in_process import valid_answer
from tests.support.policies import OraclePolicy, PolicyBackend

pytestmark = pytest.mark.anyio

QUESTION, SQL = next(iter(BOOK_GOLD.items()))
WAIT_SECONDS = 30.0  # how long a held backend factory waits before it fails the test


class HeldFactory:
    """A backend factory that makes its backend only once released (it runs in a worker thread)."""

    def __init__(self, backend: ModelBackend) -> None:
        self.backend = backend
        self.asked = threading.Event()
        self.released = threading.Event()

    def __call__(self, settings: ServerSettings) -> ModelBackend:
        self.asked.set()
        if not self.released.wait(WAIT_SECONDS):
            raise AssertionError("the test never released the backend factory")
        return self.backend


def held_server(tmp_path: Path, factory: HeldFactory) -> SqaleServer:
    """The demo server, making its backend with `factory`."""
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    return build_server(parse_settings(["--demo"], environ), environ=environ, backend_factory=factory)


async def test_the_handshake_and_listing_are_answered_while_the_backend_is_being_made(tmp_path: Path) -> None:
    """initialize and tools/list come back while the backend factory is still held; a question
    asked meanwhile waits for the state and is answered once the backend is made."""
    factory = HeldFactory(PolicyBackend(OraclePolicy(BOOK_GOLD)))
    server = held_server(tmp_path, factory)
    answered: list[CallToolResult] = []

    async def ask(client: Client) -> None:
        answered.append(await client.call_tool(TOOL, {"question": QUESTION}))

    try:
        async with Client(server) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            assert (listed, factory.released.is_set()) == ([TOOL], False)
            async with anyio.create_task_group() as group:
                group.start_soon(ask, client)
                await anyio.sleep(0.2)
                assert answered == []  # waiting for the state, not failed
                factory.released.set()
    finally:
        factory.released.set()
    assert factory.asked.is_set()
    assert valid_answer(answered[0])["sql"] == SQL


class SilentEngine(PolicyBackend):
    """A backend whose engine never says what it is: a runtime that takes requests and never answers."""

    async def engine_facts(self) -> tuple[EngineFacts, ...]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_client_that_hangs_up_while_the_state_opens_stops_the_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that leaves right after the handshake (a listing, a probe) while the engine has
    not answered ends the session without waiting for the engine, and the state is closed."""
    monkeypatch.setattr(state, "STARTUP_PROBE_SECONDS", 10 * WAIT_SECONDS)  # the opening never ends
    factory = HeldFactory(SilentEngine(OraclePolicy(BOOK_GOLD)))
    factory.released.set()
    server = held_server(tmp_path, factory)
    with anyio.fail_after(WAIT_SECONDS):
        async with Client(server) as client:
            assert [t.name for t in (await client.list_tools()).tools] == [TOOL]
            while not factory.asked.is_set():  # the opening has reached the engine
                await anyio.sleep(0.01)
    assert server.state_closed.is_set()


async def test_on_stdio_the_state_opens_once_the_first_reply_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served over stdio, the state starts opening (its backend's HTTP client imported in a thread,
    which would share the interpreter with the handshake) only once the first reply is written;
    then it opens at once. (FIRST_REPLY_WAIT, the bound for a client that sends nothing, is made
    long so that only the reply can start it.)"""
    import mcp_server.app as app

    monkeypatch.setattr(app, "FIRST_REPLY_WAIT", 10 * WAIT_SECONDS)
    factory = HeldFactory(PolicyBackend(OraclePolicy(BOOK_GOLD)))
    factory.released.set()
    server = held_server(tmp_path, factory)
    opening: StateOpening[str] = StateOpening()

    class Opened:
        async def __aenter__(self) -> str:
            return "state"

        async def __aexit__(self, *exc: object) -> None:
            return None

    async with anyio.create_task_group() as group:
        server._first_reply = anyio.Event()  # as serve_stdio sets it up
        group.start_soon(server._open_state, opening, Opened)
        for _ in range(20):  # the opening task runs as far as it can
            await anyio.lowlevel.checkpoint()
        assert opening._state is None
        server._first_reply.set()
        with anyio.fail_after(WAIT_SECONDS):
            assert await opening.ready() == "state"
        group.cancel_scope.cancel()

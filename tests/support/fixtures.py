"""Fake model runtimes over real HTTP lent from a session pool, and addresses that never answer (a plugin)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from tests.support.fake_runtime import FakeServer
from tests.support.policies import DEFAULT_MODEL, Policy, ScriptedReply

FakeFactory = Callable[..., FakeServer]


class _NotLent:
    """The policy of a server back in the pool: a request from a finished test gets a 503."""

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """Always the same refusal (not a policy error: nothing for a test to re-raise)."""
        return ScriptedReply("fake runtime: this server is not lent to any test", http_status=503)


class FakeServerPool:
    """Started fake runtimes, each lent to one test at a time and configured afresh for it.

    Starting and stopping a uvicorn server costs about 0.2 s, mostly in stopping; sharing the
    servers over the session (as httpx shares its test server) saves that for each test. A loan
    starts with the test's policy and options and with no requests, disconnects or policy errors
    recorded, so no test sees another's. A server a test stopped itself is not lent again.
    """

    def __init__(self) -> None:
        self._idle: list[FakeServer] = []
        self._started: list[FakeServer] = []

    def lend(self, policy: Policy, **options: Any) -> FakeServer:
        """An idle server (or a new one) answering with `policy` under `options`."""
        if self._idle:
            return self._idle.pop().configure(policy, **options)
        server = FakeServer(policy, **options).start()
        self._started.append(server)
        return server

    def give_back(self, server: FakeServer) -> list[Exception]:
        """Take the server back; the errors its policy raised during the loan."""
        errors = list(server.policy_errors)
        if server.serving:
            server.configure(_NotLent())
            self._idle.append(server)
        return errors

    def close(self) -> None:
        """Stop every server still serving."""
        for server in self._started:
            if server.serving:
                server.stop()


@pytest.fixture(scope="session")
def fake_server_pool() -> Iterator[FakeServerPool]:
    """The session's fake runtimes, lent out by fake_ollama and fake_openai."""
    pool = FakeServerPool()
    yield pool
    pool.close()


def _factory(pool: FakeServerPool, url_path: str) -> Iterator[FakeFactory]:
    lent: list[FakeServer] = []

    def start(policy: Policy, models: Sequence[str] = (DEFAULT_MODEL,), **options: Any) -> FakeServer:
        server = pool.lend(policy, models=models, url_path=url_path, **options)
        lent.append(server)
        return server

    yield start
    errors = [error for server in lent for error in pool.give_back(server)]
    if errors:
        raise errors[0]  # a policy raised while serving: a bug in the test


@pytest.fixture
def fake_ollama(fake_server_pool: FakeServerPool) -> Iterator[FakeFactory]:
    """Start fake Ollama servers: fake_ollama(policy, models=(...), prompt_cache=False) -> .url."""
    yield from _factory(fake_server_pool, "")


@pytest.fixture
def fake_openai(fake_server_pool: FakeServerPool) -> Iterator[FakeFactory]:
    """Start fake OpenAI-compatible servers: fake_openai(policy, api_key=None) -> .url (…/v1)."""
    yield from _factory(fake_server_pool, "/v1")


@pytest.fixture
def dead_url() -> Iterator[str]:
    """http://127.0.0.1:PORT where connections are refused (bound, never listening)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))  # held so no other process can take the port meanwhile
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


class BlackHole:
    """A TCP server on 127.0.0.1 that accepts connections and never answers (a hung runtime)."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.connected = threading.Event()  # set once a client has connected
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed
                return
            self._held.append(conn)
            self.connected.set()

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        return len(self._held)

    def close(self) -> None:
        """Stop accepting and drop every held connection."""
        self._sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    """A runtime address that accepts connections but never answers: .url, .connected, .connections."""
    hole = BlackHole()
    yield hole
    hole.close()

"""Fake model runtimes over real HTTP, and an address with nothing listening (a pytest plugin)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from tests.support.fake_runtime import FakeServer
from tests.support.policies import DEFAULT_MODEL, Policy

FakeFactory = Callable[..., FakeServer]


def _factory(url_path: str) -> Iterator[FakeFactory]:
    started: list[FakeServer] = []

    def start(
        policy: Policy, models: Sequence[str] = (DEFAULT_MODEL,), **options: Any
    ) -> FakeServer:
        server = FakeServer(policy, models=models, url_path=url_path, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()  # raises a policy's exception, if one raised while serving


@pytest.fixture
def fake_ollama() -> Iterator[FakeFactory]:
    """Start fake Ollama servers: fake_ollama(policy, models=(...), prompt_cache=False) -> .url."""
    yield from _factory("")


@pytest.fixture
def fake_openai() -> Iterator[FakeFactory]:
    """Start fake OpenAI-compatible servers: fake_openai(policy, api_key=None) -> .url (…/v1)."""
    yield from _factory("/v1")


@pytest.fixture
def dead_url() -> Iterator[str]:
    """http://127.0.0.1:PORT where connections are refused (bound, never listening)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))  # held so no other process can take the port meanwhile
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"

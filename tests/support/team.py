"""A team server for the HTTP tests: two databases, tokens [tokens.books] and [tokens.all],
/metrics behind its own token, an episode log, and calls made as one token or another."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from agent.sqlite import create_database
from tests.support.fake_runtime import FakeServer
from tests.support.mcp import (
    BOOK_GOLD,
    REPO,
    TOOL,
    DelayedPolicy,
    free_port,
    server_command,
    server_env,
    wait_for_port,
)
from tests.support.policies import OraclePolicy

SALES_GOLD = {"How many sales are there?": "SELECT count(*) FROM sales"}
TOKENS = {
    "SQALE_TOKEN_BOOKS": "books-secret",
    "SQALE_TOKEN_ALL": "all-secret",
    "SQALE_METRICS_TOKEN": "metrics-secret",
}
BOOKS, ALL = "books-secret", "all-secret"
BOOK_QUESTION = "How many books are there?"


@dataclass
class TeamServer:
    """A running server subprocess with its URL and files."""

    process: subprocess.Popen[bytes]
    port: int
    episode_log: Path
    stderr: Path
    runtime: FakeServer | None = None  # the fake model runtime it asks (None: `ollama_url`'s)

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    def metrics(self) -> dict[str, float]:
        """GET /metrics with the metrics token, parsed by prometheus_client: sample -> value."""
        response = httpx.get(
            f"http://127.0.0.1:{self.port}/metrics",
            timeout=10,
            headers={"Authorization": f"Bearer {TOKENS['SQALE_METRICS_TOKEN']}"},
        )
        response.raise_for_status()
        return {
            sample_key(s.name, s.labels): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples
        }


def sample_key(name: str, labels: dict[str, str]) -> str:
    """A metric sample as `name{label=value,...}`, labels sorted."""
    return name + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


PLACES = ("--runtime-slots", "8", "--max-concurrent", "8")  # the team tests' default


@pytest.fixture
def team_server(tmp_path: Path, fake_ollama: Any) -> Iterator[Callable[..., TeamServer]]:
    """Start servers with two databases and tokens [tokens.books] (bookshop) and [tokens.all];
    `books_quota` adds lines to [tokens.books]; `ollama_url` replaces the fake model runtime;
    `places` are the flags giving workers and runtime slots (() for the defaults); `environ` is
    added to the server's environment."""
    started: list[TeamServer] = []

    def start(
        *flags: str,
        delay: float = 0.0,
        books_quota: str = "",
        ollama_url: str | None = None,
        places: tuple[str, ...] = PLACES,
        environ: dict[str, str] | None = None,
    ) -> TeamServer:
        sales = create_database(
            tmp_path / "sales.db",
            "CREATE TABLE sales (id INTEGER PRIMARY KEY, "
            "amount REAL); INSERT INTO sales (amount) VALUES (1.5), (2.5);",
        )
        policy = OraclePolicy({**BOOK_GOLD, **SALES_GOLD})
        runtime = None if ollama_url else fake_ollama(DelayedPolicy(policy, delay) if delay else policy)
        url = runtime.url if runtime is not None else ollama_url
        config = tmp_path / "team.toml"
        config.write_text(
            f'[db]\nsales = "{sales}"\n\n'
            f'[tokens.books]\nenv = "SQALE_TOKEN_BOOKS"\ndatabases = ["bookshop"]\n{books_quota}\n'
            '[tokens.all]\nenv = "SQALE_TOKEN_ALL"\n'
        )
        port = free_port()
        server = TeamServer(
            None,
            port,
            tmp_path / "episodes.jsonl",
            tmp_path / "stderr.txt",  # type: ignore[arg-type]
            runtime,
        )
        with server.stderr.open("wb") as err:
            server.process = subprocess.Popen(
                server_command(
                    "--config",
                    str(config),
                    "--demo",
                    "--ollama-host",
                    url,
                    "--transport",
                    "streamable-http",
                    "--port",
                    str(port),
                    "--metrics-token-env",
                    "SQALE_METRICS_TOKEN",
                    "--episode-log",
                    str(server.episode_log),
                    *places,
                    *flags,
                ),
                cwd=REPO,
                env=server_env(tmp_path, **TOKENS, **(environ or {})),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        started.append(server)
        wait_for_port(port, server.process)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
        server.process.wait(timeout=15)


async def ask(url: str, token: str, arguments: dict[str, Any]) -> Any:
    """Call the tool once with `token`; the CallToolResult."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return await client.call_tool(TOOL, arguments)


async def list_tool(url: str, token: str) -> Any:
    """The tool as tools/list shows it to `token`."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        (tool,) = (await client.list_tools()).tools
    return tool


def error_text(result: Any) -> str:
    """The text of a tool error (and that it is one), without the SDK's 'Error executing' prefix."""
    assert result.is_error, result
    prefix = f"Error executing tool {TOOL}: "
    assert result.content[0].text.startswith(prefix), result.content[0].text
    return result.content[0].text.removeprefix(prefix)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
JSON_AND_SSE = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def open_session(http: httpx.Client, url: str, token: str) -> httpx.Response:
    """POST initialize as `token` (a new session when it succeeds: see its mcp-session-id header)."""
    return http.post(url, json=INITIALIZE, headers={**JSON_AND_SSE, "Authorization": f"Bearer {token}"})


def in_session(
    http: httpx.Client, method: str, url: str, token: str, session: str, payload: dict[str, Any] | None = None
) -> httpx.Response:
    """A request of `session` as `token` (tools/list by default for POST)."""
    headers = {
        **JSON_AND_SSE,
        "Authorization": f"Bearer {token}",
        "mcp-session-id": session,
        "mcp-protocol-version": "2025-06-18",
    }
    if method == "POST":
        body = payload or {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        return http.post(url, json=body, headers=headers)
    return http.request(method, url, headers=headers)

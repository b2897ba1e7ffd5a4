"""Streamable HTTP: bearer-token auth (right, wrong, none), OAuth discovery paths, the loopback rule."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.fake_runtime import FakeServer
from tests.support.mcp import BOOK_GOLD, TOOL, run_server_expecting_exit, running_http_server
from tests.support.policies import DEFAULT_MODEL, OraclePolicy

pytestmark = pytest.mark.slow

TOKEN_ENV = "SQALE_TEST_TOKEN"
TOKEN = "correct-horse-battery-staple"
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
REFUSAL = {
    "error": "invalid_token",
    "error_description": (
        "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the token the server "
        f"reads from its {TOKEN_ENV} environment variable"
    ),
}


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `--transport streamable-http` server with a token, on a free port; yields its MCP URL.

    Shared by the module's tests: each only sends requests, and starting a server costs seconds.
    """
    tmp_path = tmp_path_factory.mktemp("http_server")
    fake = FakeServer(OraclePolicy(BOOK_GOLD), models=(DEFAULT_MODEL,)).start()
    try:
        with running_http_server(
            tmp_path, "--demo", "--ollama-host", fake.url, "--auth-token-env", TOKEN_ENV, **{TOKEN_ENV: TOKEN}
        ) as url:
            yield url
    finally:
        fake.stop()


def post_initialize(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        url, json=INITIALIZE, timeout=10, headers={"Accept": "application/json, text/event-stream", **headers}
    )


def test_missing_token_gets_401(http_server: str) -> None:
    """No Authorization header: 401 with a JSON reason and a Bearer challenge."""
    response = post_initialize(http_server, {})
    assert (response.status_code, response.json()) == (401, REFUSAL)
    assert response.headers["www-authenticate"] == 'Bearer realm="sqale-mcp", error="invalid_token"'


def test_wrong_token_gets_401(http_server: str) -> None:
    """A wrong token, a token of another scheme, or an empty one: 401."""
    for header in (f"Bearer {TOKEN}x", f"Basic {TOKEN}", "Bearer", TOKEN, f"Bearer {TOKEN[:-1]}"):
        response = post_initialize(http_server, {"Authorization": header})
        assert (response.status_code, response.json()) == (401, REFUSAL), header


def test_health_answers_without_a_token_and_tells_nothing(http_server: str) -> None:
    """GET /health: 200 with an empty body, no token needed (probes); the MCP endpoint still wants one."""
    health = httpx.get(http_server.removesuffix("/mcp") + "/health", timeout=10)
    assert (health.status_code, health.content) == (200, b"")
    assert httpx.get(http_server, timeout=10).status_code == 401
    assert httpx.get(http_server.removesuffix("/mcp") + "/other", timeout=10).status_code == 401


WELL_KNOWN = [
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-authorization-server/mcp",
    "/.well-known/openid-configuration",
    "/.well-known/openid-configuration/mcp",
    "/mcp/.well-known/openid-configuration",
    "/.well-known",
]
OAUTH_FALLBACKS = ["/register", "/authorize", "/token", "/register/"]


def test_oauth_paths_answer_404_as_a_server_without_oauth(http_server: str) -> None:
    """Every place OAuth clients look for metadata, and the endpoints they fall back to, answer 404
    with or without a token (a 401 there read as OAuth behind auth), saying how to send the
    token; /mcp and other paths still want one."""
    root = http_server.removesuffix("/mcp")
    for path in [*WELL_KNOWN, *OAUTH_FALLBACKS]:
        for method, headers in [("GET", {}), ("POST", {}), ("GET", {"Authorization": f"Bearer {TOKEN}"})]:
            response = httpx.request(method, root + path, timeout=10, headers=headers)
            assert (response.status_code, response.json()) == (
                404,
                {
                    "error": "not_found",
                    "error_description": "this server has no OAuth: send "
                    "'Authorization: Bearer <token>' to /mcp with the token the server reads from its "
                    f"{TOKEN_ENV} environment variable",
                },
            ), path
    for path in ("/mcp", "/.well-knownx", "/registers", "/mcp/register"):
        assert httpx.get(root + path, timeout=10).status_code == 401, path


def test_right_token_is_served(http_server: str) -> None:
    """The right token passes the check and reaches the MCP endpoint."""
    response = post_initialize(http_server, {"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert (
        json.loads(response.text.split("data: ", 1)[1].splitlines()[0])["result"]["serverInfo"]["name"]
        == "sqale-mcp"
    )


@pytest.mark.anyio
async def test_client_with_token_answers(http_server: str) -> None:
    """An MCP client sending the token lists the tool and gets answers."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
        Client(streamable_http_client(http_server, http_client=http)) as client,
    ):
        tools = (await client.list_tools()).tools
        result = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert [t.name for t in tools] == [TOOL]
    assert result.structured_content["rows"] == [[16]]


def test_non_loopback_without_token_is_refused(tmp_path: Path) -> None:
    """Listening on 0.0.0.0 without --auth-token-env: exit 2 before binding anything."""
    done = run_server_expecting_exit(tmp_path, "--demo", "--transport", "streamable-http", "--host", "0.0.0.0")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        (
            "sqale-mcp: refusing to listen on 0.0.0.0 without authentication: set --auth-token-env "
            "NAME (the token itself goes in that environment variable), [tokens.NAME] tables in the "
            "--config file, or use --host 127.0.0.1; see "
            "`sqale-mcp --help`\n"
        ),
    )


def test_token_variable_must_be_set(tmp_path: Path) -> None:
    """--auth-token-env naming an unset variable: exit 2 saying which variable to export."""
    done = run_server_expecting_exit(
        tmp_path, "--demo", "--transport", "streamable-http", "--auth-token-env", "SQALE_UNSET_TOKEN"
    )
    assert (done.returncode, done.stderr) == (
        2,
        (
            "sqale-mcp: --auth-token-env SQALE_UNSET_TOKEN: the environment variable SQALE_UNSET_TOKEN "
            "is not set or empty; export SQALE_UNSET_TOKEN=<secret> before starting the server\n"
        ),
    )


def test_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A port another program listens on: one line naming it and what to do, exit 2, no traceback,
    and no "serving MCP on" before it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_server_expecting_exit(
            tmp_path, "--demo", "--transport", "streamable-http", "--port", str(port), "--log-level", "WARNING"
        )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        (
            f"sqale-mcp: --port {port}: 127.0.0.1:{port} is already in use by another program; stop it or "
            "give another --port\n"
        ),
    )

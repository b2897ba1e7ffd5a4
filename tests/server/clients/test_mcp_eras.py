"""The MCP contract under both protocol eras: the 2025-11-25 handshake and 2026-07-28's
`server/discover` (stateless), over stdio and streamable HTTP with scoped tokens.

Each test runs the whole contract on one server subprocess: list, a call with progress, a
cancelled call (its model request closes), errors with structured content, and (HTTP) what
each token may see and ask.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import jsonschema
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agent.sqlite import create_database
from tests.support.mcp import (
    BOOK_GOLD,
    REPO,
    TOOL,
    KeyedPolicy,
    running_http_server,
    server_command,
    server_env,
)
from tests.support.policies import OraclePolicy, ScriptedReply, ScriptPolicy, tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# (Client mode, the protocol version it must end up speaking). "auto" probes server/discover.
ERAS = [
    pytest.param("legacy", "2025-11-25", id="2025-11-25"),
    pytest.param("auto", "2026-07-28", id="2026-07-28"),
]
SALES_GOLD = {"How many sales are there?": "SELECT count(*) FROM sales"}
TOKENS = {"SQALE_TOKEN_BOOKS": "books-secret", "SQALE_TOKEN_ALL": "all-secret"}
BOOK_QUESTION = "How many books are there?"
MISTYPED = (
    f"Error executing tool {TOOL}: `question` must be text: the question in plain language, not a "
    "list; `samples` must be a whole number from 1 to 8, or null for the server's default, not text."
)


@pytest.fixture
def fake(fake_ollama: Any) -> Any:
    """A fake Ollama: questions with 'stuck' hang on their second request; the rest are answered."""
    stuck = ScriptPolicy([tool_call("list_tables"), ScriptedReply(tool_call("list_tables"), delay=60)])
    return fake_ollama(KeyedPolicy({"stuck": stuck, "": OraclePolicy({**BOOK_GOLD, **SALES_GOLD})}))


@pytest.fixture
def team_url(tmp_path: Path, fake: Any) -> Iterator[str]:
    """A streamable-HTTP server with a token scoped to bookshop and one for every database."""
    sales = create_database(
        tmp_path / "sales.db",
        "CREATE TABLE sales (id INTEGER PRIMARY KEY, "
        "amount REAL); INSERT INTO sales (amount) VALUES (1.5), (2.5);",
    )
    config = tmp_path / "team.toml"
    config.write_text(
        f'[db]\nsales = "{sales}"\n\n[tokens.books]\nenv = "SQALE_TOKEN_BOOKS"\n'
        'databases = ["bookshop"]\n\n[tokens.all]\nenv = "SQALE_TOKEN_ALL"\n'
    )
    with running_http_server(
        tmp_path, "--config", str(config), "--demo", "--ollama-host", fake.url, "--runtime-slots", "1", **TOKENS
    ) as url:
        yield url


@asynccontextmanager
async def http_client(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    """An MCP client of `url` sending `token`, negotiating as `mode` says."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


async def check_contract(client: Client, fake: Any, version: str, aliases: list[str]) -> None:
    """List, calls with progress (strictly increasing, through a vote's waits), cancel
    mid-episode, errors: what every client relies on."""
    assert client.protocol_version == version
    (tool,) = (await client.list_tools()).tools
    assert tool.name == TOOL and tool.output_schema is not None
    assert tool.input_schema["properties"]["database"]["enum"] == aliases
    assert all(f"- {alias}: " in (tool.description or "") for alias in aliases)

    for samples in (1, 3):  # three samples on one runtime slot: two of them wait their turn
        progress: list[tuple[float, str | None]] = []

        async def on_progress(
            done: float,
            total: float | None,
            message: str | None,
            into: list[tuple[float, str | None]] = progress,
        ) -> None:
            into.append((done, message))

        answered = await client.call_tool(
            TOOL,
            {"question": BOOK_QUESTION, "database": "bookshop", "samples": samples},
            progress_callback=on_progress,
        )
        assert (answered.is_error, answered.structured_content["rows"]) == (False, [[16]])
        jsonschema.validate(answered.structured_content, tool.output_schema)
        values = [v for v, _ in progress]
        assert values and all(a < b for a, b in itertools.pairwise(values)), progress
        if samples == 1:
            assert all(m and m.startswith(("round ", "final answer")) for _, m in progress), progress
        else:  # the later samples say what they wait for: the model's one slot, or (a server of
            # several tokens keeps a place free for the others) this token's earlier samples
            assert any(
                ("waiting for the model" in (m or "")) or ("this token's earlier" in (m or ""))
                for _, m in progress
            ), progress

    before = len(fake.disconnects)
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: client.call_tool(TOOL, {"question": "stuck question", "database": "bookshop"}))
        with anyio.fail_after(20):
            while len([b for b in fake.bodies("/api/generate") if "stuck" in b["prompt"]]) < 2:
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    assert await fake.await_disconnects(before + 1, timeout=10), "the cancelled call's request stayed open"

    for arguments, kind in (
        ({"question": BOOK_QUESTION, "database": "nope"}, "unknown_database"),
        ({"question": BOOK_QUESTION, "samples": "many"}, "invalid_arguments"),
        ({"question": " ", "database": "bookshop"}, "invalid_arguments"),
    ):
        failed = await client.call_tool(TOOL, arguments)
        assert failed.is_error and failed.structured_content["stop_reason"] == kind, failed
        jsonschema.validate(failed.structured_content, tool.output_schema)
    mistyped = await client.call_tool(TOOL, {"question": ["How", "many?"], "samples": "many"})
    assert mistyped.content[0].text == MISTYPED, mistyped  # one line, nothing of pydantic's
    assert mistyped.structured_content["error"] == MISTYPED.removeprefix(f"Error executing tool {TOOL}: ")
    again = await client.call_tool(TOOL, {"question": BOOK_QUESTION, "database": "bookshop"})
    assert again.structured_content["rows"] == [[16]]  # the cancelled call left nothing behind


@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_stdio_contract(tmp_path: Path, fake: Any, mode: str, version: str) -> None:
    """Over stdio: the whole contract, in this era."""
    command = server_command("--demo", "--ollama-host", fake.url, "--runtime-slots", "1")
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(tmp_path), cwd=REPO)
    async with Client(params, mode=mode) as client:
        await check_contract(client, fake, version, ["bookshop"])


@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_http_contract_with_scoped_tokens(team_url: str, fake: Any, mode: str, version: str) -> None:
    """Over streamable HTTP: the contract for a scoped token; each token sees and asks only its own."""
    async with http_client(team_url, TOKENS["SQALE_TOKEN_BOOKS"], mode) as client:
        await check_contract(client, fake, version, ["bookshop"])
        assert "sales" not in ((await client.list_tools()).tools[0].description or "")
        refused = await client.call_tool(TOOL, {"question": "How many sales are there?", "database": "sales"})
        assert refused.is_error and refused.structured_content["stop_reason"] == "unknown_database"
        # Out of scope reads as nonexistent: the error lists only the token's own aliases.
        assert refused.content[0].text.endswith("as `database`: bookshop.")
    async with http_client(team_url, TOKENS["SQALE_TOKEN_ALL"], mode) as client:
        (tool,) = (await client.list_tools()).tools
        assert tool.input_schema["properties"]["database"]["enum"] == ["sales", "bookshop"]
        sales = await client.call_tool(TOOL, {"question": "How many sales are there?", "database": "sales"})
        assert sales.structured_content["rows"] == [[2]]
    first = {"legacy": "initialize", "auto": "server/discover"}[mode]  # each era's first request
    wrong = httpx.post(
        team_url,
        timeout=10,
        json={"jsonrpc": "2.0", "id": 1, "method": first, "params": {}},
        headers={"Authorization": "Bearer wrong-secret", "Accept": "application/json, text/event-stream"},
    )
    assert wrong.status_code == 401

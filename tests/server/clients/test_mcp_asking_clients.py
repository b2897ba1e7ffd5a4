"""Asking the person, through clients nobody here wrote, over real transports: the Python SDK's
client and the official TypeScript SDK v2 client, in both protocol eras, over stdio and
streamable HTTP with scoped tokens; a 2026-07-28 reply landing on a second server process; and
clients that declared no elicitation getting the bytes they got before."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from tests.support.choosing import (
    AUTHORS,
    BOOKS,
    OLD_BOOKS,
    SEED_FLAGS,
    FormReplies,
    accept,
    disagreeing_policy,
)
from tests.support.mcp import BOOK_GOLD, REPO, TOOL, running_http_server, server_command, server_env
from tests.support.node_tools import NODE_BIN, node_env
from tests.support.wire import wire_responses, without_timings

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(300)]

ERAS = [
    pytest.param("legacy", "2025-11-25", id="2025-11-25"),
    pytest.param("auto", "2026-07-28", id="2026-07-28"),
]
TOKENS = {"SQALE_TOKEN_BOOKS": "books-secret", "SQALE_TOKEN_ALL": "all-secret"}
STATE_KEY = {"SQALE_STATE_KEY": "a-shared-request-state-key-of-40-bytes!!"}
TS_CLIENT = "@modelcontextprotocol/client@2.4.0"  # the official TypeScript SDK's client (.ci/run installs it)
COUNT = BOOK_GOLD[BOOKS]


@pytest.fixture
def fake(fake_ollama: Any) -> Any:
    """A fake Ollama whose three samples (--seed 100) give two results for each demo question."""
    return fake_ollama(disagreeing_policy())


def team_flags(tmp_path: Path, fake: Any, *extra: str) -> list[str]:
    """The demo database behind two tokens: `books` scoped to it, `all` unscoped."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "team.toml"
    config.write_text(
        '[tokens.books]\nenv = "SQALE_TOKEN_BOOKS"\ndatabases = ["bookshop"]\n\n'
        '[tokens.all]\nenv = "SQALE_TOKEN_ALL"\n'
    )
    return ["--config", str(config), "--demo", "--ollama-host", fake.url, *SEED_FLAGS, *extra]


@contextmanager
def http_servers(tmp_path: Path, fake: Any, count: int, *extra: str, **env: str) -> Iterator[list[str]]:
    """`count` server processes on their own ports, each with the team's tokens; their MCP URLs."""
    with ExitStack() as stack:
        folders = [tmp_path / f"server{k}" for k in range(count)]
        yield [
            stack.enter_context(running_http_server(folder, *team_flags(folder, fake, *extra), **TOKENS, **env))
            for folder in folders
        ]


@asynccontextmanager
async def http_client(url: str, token: str, mode: str, replies: FormReplies | None) -> AsyncIterator[Client]:
    """An MCP client of `url` sending `token`, answering forms with `replies` (None: no elicitation)."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,  # type: ignore[arg-type]
            elicitation_callback=replies,
        ) as client,
    ):
        yield client


def chosen(result: CallToolResult) -> tuple[str | None, str | None, str | None]:
    """The answer's SQL, who chose it, and the person's reply."""
    answer = result.structured_content or {}
    return answer.get("sql"), answer.get("chosen_by"), (answer.get("asked") or {}).get("reply")


async def two_at_once(client: Client) -> dict[str, tuple[str | None, str | None, str | None]]:
    """Both demo questions asked at once on one session (their forms open together)."""
    got: dict[str, tuple[str | None, str | None, str | None]] = {}

    async def one(question: str) -> None:
        got[question] = chosen(await client.call_tool(TOOL, {"question": question}))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            group.start_soon(one, BOOKS)
            group.start_soon(one, AUTHORS)
    return got


@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_python_client_over_stdio(tmp_path: Path, fake: Any, mode: str, version: str) -> None:
    """The server as a subprocess on stdio: the form reaches the callback and the choice is the
    answer; a cancel leaves the vote's; two questions at once get their own forms."""
    command = server_command("--demo", "--ollama-host", fake.url, *SEED_FLAGS)
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(tmp_path), cwd=REPO)
    replies = FormReplies({BOOKS: accept("2"), AUTHORS: ElicitResult(action="cancel")}, both_open=anyio.Event())
    async with Client(params, mode=mode, elicitation_callback=replies) as client:  # type: ignore[arg-type]
        assert client.protocol_version == version
        got = await two_at_once(client)
    assert got == {BOOKS: (OLD_BOOKS, "user", "chose"), AUTHORS: (BOOK_GOLD[AUTHORS], "vote", "cancelled")}
    assert len(replies.seen) == 2


@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_python_client_over_http_with_scoped_tokens(
    tmp_path: Path, fake: Any, mode: str, version: str
) -> None:
    """Each token's client gets its own forms and answers: a choice and a decline on two questions
    at once; no reply within --ask-timeout (2025-11-25: the call stops waiting; 2026-07-28: the
    reply comes back late) and a cancel leave the vote's answer."""
    with http_servers(tmp_path, fake, 1, "--ask-timeout", "3") as (url,):
        both = FormReplies(
            {BOOKS: accept("2"), AUTHORS: ElicitResult(action="decline")}, both_open=anyio.Event()
        )
        async with http_client(url, TOKENS["SQALE_TOKEN_BOOKS"], mode, both) as books:
            assert books.protocol_version == version
            assert await two_at_once(books) == {
                BOOKS: (OLD_BOOKS, "user", "chose"),
                AUTHORS: (BOOK_GOLD[AUTHORS], "vote", "declined"),
            }
        slow = FormReplies({BOOKS: accept("2")}, delay=6)
        async with http_client(url, TOKENS["SQALE_TOKEN_ALL"], mode, slow) as everyone:
            late = "no_reply" if mode == "legacy" else "late_reply"
            assert chosen(await everyone.call_tool(TOOL, {"question": BOOKS})) == (COUNT, "vote", late)
        cancelling = FormReplies({BOOKS: ElicitResult(action="cancel")})
        async with http_client(url, TOKENS["SQALE_TOKEN_ALL"], mode, cancelling) as everyone:
            assert chosen(await everyone.call_tool(TOOL, {"question": BOOKS})) == (COUNT, "vote", "cancelled")


async def test_a_reply_lands_on_a_second_server_process(tmp_path: Path, fake: Any) -> None:
    """2026-07-28, two processes sharing --request-state-key-env behind no balancer: the form comes
    from the first, the reply goes to the second, which answers it. Another token cannot use the
    state; without the shared key the second process refuses it."""
    reply = {"choose_answer": accept("2")}
    with http_servers(
        tmp_path / "shared", fake, 2, "--request-state-key-env", "SQALE_STATE_KEY", **STATE_KEY
    ) as (first, second):
        state = await form_state(first, TOKENS["SQALE_TOKEN_BOOKS"])
        async with http_client(second, TOKENS["SQALE_TOKEN_ALL"], "auto", FormReplies({})) as thief:
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await thief.session.call_tool(
                    TOOL, {"question": BOOKS}, input_responses=reply, request_state=state
                )
        async with http_client(second, TOKENS["SQALE_TOKEN_BOOKS"], "auto", FormReplies({})) as client:
            answered = await client.session.call_tool(
                TOOL, {"question": BOOKS}, input_responses=reply, request_state=state
            )
        assert isinstance(answered, CallToolResult) and chosen(answered) == (OLD_BOOKS, "user", "chose")
        log = (tmp_path / "shared" / "server1" / "stderr.txt").read_text()
        assert "the person's choice (chose)" in log  # the second process answered it
    with http_servers(tmp_path / "own-keys", fake, 2) as (first, second):
        state = await form_state(first, TOKENS["SQALE_TOKEN_BOOKS"])
        async with http_client(second, TOKENS["SQALE_TOKEN_BOOKS"], "auto", FormReplies({})) as client:
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await client.session.call_tool(
                    TOOL, {"question": BOOKS}, input_responses=reply, request_state=state
                )


async def form_state(url: str, token: str) -> str:
    """The sealed request state of a 2026-07-28 call that asks for the form."""
    async with http_client(url, token, "auto", FormReplies({})) as client:
        with anyio.fail_after(120):
            first = await client.session.call_tool(TOOL, {"question": BOOKS}, allow_input_required=True)
    assert isinstance(first, InputRequiredResult) and first.request_state is not None
    return first.request_state


def run_ts_client(job: dict[str, Any]) -> dict[str, Any]:
    """The TypeScript client script's one JSON line for `job` (skipped when the client is absent)."""
    modules = REPO / ".ci" / "node" / "node_modules"
    if not (modules / "@modelcontextprotocol" / "client").is_dir() or not (NODE_BIN / "node").is_file():
        pytest.skip(
            f"{TS_CLIENT} or Node 22 is absent from .ci/node; install them with "
            f"`npm install --prefix .ci/node node@22 {TS_CLIENT}` (.ci/run does)"
        )
    done = subprocess.run(
        [str(NODE_BIN / "node"), str(REPO / "tests" / "support" / "ts_choosing_client.cjs")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env={**node_env(), "NODE_PATH": str(modules)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_typescript_client_with_its_elicitation_handler(
    tmp_path: Path, fake: Any, mode: str, version: str, transport: str
) -> None:
    """The official TypeScript SDK v2 client's `elicitation/create` handler gets the form (in the
    call, or through its input_required driver) and its choice becomes the answer."""
    job: dict[str, Any] = {
        "era": mode,
        "transport": transport,
        "arguments": {"question": BOOKS},
        "reply": {"action": "accept", "content": {"answer": "2"}},
    }
    if transport == "stdio":
        job.update(
            command=server_command("--demo", "--ollama-host", fake.url, *SEED_FLAGS),
            env=server_env(tmp_path),
            cwd=str(REPO),
        )
        out = await anyio.to_thread.run_sync(run_ts_client, job)
    else:
        with http_servers(tmp_path, fake, 1) as (url,):
            job.update(url=url, token=TOKENS["SQALE_TOKEN_BOOKS"])
            out = await anyio.to_thread.run_sync(run_ts_client, job)
    assert out["version"] == version
    assert [form["message"].split(" Which")[0] for form in out["forms"]] == [
        'The model found 2 different answers to "How many books are there?".'
    ]
    answer = out["result"]["structuredContent"]
    assert (answer["sql"], answer["chosen_by"], answer["asked"]["chosen"]) == (OLD_BOOKS, "user", 2)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_client_without_elicitation_gets_the_bytes_of_a_server_that_never_asks(
    tmp_path: Path, fake: Any, mode: str
) -> None:
    """Over stdio, the exact tools/list and tools/call lines (timings zeroed) of a disagreeing vote
    are the same as with --ask-to-choose off; over HTTP, the same results. (Recorded on main
    before asking existed, the tools/call lines were equal too; tools/list differs from main only
    by the output schema's two new optional fields.)"""
    arguments = {"question": BOOKS, "samples": 2}  # one sample each way: no early stop, the same every run
    flags = ["--demo", "--ollama-host", fake.url, *SEED_FLAGS]
    off = await wire_responses(tmp_path / "off", [*flags, "--ask-to-choose", "off"], arguments, mode=mode)
    on = await wire_responses(tmp_path / "on", flags, arguments, mode=mode)
    assert on == off
    assert "Other answers:" in json.loads(on["tools/call"])["result"]["content"][0]["text"]
    results = {}
    for name, extra in (("off", ("--ask-to-choose", "off")), ("on", ())):
        with http_servers(tmp_path / f"http-{name}", fake, 1, *extra) as (url,):
            async with http_client(
                url, TOKENS["SQALE_TOKEN_BOOKS"], "auto" if mode != "legacy" else "legacy", None
            ) as client:
                listed = (await client.list_tools()).tools[0].model_dump(mode="json")
                called = (await client.call_tool(TOOL, arguments)).model_dump(mode="json")
                results[name] = without_timings(json.dumps([listed, called]))
    assert results["on"] == results["off"]

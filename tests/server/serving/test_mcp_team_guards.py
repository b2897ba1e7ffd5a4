"""One token cannot spoil a team server for the others, over real HTTP on 127.0.0.1 (issues 22 and
31): sessions capped per token and bound to it, security headers sent once, idle ones closed,
silent or slow connections closed, and errors that name no server path or URL."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
import uuid
from typing import Any

import httpx
import pytest

from mcp_server.serving.headers import RepeatedHeader
from tests.support.team import (
    ALL,
    BOOK_QUESTION,
    BOOKS,
    INITIALIZE,
    JSON_AND_SSE,
    TOKENS,
    ask,
    error_text,
    in_session,
    open_session,
    sample_key,
)

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

SESSION_CAP = "max_sessions = 3\n"
Headers = list[tuple[str, str]]


def raw_post(
    http: httpx.Client, url: str, headers: Headers, payload: dict[str, Any] = INITIALIZE
) -> httpx.Response:
    """POST `payload` with exactly these header lines (repeats kept), besides Accept and Content-Type."""
    return http.post(url, content=json.dumps(payload).encode(), headers=[*JSON_AND_SSE.items(), *headers])


def refused_for(response: httpx.Response, name: str, joined: bool = False) -> bool:
    """True when `response` is the 400 naming header `name` as repeated (or joined)."""
    return (response.status_code, response.json()) == (
        400,
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": str(RepeatedHeader(name, joined))}},
    )


def test_a_repeated_protocol_version_opens_no_session(team_server: Any) -> None:
    """Issue 31's attack: Mcp-Protocol-Version 2025-11-25 then 2026-07-28 (the SDK routed on the
    first, our cap read the last) is 400 and opens nothing, nor do the reversed order or the two
    joined by a comma; the token still gets its 3 sessions and no more, and another token its own."""
    server = team_server("--max-sessions", "30", books_quota=SESSION_CAP)
    auth = ("Authorization", f"Bearer {BOOKS}")
    with httpx.Client(timeout=10) as http:
        for _ in range(12):
            for versions in (["2025-11-25", "2026-07-28"], ["2026-07-28", "2025-11-25"]):
                sent = raw_post(http, server.url, [auth, *(("Mcp-Protocol-Version", v) for v in versions)])
                assert refused_for(sent, "mcp-protocol-version"), sent.text
            joined = raw_post(http, server.url, [auth, ("Mcp-Protocol-Version", "2025-11-25, 2026-07-28")])
            assert refused_for(joined, "mcp-protocol-version", joined=True), joined.text
        assert [open_session(http, server.url, BOOKS).status_code for _ in range(5)] == [200] * 3 + [429] * 2
        assert open_session(http, server.url, ALL).status_code == 200
    metrics = server.metrics()
    assert metrics[sample_key("sqale_http_sessions", {"token": "books"})] == 3
    assert metrics[sample_key("sqale_http_sessions", {"token": "all"})] == 1


def test_a_repeated_session_id_cannot_free_a_place(team_server: Any) -> None:
    """Mcp-Session-Id twice, an unknown id then the token's own (the SDK answered 404 for the first
    while our count closed the second, yet the SDK kept it), in any case: 400, and the cap holds."""
    server = team_server(books_quota=SESSION_CAP)
    auth = ("Authorization", f"Bearer {BOOKS}")
    version = ("Mcp-Protocol-Version", "2025-06-18")
    with httpx.Client(timeout=10) as http:
        ids = [open_session(http, server.url, BOOKS).headers["mcp-session-id"] for _ in range(3)]
        for own in ids:
            for first, second in [("Mcp-Session-Id", "mcp-session-id"), ("MCP-SESSION-ID", "Mcp-Session-Id")]:
                pair = [(first, uuid.uuid4().hex), (second, own)]
                listed = raw_post(
                    http,
                    server.url,
                    [auth, version, *pair],
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
                )
                assert refused_for(listed, "mcp-session-id"), listed.text
                ended = http.request("DELETE", server.url, headers=[auth, version, *pair])
                assert refused_for(ended, "mcp-session-id"), ended.text
        assert open_session(http, server.url, BOOKS).status_code == 429
        assert all(in_session(http, "POST", server.url, BOOKS, own).status_code == 200 for own in ids)
    assert server.metrics()[sample_key("sqale_http_sessions", {"token": "books"})] == 3


def test_two_credentials_in_one_request_are_refused(team_server: Any) -> None:
    """Authorization twice (two tokens, either order, or one token twice) or two joined by a comma:
    400 on /mcp and on /metrics; Mcp-Method and Mcp-Name twice: 400; one of each is served."""
    server = team_server()
    metrics_url = server.url.removesuffix("/mcp") + "/metrics"
    metrics_token = f"Bearer {TOKENS['SQALE_METRICS_TOKEN']}"
    with httpx.Client(timeout=10) as http:
        for pair in [(BOOKS, ALL), (ALL, BOOKS), (BOOKS, BOOKS)]:
            sent = raw_post(http, server.url, [("Authorization", f"Bearer {t}") for t in pair])
            assert refused_for(sent, "authorization"), sent.text
        joined = raw_post(http, server.url, [("Authorization", f"Bearer {BOOKS}, Bearer {ALL}")])
        assert refused_for(joined, "authorization", joined=True), joined.text
        for second in (metrics_token, f"Bearer {ALL}"):
            scraped = http.get(
                metrics_url, headers=[("Authorization", metrics_token), ("authorization", second)]
            )
            assert refused_for(scraped, "authorization"), scraped.text
        assert http.get(metrics_url, headers={"Authorization": metrics_token}).status_code == 200
        for name, value in [("Mcp-Method", "initialize"), ("Mcp-Name", "answer_sql_question")]:
            sent = raw_post(
                http, server.url, [("Authorization", f"Bearer {ALL}"), (name, value), (name, value)]
            )
            assert refused_for(sent, name.lower()), sent.text
        assert (
            raw_post(
                http, server.url, [("Authorization", f"Bearer {ALL}"), ("Mcp-Method", "initialize")]
            ).status_code
            == 200
        )


def test_one_token_cannot_take_every_session(team_server: Any) -> None:
    """A token allowed 3 sessions gets 3, then 429 saying why and when; another token still opens
    one; ending a session (DELETE) makes room again."""
    server = team_server("--max-sessions", "10", books_quota=SESSION_CAP)
    with httpx.Client(timeout=10) as http:
        opened = [open_session(http, server.url, BOOKS) for _ in range(5)]
        assert [r.status_code for r in opened] == [200, 200, 200, 429, 429]
        refused = opened[3].json()["error"]["message"]
        assert refused.startswith(
            "Too many open sessions for token 'books': it holds 3, the most one "
            "token may have. End the sessions you no longer use"
        )
        assert int(opened[3].headers["retry-after"]) >= 1
        other = open_session(http, server.url, ALL)
        assert other.status_code == 200 and other.headers["mcp-session-id"]
        first = opened[0].headers["mcp-session-id"]
        assert in_session(http, "DELETE", server.url, BOOKS, first).status_code == 200
        assert open_session(http, server.url, BOOKS).status_code == 200
    metrics = server.metrics()
    assert metrics[sample_key("sqale_http_sessions", {"token": "books"})] == 3
    assert metrics[sample_key("sqale_http_sessions_refused_total", {"token": "books"})] == 2


def test_a_session_answers_only_the_token_that_opened_it(team_server: Any) -> None:
    """Another token's DELETE or request with a session's id gets exactly the unknown-id answer,
    and the owner's session goes on; logs show the id only as a short hash."""
    server = team_server()
    with httpx.Client(timeout=10) as http:
        session = open_session(http, server.url, BOOKS).headers["mcp-session-id"]
        unknown = uuid.uuid4().hex
        for method in ("DELETE", "POST", "GET"):
            foreign = in_session(http, method, server.url, ALL, session)
            missing = in_session(http, method, server.url, ALL, unknown)
            assert (
                (foreign.status_code, foreign.content)
                == (missing.status_code, missing.content)
                == (404, missing.content)
            )
        listed = in_session(http, "POST", server.url, BOOKS, session)
        assert listed.status_code == 200 and "answer_sql_question" in listed.text
    log = server.stderr.read_text()
    assert session not in log and re.search(r"\b[0-9a-f]{32}\b", log) is None
    assert "session:" in log


def test_idle_sessions_close_and_free_their_place(team_server: Any) -> None:
    """With --session-idle-timeout 1, a token at its cap can open sessions again once its idle
    ones have closed; an expired id answers 404."""
    server = team_server("--session-idle-timeout", "1", books_quota=SESSION_CAP)
    with httpx.Client(timeout=10) as http:
        ids = [open_session(http, server.url, BOOKS).headers["mcp-session-id"] for _ in range(3)]
        assert open_session(http, server.url, BOOKS).status_code == 429
        time.sleep(1.6)
        assert open_session(http, server.url, BOOKS).status_code == 200
        assert in_session(http, "POST", server.url, BOOKS, ids[0]).status_code == 404


async def test_a_token_at_its_cap_does_not_stop_another_asking(team_server: Any) -> None:
    """With 5 sessions for the whole server, one token trying 10 holds 3; another token asks and
    is answered."""
    server = team_server("--max-sessions", "5", books_quota=SESSION_CAP)
    with httpx.Client(timeout=10) as http:
        codes = [open_session(http, server.url, BOOKS).status_code for _ in range(10)]
    assert codes == [200] * 3 + [429] * 7
    answered = await ask(server.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop"})
    assert answered.structured_content["rows"] == [[16]]


@pytest.mark.parametrize("stall", ["nothing", "half the headers"])
def test_silent_or_slow_connections_are_closed(team_server: Any, stall: str) -> None:
    """Fifty connections that send nothing (or half their headers, slowly) are closed once the
    header timeout passes; the server keeps answering meanwhile."""
    server = team_server("--http-header-timeout", "1")
    sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(50)]
    if stall != "nothing":
        for sock in sockets:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    assert httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=5).status_code == 200
    started = time.monotonic()
    for sock in sockets:
        sock.settimeout(max(0.1, started + 5 - time.monotonic()))
        assert sock.recv(1024) == b""  # closed by the server, without an answer
        sock.close()
    assert time.monotonic() - started < 5


def test_a_body_that_never_arrives_gets_408(team_server: Any) -> None:
    """A request that promises 1,000 bytes and sends 10 is answered 408 after the body timeout."""
    server = team_server("--http-body-timeout", "1")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            + BOOKS.encode()
            + b'\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"jsonrpc"'
        )
        sock.settimeout(5)
        started = time.monotonic()
        reply = b""
        while chunk := sock.recv(4096):  # until the server closes the connection
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s" in reply
    assert time.monotonic() - started < 4


def test_connections_past_the_cap_are_closed_at_once(team_server: Any) -> None:
    """With --http-max-connections 20, the 21st to 30th idle connections are closed at once."""
    server = team_server("--http-max-connections", "20", "--http-header-timeout", "3")
    sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(30)]
    time.sleep(0.5)
    closed = 0
    for sock in sockets:
        sock.settimeout(0.05)
        with contextlib.suppress(TimeoutError):
            closed += sock.recv(1) == b""
        sock.close()
    assert closed >= 10


async def test_remote_errors_name_no_path_or_url(team_server: Any, dead_url: str) -> None:
    """Over HTTP: a dead model runtime and a database file gone bad are errors with the alias, a
    plain cause and a question id; the server's log has the URL and path under that id."""
    down = team_server("--log-format", "json", ollama_url=dead_url)
    text = error_text(await ask(down.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop"}))
    assert text.startswith("The model runtime is unreachable") and "127.0.0.1" not in text
    question_id = re.search(r"question id ([0-9a-f]{12})\.$", text).group(1)  # type: ignore[union-attr]
    (event,) = [
        e for e in map(json.loads, down.stderr.read_text().splitlines()) if e["question_id"] == question_id
    ]
    assert dead_url.removeprefix("http://") in event["event"]
    down.process.kill()
    server = team_server()
    sales = server.episode_log.parent / "sales.db"
    sales.write_bytes(b"this is not a database " * 100)
    text = error_text(
        await ask(server.url, ALL, {"question": "How many sales are there?", "database": "sales"})
    )
    assert text.startswith("The database 'sales' cannot be read") and str(sales.parent) not in text
    assert str(sales) in server.stderr.read_text()
    # The SDK's own argument errors echo only what the client sent.
    invalid = error_text(await ask(server.url, ALL, {"question": BOOK_QUESTION, "samples": "many"}))
    assert "samples" in invalid and str(sales.parent) not in invalid and "127.0.0.1" not in invalid

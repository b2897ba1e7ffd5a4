"""One reader of the security headers (issue 31 §3): a repeated, case-varied or comma-joined copy
is refused before anything reads it, so what we check is what the SDK routes on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_server.serving.headers import (
    SECURITY_HEADERS,
    RepeatedHeader,
    SecurityHeaderCheck,
    SecurityHeaders,
    read_security_headers,
    security_headers,
)

pytestmark = pytest.mark.anyio

VALUES = {
    "authorization": b"Bearer secret-a",
    "mcp-protocol-version": b"2025-11-25",
    "mcp-session-id": b"0123abcd",
    "mcp-method": b"tools/call",
    "mcp-name": b"answer_sql_question",
}


def test_one_copy_of_each_is_read_whole() -> None:
    """One copy of each security header, in any case, is read as sent; other headers are ignored."""
    raw = [
        (b"Accept", b"application/json"),
        (b"accept", b"text/event-stream"),
        *((name.title().encode(), value) for name, value in VALUES.items()),
    ]
    assert read_security_headers(raw) == SecurityHeaders(
        authorization="Bearer secret-a",
        protocol_version="2025-11-25",
        session_id="0123abcd",
        method="tools/call",
        name="answer_sql_question",
    )
    assert read_security_headers([]) == SecurityHeaders()


@pytest.mark.parametrize("name", list(SECURITY_HEADERS))
def test_every_security_header_repeated_in_any_case_is_refused(name: str) -> None:
    """A second copy, same value or not, lower or mixed case, is refused, naming the header."""
    for first, second in [(name, name), (name, name.upper()), (name.title(), name)]:
        with pytest.raises(RepeatedHeader) as info:
            read_security_headers(
                [(first.encode(), VALUES[name]), (b"x-other", b"1"), (second.encode(), VALUES[name])]
            )
        assert info.value == RepeatedHeader(name)
    assert str(RepeatedHeader(name)) == (
        f"Bad request: the {SECURITY_HEADERS[name]} header appears more than once. Send it once, "
        "with one value (a proxy in front may have joined two copies)."
    )


def test_comma_joined_values_are_refused_where_no_value_holds_a_comma() -> None:
    """Two values joined by a comma (a proxy's fold of two lines) are refused; Mcp-Name may hold
    one (a resource URI)."""
    for name, joined in [
        ("authorization", b"Bearer secret-a, Bearer secret-b"),
        ("mcp-protocol-version", b"2025-11-25, 2026-07-28"),
        ("mcp-session-id", b"0123abcd,ffff"),
        ("mcp-method", b"tools/call,tools/list"),
    ]:
        with pytest.raises(RepeatedHeader) as info:
            read_security_headers([(name.encode(), joined)])
        assert info.value == RepeatedHeader(name, joined=True)
    assert read_security_headers([(b"mcp-name", b"file:///a,b")]).name == "file:///a,b"
    assert str(RepeatedHeader("mcp-protocol-version", joined=True)) == (
        "Bad request: the Mcp-Protocol-Version header holds several values joined by a comma. Send "
        "it once, with one value (a proxy in front may have joined two copies)."
    )


def test_the_bearer_token_is_read_as_the_sdk_reads_it() -> None:
    """`Bearer <token>` in any case gives the token; another scheme, or none, gives None."""
    for header, token in [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER a b", "a b"),
        ("Basic abc", None),
        ("Bearer", None),
        ("abc", None),
        (None, None),
    ]:
        assert SecurityHeaders(authorization=header).bearer_token == token, header


async def _check(headers: list[tuple[bytes, bytes]]) -> tuple[dict[str, Any], list[Any]]:
    """SecurityHeaderCheck on one POST /mcp with these raw headers: the scope it passed on (empty
    when it passed none) and what it sent."""
    seen: dict[str, Any] = {}
    sent: list[Any] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    await SecurityHeaderCheck(inner)(scope, receive, send)
    return seen, sent


async def test_the_check_answers_400_and_passes_the_rest_on_lower_cased() -> None:
    """A repeat gets 400 with a JSON-RPC error naming the header, and nothing behind it runs; a
    clean request passes on with lower-case names and its parsed values in the scope."""
    seen, sent = await _check([(b"Mcp-Session-Id", b"a"), (b"mcp-session-id", b"b")])
    assert seen == {}
    assert sent[0]["status"] == 400
    assert json.loads(sent[1]["body"]) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": str(RepeatedHeader("mcp-session-id"))},
    }
    seen, sent = await _check([(b"Mcp-Protocol-Version", b"2025-11-25"), (b"Host", b"127.0.0.1")])
    assert sent == []
    assert seen["headers"] == [(b"mcp-protocol-version", b"2025-11-25"), (b"host", b"127.0.0.1")]
    assert security_headers(seen) == SecurityHeaders(protocol_version="2025-11-25")

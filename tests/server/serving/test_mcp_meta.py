"""A request's `_meta` is untrusted input of any JSON type (serving/meta.py), and a call's quota comes
before anything that can fail (answer/door.py, serving/quotas.py)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from mcp_server.serving.meta import MetaRefused, checked_meta, trace_fields
from tests.support.mcp import BOOK_GOLD, TOOL
from tests.support.mcp_in_process import build, error_text, valid_answer
from tests.support.policies import OraclePolicy, PolicyBackend
from tests.support.team import JSON_AND_SSE

pytestmark = pytest.mark.anyio

QUESTION = "How many books are there?"
# Every JSON type, and what a careless or hostile client sends beyond it.
HOSTILE = [
    7,
    -1,
    2**70,
    1.5,
    math.nan,
    math.inf,
    True,
    False,
    None,
    [],
    [1, 2],
    ["00-ab"],
    {},
    {"a": 1},
    "",
    "x" * 100_000,
    "00-" + "0" * 32 + "-" + "0" * 16 + "-01\u00e9",
    "é",
    "\x00",
    "a\nb",
]
TRACE_KEYS = ("traceparent", "tracestate", "baggage")


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_any_trace_field_is_answered_as_if_absent(
    tmp_path: Path, mode: str, traced: bool, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """`traceparent`, `tracestate` or `baggage` of any JSON type: the question is answered, in both
    eras, with OpenTelemetry recording or not, and nothing is logged with a traceback (a `baggage`
    of 7 crashed the SDK's span on every server; `traceparent` 7 ours over HTTP)."""
    if traced:
        request.getfixturevalue("otel")
    server = build(tmp_path, ["--demo"], PolicyBackend(OraclePolicy(BOOK_GOLD)))
    caplog.set_level(logging.INFO)
    async with Client(server, mode=mode) as client:
        for key in TRACE_KEYS:
            for value in HOSTILE:
                if isinstance(value, float) and not math.isfinite(value):
                    continue  # not JSON: the client cannot send it (the raw test below does)
                result = await client.call_tool(TOOL, {"question": QUESTION}, meta={key: value})
                assert (result.is_error, valid_answer(result)["rows"]) == (False, [[16]]), (key, value)
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_checked_meta_leaves_out_what_no_propagator_can_read() -> None:
    """Trace fields that are not header text (ASCII, bounded) are left out, the rest kept as they are;
    a valid `_meta` comes back as the same object."""
    fields = trace_fields()
    assert {"traceparent", "tracestate", "baggage"} <= fields
    good = {
        "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        "baggage": "k=v",
        "progressToken": 3,
        "other": [1, {"x": None}],
    }
    assert checked_meta(good, fields) is good
    for value in HOSTILE:
        if isinstance(value, str) and len(value) <= 8_192 and value.isascii():
            continue
        assert checked_meta({**good, "traceparent": value}, fields) == {
            k: v for k, v in good.items() if k != "traceparent"
        }


@pytest.mark.parametrize(
    ("meta", "said"),
    [
        (7, "`_meta` must be an object, not a whole number"),
        ([], "`_meta` must be an object, not a list"),
        ("x", "`_meta` must be an object, not text of 1 characters"),
        ({"progressToken": [1]}, "not a list"),
        ({"progressToken": {"a": 1}}, "not an object"),
        ({"progressToken": None}, "not null"),
        ({"progressToken": True}, "not a boolean"),
        ({"progressToken": 1.5}, "not a decimal number"),
        ({"progressToken": math.nan}, "not a decimal number"),
        ({"progressToken": 2**64}, "not a whole number past 64 bits"),
        ({"progressToken": "t" * 1_001}, "not text of 1,001 characters"),
    ],
)
def test_a_progress_token_that_cannot_be_echoed_is_refused_naming_it(meta: Any, said: str) -> None:
    """A request whose `_meta` is no object, or whose progressToken is no bounded text or whole number,
    is refused with a message naming the field and what it takes (a notification's is left out)."""
    with pytest.raises(MetaRefused) as refused:
        checked_meta(meta, trace_fields())
    assert str(refused.value).endswith(said)
    if isinstance(meta, dict):
        assert "progressToken" not in checked_meta(meta, trace_fields(), request=False)
    for token in ("t" * 1_000, 0, -(2**63), 2**63 - 1, "é"):
        assert checked_meta({"progressToken": token}, trace_fields())["progressToken"] == token


async def test_a_calls_quota_comes_before_anything_that_can_fail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Calls that fail on their arguments count against the token's minute too: with 3 a minute, two
    empty questions and one answer leave nothing, the next is refused for its quota, and a question
    refused for its samples gives its first episode back."""
    server = build(
        tmp_path,
        ["--demo", "--token-per-minute", "3", "--max-samples", "5"],
        PolicyBackend(OraclePolicy(BOOK_GOLD)),
    )
    async with Client(server) as client:
        for _ in range(2):
            empty = await client.call_tool(TOOL, {"question": " "})
            assert error_text(empty).startswith("The question is empty")
        assert error_text(await client.call_tool(TOOL, {"question": QUESTION, "samples": 2})).startswith(
            "Too many questions: token 'local' may run 3 episodes per minute (each sample is one) and this "
            "question needs 2."
        )  # one left: its first episode was given back
        assert not (await client.call_tool(TOOL, {"question": QUESTION})).is_error
        refused = await client.call_tool(TOOL, {"question": " "})
    assert error_text(refused).startswith("Too many questions: token 'local' may ask 3 per minute. Retry in ")
    assert valid_answer(refused)["status"] == "refused" and valid_answer(refused)["stop_reason"] == "quota"


@pytest.mark.slow
async def test_hostile_meta_over_http_is_checked_after_the_quota(team_server: Any) -> None:
    """Raw JSON over HTTP with an OTLP exporter configured: `traceparent` 7, NaN, a list; a progress
    token of every wrong type; a `_meta` of 7. Each call counts against the token's minute (6 here),
    none crashes, a bad progress token is refused naming it, and past the minute the calls are refused
    for the quota; the server logs no traceback."""
    exporter = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_METRIC_EXPORT_INTERVAL": "3600000",
        "OTEL_BSP_SCHEDULE_DELAY": "3600000",
    }
    server = team_server(books_quota="questions-per-minute = 6\n", environ=exporter)
    headers = {**JSON_AND_SSE, "Authorization": "Bearer books-secret"}
    with httpx.Client(timeout=60) as http:
        opened = http.post(
            server.url,
            headers=headers,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            },
        )
        session = {
            **headers,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        http.post(server.url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

        def call(meta_json: str, n: int) -> dict[str, Any]:
            # Written by hand: `NaN` is no JSON a library writes, and a client may still send it.
            body = (
                f'{{"jsonrpc": "2.0", "id": {n}, "method": "tools/call", "params": {{"name": "{TOOL}", '
                f'"arguments": {{"question": "{QUESTION}"}}, "_meta": {meta_json}}}}}'
            )
            reply = http.post(server.url, headers=session, content=body)
            data = next(line for line in reply.text.splitlines() if line.startswith("data: "))
            return json.loads(data.removeprefix("data: "))

        answered = [
            call(meta, n)
            for n, meta in enumerate(
                ('{"traceparent": 7}', '{"traceparent": NaN}', '{"baggage": [1, 2], "tracestate": {"a": 1}}'),
                10,
            )
        ]
        refused = [
            call(meta, n)
            for n, meta in enumerate(('{"progressToken": [1]}', '{"progressToken": 1.5}', "7"), 20)
        ]
        past = [call('{"traceparent": 7}', n) for n in range(30, 33)]
    assert [r["result"]["structuredContent"]["rows"] for r in answered] == [[[16]]] * 3
    assert [r["error"]["code"] for r in refused] == [-32602] * 3
    assert [r["error"]["message"] for r in refused] == [
        "`_meta.progressToken` must be text of at most 1,000 characters or a whole number (the token "
        "progress notifications carry), not a list",
        "`_meta.progressToken` must be text of at most 1,000 characters or a whole number (the token "
        "progress notifications carry), not a decimal number",
        "`_meta` must be an object, not a whole number",
    ]
    assert [r["result"]["structuredContent"]["stop_reason"] for r in past] == ["quota"] * 3
    assert "Traceback" not in server.stderr.read_text()

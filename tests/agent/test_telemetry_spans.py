"""One answer is one OpenTelemetry trace, from the MCP call to each SQLite statement, recorded by
the SDK's in-memory exporter: its tree, its attributes, the caller's trace carried in `_meta` in
both protocol eras, the error status of a question that was not answered, and the metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from opentelemetry import context, trace

from agent.telemetry import names as n
from tests.support.choosing import BOOKS, SEED_FLAGS, FormReplies, accept, disagreeing_policy
from tests.support.mcp import BOOK_GOLD, TOOL
from tests.support.mcp_in_process import build
from tests.support.policies import OraclePolicy, PolicyBackend, ScriptedReply, ScriptPolicy, tool_call
from tests.support.telemetry import Telemetry, attributes

pytestmark = pytest.mark.anyio

QUESTION = "How many books are there?"
MODEL = "qwen3.5-2b-grpo-synsql"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
# One sample of OraclePolicy: list_tables, run_query of the gold SQL, submit_sql (run, then run
# again as the answer); the database's schema is read once, by the first sample.
SAMPLE = [
    "invoke_agent sqale-agent",
    "sqale.round",
    "text_completion " + MODEL,
    "execute_tool list_tables",
    "sqale.round",
    "text_completion " + MODEL,
    "execute_tool run_query",
    "SELECT",
    "sqale.round",
    "text_completion " + MODEL,
    "execute_tool submit_sql",
    "SELECT",
    "SELECT",
]
DEPTHS = [2, 3, 4, 4, 3, 4, 4, 5, 3, 4, 4, 5, 4]


def indented(names: list[str], depths: list[int]) -> list[str]:
    return [f"{'  ' * d}{name}" for name, d in zip(names, depths, strict=True)]


def the_call(otel: Telemetry) -> Any:
    """The one tools/call span (the SDK's SERVER span)."""
    calls = otel.named(f"tools/call {TOOL}")
    assert len(calls) == 1, [s.name for s in otel.spans()]
    return calls[0]


async def test_one_answer_is_one_trace_down_to_each_statement(tmp_path: Path, otel: Telemetry) -> None:
    """Two samples: the MCP call, the question, each sample's episode, its rounds with their model
    call and tool calls, and every statement the worker ran (the vote's too), in one trace."""
    server = build(tmp_path, ["--demo", "--samples", "2"], PolicyBackend(OraclePolicy(BOOK_GOLD)))
    async with Client(server) as client:
        result = await client.call_tool(TOOL, {"question": QUESTION}, meta={"traceparent": TRACEPARENT})
    assert not result.is_error
    call = the_call(otel)
    first = ["  read_schema", *indented(SAMPLE, DEPTHS)][1:]  # the first sample reads the schema
    first.insert(1, "      read_schema")
    assert otel.tree(call) == [
        f"tools/call {TOOL}",
        "  invoke_workflow answer_sql_question",
        *first,
        *indented(SAMPLE, DEPTHS),
        "    SELECT",
    ]  # the vote's run of the answer
    assert {format(s.context.trace_id, "032x") for s in otel.descendants(call)} == {CALLER_TRACE}
    question = otel.children(call)[0]
    assert attributes(
        question,
        [
            n.OPERATION_NAME,
            n.WORKFLOW_NAME_KEY,
            n.FRONT_END,
            n.DATABASE,
            n.TOKEN,
            n.SAMPLES,
            n.STATUS,
            n.STOP_REASON,
            n.ROWS,
            n.AGREEMENT,
        ],
    ) == {
        n.OPERATION_NAME: "invoke_workflow",
        n.WORKFLOW_NAME_KEY: "answer_sql_question",
        n.FRONT_END: "mcp",
        n.DATABASE: "bookshop",
        n.TOKEN: "local",
        n.SAMPLES: 2,
        n.STATUS: "submitted",
        n.STOP_REASON: "submit_sql",
        n.ROWS: 1,
        n.AGREEMENT: 1.0,
    }
    episodes = otel.named("invoke_agent sqale-agent")
    assert [
        attributes(
            e, [n.SAMPLE_INDEX, n.STATUS, n.STOP_REASON, n.ROUNDS, n.TOOL_CALLS, n.ROWS, n.REQUEST_MODEL]
        )
        for e in episodes
    ] == [
        {
            n.SAMPLE_INDEX: k,
            n.STATUS: "submitted",
            n.STOP_REASON: "submit_sql",
            n.ROUNDS: 3,
            n.TOOL_CALLS: 3,
            n.ROWS: 1,
            n.REQUEST_MODEL: MODEL,
        }
        for k in (0, 1)
    ]
    seeds = [e.attributes[n.REQUEST_SEED] for e in episodes]
    assert seeds[1] == seeds[0] + 1 and all(n.QUEUED_SECONDS in e.attributes for e in episodes)
    model_call = otel.named("text_completion " + MODEL)[0]
    assert attributes(
        model_call, [n.OPERATION_NAME, n.PROVIDER_NAME, n.REQUEST_MODEL, n.REQUEST_MAX_TOKENS, n.FINISH_REASONS]
    ) == {
        n.OPERATION_NAME: "text_completion",
        n.PROVIDER_NAME: "ollama",
        n.REQUEST_MODEL: MODEL,
        n.REQUEST_MAX_TOKENS: 2048,
        n.FINISH_REASONS: ("stop",),
    }
    assert model_call.attributes[n.INPUT_TOKENS] > 0 and model_call.attributes[n.OUTPUT_TOKENS] > 0
    assert model_call.kind.name == "CLIENT"
    run_query = otel.named("execute_tool run_query")[0]
    assert attributes(run_query, [n.OPERATION_NAME, n.TOOL_NAME, n.TOOL_TYPE, n.TOOL_OK, n.ROWS]) == {
        n.OPERATION_NAME: "execute_tool",
        n.TOOL_NAME: "run_query",
        n.TOOL_TYPE: "function",
        n.TOOL_OK: True,
        n.ROWS: 1,
    }
    statement = otel.children(run_query)[0]
    assert attributes(
        statement,
        [
            n.DB_SYSTEM,
            n.DB_OPERATION,
            n.DB_NAMESPACE,
            n.DB_RETURNED_ROWS,
            n.SQLITE_STATUS,
            n.SQLITE_CUT,
            n.SQLITE_INTERRUPTED,
        ],
    ) == {
        n.DB_SYSTEM: "sqlite",
        n.DB_OPERATION: "SELECT",
        n.DB_NAMESPACE: "bookshop-v1.sqlite",
        n.DB_RETURNED_ROWS: 1,
        n.SQLITE_STATUS: "ok",
        n.SQLITE_CUT: False,
        n.SQLITE_INTERRUPTED: False,
    }
    assert statement.kind.name == "CLIENT" and statement.attributes[n.SQLITE_SECONDS] >= 0
    assert all(s.status.status_code.name == "UNSET" for s in otel.spans())


ERAS = [pytest.param("legacy", id="2025-11-25"), pytest.param("auto", id="2026-07-28")]


@pytest.mark.parametrize("mode", ERAS)
async def test_the_callers_trace_continues_from_meta_in_both_eras(
    tmp_path: Path, otel: Telemetry, mode: str
) -> None:
    """The caller's trace reaches the server in the request's `_meta` (`traceparent`, `tracestate`)
    in the handshake era and the stateless one alike: the MCP span's parent is the caller's span
    (or, where the SDK's client makes one, its `MCP send` span), and every span of the answer is in
    the caller's trace. The server's tasks started before the caller's span, so nothing but `_meta`
    can carry it."""
    server = build(tmp_path, ["--demo"], PolicyBackend(OraclePolicy(BOOK_GOLD)))
    caller = trace.NonRecordingSpan(
        trace.SpanContext(
            int(CALLER_TRACE, 16),
            int(CALLER_SPAN, 16),
            is_remote=True,
            trace_flags=trace.TraceFlags(1),
            trace_state=trace.TraceState([("rojo", "t61rcWkgMzE")]),
        )
    )
    async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
        token = context.attach(trace.set_span_in_context(caller))
        try:
            await client.call_tool(
                TOOL,
                {"question": QUESTION},
                meta={"traceparent": TRACEPARENT, "tracestate": "rojo=t61rcWkgMzE"},
            )
        finally:
            context.detach(token)
    call = the_call(otel)
    sent = otel.named(f"MCP send tools/call {TOOL}")  # the SDK's client span, in the handshake era
    parent = format(sent[0].context.span_id, "016x") if sent else CALLER_SPAN
    assert (format(call.parent.span_id, "016x"), call.parent.is_remote) == (parent, True)
    assert call.attributes["mcp.protocol.version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert {format(s.context.trace_id, "032x") for s in otel.descendants(call)} == {CALLER_TRACE}
    assert len(otel.descendants(call)) == 16  # the question, its episode and everything below
    assert {s.context.trace_state.get("rojo") for s in otel.descendants(call)} == {"t61rcWkgMzE"}


def question_status(otel: Telemetry) -> tuple[str, str | None, Any]:
    question = otel.named("invoke_workflow answer_sql_question")[-1]
    return (
        question.status.status_code.name,
        question.status.description,
        question.attributes.get(n.ERROR_TYPE),
    )


async def test_a_failed_question_ends_in_error_saying_which(tmp_path: Path, otel: Telemetry) -> None:
    """The model runtime down: the model call, the episode and the question end in error naming
    the failure, as the log line does; the SDK's MCP span says tool_error."""
    down = PolicyBackend(ScriptPolicy([ScriptedReply("no engine here", http_status=502)]))
    async with Client(build(tmp_path, ["--demo"], down)) as client:
        result = await client.call_tool(TOOL, {"question": QUESTION})
    assert result.is_error
    assert question_status(otel) == ("ERROR", "error (BackendUnreachable)", "BackendUnreachable")
    completion = otel.named("text_completion " + MODEL)[0]
    episode = otel.named("invoke_agent sqale-agent")[0]
    assert [(s.status.status_code.name, s.attributes[n.ERROR_TYPE]) for s in (completion, episode)] == [
        ("ERROR", "BackendUnreachable"),
        ("ERROR", "BackendUnreachable"),
    ]
    assert the_call(otel).attributes[n.ERROR_TYPE] == "tool_error"


async def test_a_timed_out_question_ends_in_error_saying_which(tmp_path: Path, otel: Telemetry) -> None:
    """Past --episode-timeout: the episode and the question end in error (episode_timeout)."""
    slow = PolicyBackend(ScriptPolicy([ScriptedReply(tool_call("list_tables"), delay=30)]))
    async with Client(build(tmp_path, ["--demo", "--episode-timeout", "0.5"], slow)) as client:
        result = await client.call_tool(TOOL, {"question": QUESTION})
    assert result.is_error
    assert question_status(otel) == ("ERROR", "error (episode_timeout)", "episode_timeout")
    episode = otel.named("invoke_agent sqale-agent")[0]
    assert (episode.status.description, episode.attributes[n.STOP_REASON]) == (
        "error (episode_timeout)",
        "episode_timeout",
    )


async def test_a_refused_question_ends_in_error_saying_which(tmp_path: Path, otel: Telemetry) -> None:
    """A second question past --token-per-minute 1 is refused: its question span says `refused (quota)`
    and no episode starts."""
    server = build(tmp_path, ["--demo", "--token-per-minute", "1"], PolicyBackend(OraclePolicy(BOOK_GOLD)))
    async with Client(server) as client:
        await client.call_tool(TOOL, {"question": QUESTION})
        refused = await client.call_tool(TOOL, {"question": QUESTION})
    assert refused.is_error
    assert question_status(otel) == ("ERROR", "refused (quota)", "quota")
    assert len(otel.named("invoke_agent sqale-agent")) == 1


async def test_a_cancelled_question_ends_in_error_saying_which(tmp_path: Path, otel: Telemetry) -> None:
    """The client gives up on the call: the question, its episode and its model call end `cancelled`."""
    stuck = PolicyBackend(ScriptPolicy([ScriptedReply(tool_call("list_tables"), delay=60)]))
    async with Client(build(tmp_path, ["--demo"], stuck)) as client:
        with anyio.move_on_after(1.0):
            await client.call_tool(TOOL, {"question": QUESTION})
        with anyio.fail_after(10):
            while not otel.named("invoke_workflow answer_sql_question"):
                await anyio.sleep(0.05)
    assert question_status(otel) == ("ERROR", "cancelled (call_cancelled)", "call_cancelled")
    assert [
        s.attributes[n.ERROR_TYPE]
        for s in (otel.named("invoke_agent sqale-agent")[0], otel.named("text_completion " + MODEL)[0])
    ] == ["cancelled", "cancelled"]


async def test_a_sample_the_majority_stopped_is_no_error(tmp_path: Path, otel: Telemetry) -> None:
    """Three samples, two agreeing at once: the third, stopped, says so without an error status."""
    slow_third = PolicyBackend(OraclePolicy(BOOK_GOLD))
    server = build(tmp_path, ["--demo", "--samples", "3", "--runtime-slots", "3"], slow_third)
    async with Client(server) as client:
        result = await client.call_tool(TOOL, {"question": QUESTION, "samples": 3})
    assert not result.is_error
    outcomes = sorted(
        (e.attributes.get(n.STATUS), e.status.status_code.name) for e in otel.named("invoke_agent sqale-agent")
    )
    assert ("submitted", "UNSET") in outcomes and all(code == "UNSET" for _, code in outcomes)
    assert {status for status, _ in outcomes} <= {"submitted", "stopped"}


async def test_the_conventions_metrics_are_recorded(tmp_path: Path, otel: Telemetry) -> None:
    """gen_ai.client.token.usage (input and output), gen_ai.client.operation.duration and
    mcp.server.operation.duration, with the conventions' attributes."""
    backend = PolicyBackend(OraclePolicy(BOOK_GOLD), model="metrics-test-model")
    async with Client(build(tmp_path, ["--demo", "--model", "metrics-test-model"], backend)) as client:
        await client.call_tool(TOOL, {"question": QUESTION})
    usage = [a for a, _ in otel.points(n.TOKEN_USAGE) if a.get(n.REQUEST_MODEL) == "metrics-test-model"]
    assert sorted(a[n.TOKEN_TYPE] for a in usage) == ["input", "output"]
    assert all((a[n.OPERATION_NAME], a[n.PROVIDER_NAME]) == ("text_completion", "ollama") for a in usage)
    durations = [
        p for a, p in otel.points(n.OPERATION_DURATION) if a.get(n.REQUEST_MODEL) == "metrics-test-model"
    ]
    assert sum(p.count for p in durations) == 3  # three rounds
    tool_calls = [(a, p) for a, p in otel.points(n.MCP_SERVER_DURATION) if a[n.MCP_METHOD] == "tools/call"]
    assert {(a[n.TOOL_NAME], a[n.OPERATION_NAME], a[n.NETWORK_TRANSPORT]) for a, _ in tool_calls} == {
        (TOOL, "execute_tool", "pipe")
    }
    assert tool_calls[0][1].explicit_bounds[:3] == (0.01, 0.02, 0.05)


def test_eval_makes_each_question_a_trace_of_its_own(tmp_path: Path, otel: Telemetry) -> None:
    """`eval`: one trace per question, rooted at its question span (front end eval, the dataset's
    key), holding the gold SQL's statement, the sample's episode with its rounds, tools and
    statements, and the scoring's run of the answer; the model calls are spans too (traced)."""
    from agent.backends.traced import Engines, traced
    from agent.evaluation.datasets import select_examples
    from tests.evaluation.test_eval_runner import shop_dataset
    from tests.support.eval_runs import MODEL as EVAL_MODEL
    from tests.support.eval_runs import backends_of, oracle_for, run_eval

    dataset = shop_dataset(tmp_path)
    plain = backends_of(oracle_for(dataset))
    run_eval(
        dataset,
        select_examples(dataset, limit=2),
        lambda sampling: traced(plain(sampling), Engines("ollama")),
        tmp_path / "r.jsonl",
    )
    roots = [s for s in otel.spans() if s.parent is None and s.name != "read_schema"]
    assert [
        (r.name, r.attributes[n.FRONT_END], r.attributes[n.EVAL_QUESTION], r.attributes[n.STATUS])
        for r in sorted(roots, key=lambda r: r.attributes[n.EVAL_QUESTION])
    ] == [("invoke_workflow answer_sql_question", "eval", key, "submitted") for key in ("0", "1")]
    assert len({r.context.trace_id for r in roots}) == 2
    tree = otel.tree(sorted(roots, key=lambda r: r.attributes[n.EVAL_QUESTION])[0])
    assert [line for line in tree[:4] if "read_schema" not in line] == [
        "invoke_workflow answer_sql_question",
        "  SELECT",
        "  invoke_agent sqale-agent",
    ]  # the gold SQL first
    assert tree.count("    sqale.round") == 3 and f"      text_completion {EVAL_MODEL}" in tree


async def test_a_verified_answer_names_its_tier_and_calls_no_model(tmp_path: Path, otel: Telemetry) -> None:
    """The same question and a template's question: status verified, sqale.verified.tier same_question
    and template, no episode or model call, only the library's statements under the question."""
    entries = [
        {"database": "bookshop", "question": QUESTION, "sql": "SELECT count(*) FROM books"},
        {
            "database": "bookshop",
            "question": "How many {genre} books are there?",
            "sql": "SELECT count(*) FROM books WHERE genre = :genre",
            "params": {"genre": {"type": "value", "column": "books.genre"}},
        },
    ]
    path = tmp_path / "bookshop-verified.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    backend = PolicyBackend(OraclePolicy(BOOK_GOLD))
    async with Client(build(tmp_path, ["--demo", "--verified", f"bookshop={path}"], backend)) as client:
        for question in (QUESTION, "How many fantasy books are there?"):
            result = await client.call_tool(TOOL, {"question": question})
            assert not result.is_error, result.content
    questions = otel.named("invoke_workflow answer_sql_question")
    assert [attributes(q, [n.STATUS, n.VERIFIED_TIER]) for q in questions] == [
        {n.STATUS: "verified", n.VERIFIED_TIER: "same_question"},
        {n.STATUS: "verified", n.VERIFIED_TIER: "template"},
    ]
    assert [otel.tree(q)[1:] for q in questions] == [
        ["  SELECT", "  read_schema"],  # the entry's SQL, then the schema for the tables it read
        ["  SELECT", "  SELECT"],
    ]  # the genre read against the column's values, then the template's SQL
    assert backend.requests == []


@pytest.mark.parametrize(
    ("mode", "ended"),
    [
        pytest.param("legacy", [("submitted", "submit_sql")], id="2025-11-25"),
        pytest.param(
            "auto", [("awaiting_choice", "person_asked"), ("submitted", "submit_sql")], id="2026-07-28"
        ),
    ],
)
async def test_a_question_that_asks_its_person_ends_without_error(
    tmp_path: Path, otel: Telemetry, mode: str, ended: list[tuple[str, str]]
) -> None:
    """The samples disagree and the person chooses: in the 2025-11-25 era one question span; in the
    2026-07-28 era the call asking (awaiting_choice, no error) and the retry bringing the reply, each
    its own question with the database, samples and token."""
    replies = FormReplies({BOOKS: accept("2")})
    app = build(tmp_path, ["--demo", *SEED_FLAGS], PolicyBackend(disagreeing_policy()))
    async with Client(app, mode=mode, elicitation_callback=replies) as client:  # type: ignore[arg-type]
        result = await client.call_tool(TOOL, {"question": BOOKS})
    assert not result.is_error and len(replies.seen) == 1
    questions = otel.named("invoke_workflow answer_sql_question")
    assert [
        (
            q.attributes[n.STATUS],
            q.attributes[n.STOP_REASON],
            q.status.status_code.name,
            attributes(q, [n.DATABASE, n.SAMPLES, n.TOKEN]),
        )
        for q in questions
    ] == [
        (status, reason, "UNSET", {n.DATABASE: "bookshop", n.SAMPLES: 3, n.TOKEN: "local"})
        for status, reason in ended
    ]

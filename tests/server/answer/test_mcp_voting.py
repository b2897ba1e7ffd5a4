"""answer_sql_question with `samples`: a vote by result over a fake Ollama on real HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from agent.backends.registry import make_backend
from mcp_server.answer.output import AnswerOutput, Candidate
from mcp_server.app import SqaleServer, build_server
from mcp_server.config.command_line import parse_settings
from tests.support.mcp import BOOK_GOLD, TOOL
from tests.support.mcp_in_process import metric
from tests.support.policies import (
    OraclePolicy,
    ScriptedReply,
    ScriptPolicy,
    SeedSwitchPolicy,
    assistant_reply,
    count_tokens,
    tool_call,
)

pytestmark = pytest.mark.anyio

QUESTION = "How many books are there?"
COUNT = BOOK_GOLD[QUESTION]
ORACLE = OraclePolicy(BOOK_GOLD)


def submits(sql: str, delay: float = 0.0) -> ScriptPolicy:
    """Lists the tables, then submits `sql`; every reply takes `delay` seconds."""
    return ScriptPolicy(
        [
            ScriptedReply(assistant_reply("look", tool_call("list_tables")), delay=delay),
            ScriptedReply(assistant_reply("answer", tool_call("submit_sql", sql=sql)), delay=delay),
        ]
    )


NOTHING = ScriptPolicy(["I am not sure."])
STUCK = ScriptPolicy([ScriptedReply(tool_call("list_tables"), delay=60)])


def build(tmp_path: Path, url: str, *extra: str) -> SqaleServer:
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    settings = parse_settings(
        [
            "--demo",
            "--ollama-host",
            url,
            "--seed",
            "100",
            "--max-concurrent",
            "8",
            "--runtime-slots",
            "8",
            *extra,
        ],
        environ,
    )
    return build_server(settings, environ=environ, backend_factory=make_backend)


async def call(
    server: SqaleServer,
    samples: int | None,
    progress: list[tuple[float, float | None, str | None]] | None = None,
) -> CallToolResult:
    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if progress is not None:
            progress.append((value, total, message))

    arguments: dict[str, Any] = {"question": QUESTION}
    if samples is not None:
        arguments["samples"] = samples
    async with Client(server) as client:
        with anyio.fail_after(60):
            return await client.call_tool(TOOL, arguments, progress_callback=on_progress)


def seeds_sent(fake: Any) -> list[int]:
    return sorted({body["options"]["seed"] for body in fake.bodies("/api/generate")})


async def test_disagreeing_samples_vote_by_result_not_by_sql(tmp_path: Path, fake_ollama: Any) -> None:
    """count(*) and SELECT 16 agree (same rows); SELECT 3 is alone; one sample abstains."""
    fake = fake_ollama(
        SeedSwitchPolicy({100: ORACLE, 101: submits("SELECT 16"), 102: submits("SELECT 3"), 103: NOTHING})
    )
    progress: list[tuple[float, float | None, str | None]] = []
    log = tmp_path / "episodes.jsonl"
    result = await call(build(tmp_path, fake.url, "--episode-log", str(log)), 4, progress)
    answer = AnswerOutput.model_validate(result.structured_content)
    assert (answer.sql, answer.rows, answer.agreement, answer.samples, answer.samples_finished) == (
        COUNT,
        [[16]],
        0.5,
        4,
        4,
    )
    assert answer.candidates == [
        Candidate(sql=COUNT, votes=2, row_count=1, status="submitted"),
        Candidate(sql="SELECT 3", votes=1, row_count=1, status="submitted"),
    ]
    assert seeds_sent(fake) == [100, 101, 102, 103]
    line = json.loads(log.read_text())
    assert {
        k: line[k]
        for k in (
            "sql",
            "samples",
            "samples_finished",
            "agreement",
            "chosen_sample",
            "seeds_finished",
            "candidates",
        )
    } == {
        "sql": COUNT,
        "samples": 4,
        "samples_finished": 4,
        "agreement": 0.5,
        "chosen_sample": 0,
        "seeds_finished": [100, 101, 102, 103],
        "candidates": [c.model_dump(mode="json") for c in answer.candidates],
    }
    text = result.content[0].text
    assert (
        "2 of 4 samples agree on this result.\n1 sample produced nothing runnable.\nOther answers:\n"
        "- 1 sample, 1 row:\n```sql\nSELECT 3\n```"
    ) in text.split("\n\n")
    finished = sorted(m for _, _, m in progress if m and "finished" in m)
    assert [m.split(";")[0] for m in finished] == [
        "sample 1/4 finished: submitted, 1 row",
        "sample 2/4 finished: submitted, 1 row",
        "sample 3/4 finished: submitted, 1 row",
        "sample 4/4 finished: nothing runnable",
    ]
    assert {m.split(" ")[1] for _, _, m in progress if m and " round " in f" {m}"} == {
        "1/4",
        "2/4",
        "3/4",
        "4/4",
    }
    values = [v for v, _, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert {t for _, t, _ in progress} == {4 * 8}


async def test_three_of_five_agree_and_the_other_two_are_cancelled(tmp_path: Path, fake_ollama: Any) -> None:
    """After the third matching sample the vote is decided: the two slow samples' requests are closed."""
    fake = fake_ollama(SeedSwitchPolicy({100: ORACLE, 101: ORACLE, 102: ORACLE, 103: STUCK, 104: STUCK}))
    result = await call(build(tmp_path, fake.url), 5)
    answer = AnswerOutput.model_validate(result.structured_content)
    assert (answer.sql, answer.agreement, answer.samples, answer.samples_finished, answer.candidates) == (
        COUNT,
        0.6,
        5,
        3,
        [Candidate(sql=COUNT, votes=3, row_count=1, status="submitted")],
    )
    assert await fake.await_disconnects(2, timeout=10)
    assert sorted(r.body["options"]["seed"] for r in fake.disconnects) == [103, 104]
    assert (
        "3 of 5 samples agree on this result. The other 2 were stopped once a majority agreed."
        in result.content[0].text.split("\n\n")
    )


async def test_no_two_samples_agree_is_called_a_guess(tmp_path: Path, fake_ollama: Any) -> None:
    """Three different results: the earliest sample's answer, agreement 1/3, and the others' SQL."""
    fake = fake_ollama(
        SeedSwitchPolicy(
            {100: submits("SELECT 1", delay=0.3), 101: submits("SELECT 2"), 102: submits("SELECT 3")}
        )
    )
    result = await call(build(tmp_path, fake.url), 3)
    answer = AnswerOutput.model_validate(result.structured_content)
    assert (answer.sql, answer.agreement, [c.sql for c in answer.candidates]) == (
        "SELECT 1",
        0.333,
        ["SELECT 1", "SELECT 2", "SELECT 3"],
    )
    assert (
        "No two samples agree: treat this answer as a guess.\nOther answers:\n"
        "- 1 sample, 1 row:\n```sql\nSELECT 2\n```\n- 1 sample, 1 row:\n```sql\nSELECT 3\n```"
    ) in result.content[0].text.split("\n\n")


async def test_one_sample_is_unchanged(tmp_path: Path, fake_ollama: Any) -> None:
    """Without `samples` (or with 1): today's answer, text and progress, plus agreement 1.0 and samples 1."""
    fake = fake_ollama(ORACLE)
    progress: list[tuple[float, float | None, str | None]] = []
    default = await call(build(tmp_path, fake.url), None, progress)
    explicit = await call(build(tmp_path, fake.url), 1)
    volatile = {"seconds", "tokens", "queued_seconds"}
    for result in (default, explicit):
        answer = result.structured_content
        assert {
            k: answer[k] for k in ("sql", "rows", "agreement", "samples", "samples_finished", "candidates")
        } == {
            "sql": COUNT,
            "rows": [[16]],
            "agreement": 1.0,
            "samples": 1,
            "samples_finished": 1,
            "candidates": [],
        }
        assert "samples agree" not in result.content[0].text
    assert {k: v for k, v in default.structured_content.items() if k not in volatile} == {
        k: v for k, v in explicit.structured_content.items() if k not in volatile
    }
    assert [(v, t) for v, t, _ in progress] == [(1, 7), (2, 7), (3, 7)]
    assert seeds_sent(fake) == [100]


async def test_samples_out_of_range_is_a_tool_error(tmp_path: Path, fake_ollama: Any) -> None:
    """samples above --max-samples (or below 1) is refused with the range."""
    fake = fake_ollama(ORACLE)
    result = await call(build(tmp_path, fake.url, "--max-samples", "3"), 4)
    assert result.is_error
    assert result.content[0].text.endswith(
        "`samples` is 4; give a number from 1 to 3 (the server's --max-samples), or leave it out for "
        "the server's default."
    )


@pytest.mark.parametrize("samples", [1, 3])
async def test_every_seeded_sample_runs_through_the_metered_backend(
    samples: int, tmp_path: Path, fake_ollama: Any
) -> None:
    """--seed 100 with K samples over MCP: each sample samples with its own seed through the server's
    metered backend, so every request of every sample is timed and its prompt tokens counted."""
    fake = fake_ollama(
        SeedSwitchPolicy({100: submits("SELECT 1"), 101: submits("SELECT 2"), 102: submits("SELECT 3")})
    )  # no majority: all finish
    server = build(tmp_path, fake.url)
    result = await call(server, samples)
    assert not result.is_error, result.content
    generated = fake.bodies("/api/generate")
    assert (seeds_sent(fake), len(generated)) == ([100, 101, 102][:samples], 2 * samples)
    labels = {"backend": "ollama", "replica": fake.url}
    assert metric(server, "sqale_model_request_seconds_count", **labels) == len(generated)
    counted = sum(
        metric(server, "sqale_model_prompt_tokens_total", **labels, cache=kind)
        for kind in ("evaluated", "reused", "unknown")
    )
    assert counted == sum(count_tokens(body["prompt"]) for body in generated)


async def test_a_seeded_samples_failure_is_counted_over_mcp(tmp_path: Path, fake_ollama: Any) -> None:
    """A seeded sample whose request fails: the tool reports the runtime's error and the metrics
    count the failure under the backend and its replica."""
    broken = ScriptPolicy([ScriptedReply("the engine fell over", http_status=500)])
    fake = fake_ollama(SeedSwitchPolicy({100: submits("SELECT 1"), 101: broken}))
    server = build(tmp_path, fake.url)
    result = await call(server, 2)
    assert result.is_error and "the engine fell over" in result.content[0].text
    assert (
        metric(
            server,
            "sqale_model_request_failures_total",
            backend="ollama",
            replica=fake.url,
            error="BackendResponseError",
        )
        == 1
    )

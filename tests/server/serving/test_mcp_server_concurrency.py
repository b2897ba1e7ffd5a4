"""answer_sql_question in-process: time limits, cancellation, concurrent calls and runtime slots."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from agent.backends.base import Completion, ModelBackend
from mcp_server.app import SqaleServer
from tests.support.mcp import BOOK_GOLD, TOOL, DelayedPolicy, KeyedPolicy, PeakBackend
from tests.support.mcp_in_process import build, error_text
from tests.support.policies import (
    OraclePolicy,
    PolicyBackend,
    ScriptedReply,
    ScriptPolicy,
    first_user_turn,
    tool_call,
)

pytestmark = pytest.mark.anyio


SLOW_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


def stuck_requests(fake: Any) -> list[Any]:
    return [b for b in fake.bodies("/api/generate") if "stuck" in b["prompt"]]


async def test_episode_timeout_stops_the_episode_and_the_next_call_works(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """Past --episode-timeout: a ToolError, the model request is closed, the server stays usable.

    A first question starts the SQLite worker: on a loaded machine its start alone outlasted the
    limit, which then ended the slow episode before its model request was sent.
    """
    slow = ScriptPolicy([ScriptedReply(tool_call("list_tables"), delay=30)])
    fake = fake_ollama(KeyedPolicy({"slowly": slow, "": OraclePolicy(BOOK_GOLD)}))
    server = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--episode-timeout", "3"])
    async with Client(server) as client:
        assert not (await client.call_tool(TOOL, {"question": "How many books are there?"})).is_error
        with anyio.fail_after(20):
            text = error_text(await client.call_tool(TOOL, {"question": "Count books slowly"}))
        assert text == (
            "Answering took longer than the 3 s limit and was stopped. Retry, ask a narrower "
            "question, or ask the server's operator to raise --episode-timeout (a slow machine or "
            "a model still loading can cause this)."
        )
        assert await fake.await_disconnects(1, timeout=5)
        assert "Count books slowly" in fake.disconnects[0].body["prompt"]
        good = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert good.structured_content is not None, good.content[0].text
    assert good.structured_content["rows"] == [[16]]


async def test_cancelling_mid_episode_closes_the_model_request(tmp_path: Path, fake_ollama: Any) -> None:
    """A cancelled call stops its model request; the next call on the same client is answered."""
    stuck = ScriptPolicy([tool_call("list_tables"), ScriptedReply(tool_call("list_tables"), delay=60)])
    fake = fake_ollama(KeyedPolicy({"stuck": stuck, "": OraclePolicy(BOOK_GOLD)}))
    async with Client(build(tmp_path, ["--demo", "--ollama-host", fake.url])) as client:
        first_round = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            first_round.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: client.call_tool(TOOL, {"question": "stuck question"}, progress_callback=on_progress)
            )
            with anyio.fail_after(10):
                await first_round.wait()
                while len(stuck_requests(fake)) < 2:  # the second model request is under way
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        assert await fake.await_disconnects(1, timeout=5)
        assert "stuck question" in fake.disconnects[0].body["prompt"]
        with anyio.fail_after(20):
            good = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert good.structured_content["rows"] == [[16]]


async def test_cancelling_interrupts_the_running_query(tmp_path: Path) -> None:
    """With one worker, a cancelled endless query must be stopped or the next call could not run."""
    endless = ScriptPolicy([tool_call("run_query", sql=SLOW_SQL)])
    backend = PolicyBackend(KeyedPolicy({"endless": endless, "": OraclePolicy(BOOK_GOLD)}))
    server = build(tmp_path, ["--demo", "--max-concurrent", "1", "--query-timeout", "120"], backend)
    async with Client(server) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.call_tool(TOOL, {"question": "endless question"}))
            await anyio.sleep(1.0)  # the query runs (the model replies at once)
            tg.cancel_scope.cancel()
        assert [r.prompt.count("<|im_start|>assistant") for r in backend.requests if "endless" in r.prompt] == [
            1
        ]  # the episode was inside its first query
        with anyio.fail_after(30):
            good = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert good.structured_content["rows"] == [[16]]


async def ask_at_once(server: SqaleServer, questions: list[str]) -> tuple[dict[str, Any], list[str | None]]:
    """Every question at the same time; their answers and each call's first progress message."""
    answers: dict[str, Any] = {}
    first_progress: dict[str, str | None] = {}
    async with Client(server) as client:

        async def one(question: str) -> None:
            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                first_progress.setdefault(question, message)

            result = await client.call_tool(TOOL, {"question": question}, progress_callback=on_progress)
            answers[question] = result.structured_content

        async with anyio.create_task_group() as tg:
            for question in questions:
                tg.start_soon(one, question)
    return answers, list(first_progress.values())


@pytest.mark.slow
async def test_calls_run_concurrently_up_to_the_limit(tmp_path: Path) -> None:
    """Four calls with --max-concurrent 4 overlap; with 2, two run, two queue and are told so."""
    for limit, expected_peak, expected_queued in ((4, 4, 0), (2, 2, 2)):
        backend = PeakBackend(PolicyBackend(DelayedPolicy(OraclePolicy(BOOK_GOLD), 0.2)))
        server = build(tmp_path, ["--demo", "--max-concurrent", str(limit), "--runtime-slots", "4"], backend)
        answers, first_messages = await ask_at_once(server, list(BOOK_GOLD))
        assert backend.peak == expected_peak
        assert {q: a["sql"] for q, a in answers.items()} == BOOK_GOLD
        assert [m for m in first_messages if m and m.startswith("queued")] == [
            f"queued: {limit} questions are being answered already (--max-concurrent)"
        ] * expected_queued


class OrderBackend(PeakBackend):
    """PeakBackend that also records which question each model request belongs to, in order."""

    def __init__(self, inner: ModelBackend) -> None:
        super().__init__(inner)
        self.questions: list[str] = []

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        self.questions.append(first_user_turn(prompt))
        return await super().complete(prompt, max_tokens=max_tokens)


@pytest.mark.slow
async def test_one_runtime_slot_serves_each_episode_whole_in_arrival_order(tmp_path: Path) -> None:
    """With one slot (Ollama's default) rounds never interleave; the others wait and are told so."""
    backend = OrderBackend(PolicyBackend(DelayedPolicy(OraclePolicy(BOOK_GOLD), 0.05)))
    server = build(tmp_path, ["--demo"], backend)
    answers, first_messages = await ask_at_once(server, list(BOOK_GOLD))
    assert backend.peak == 1
    assert {q: a["sql"] for q, a in answers.items()} == BOOK_GOLD
    runs = [question for question, _ in itertools.groupby(backend.questions)]
    assert len(runs) == len(set(runs)) == 4  # each episode's requests are contiguous
    assert sorted(m for m in first_messages if m and m.startswith("waiting")) == [
        "waiting for the model: 1 question ahead",
        "waiting for the model: 2 questions ahead",
        "waiting for the model: 3 questions ahead",
    ]
    queued = sorted(a["queued_seconds"] for a in answers.values())
    assert queued[0] < 0.1 < queued[1] < queued[2] < queued[3]


@pytest.mark.slow
async def test_episode_timeout_does_not_count_the_wait_for_a_slot(tmp_path: Path) -> None:
    """Four questions on one slot take longer together than --episode-timeout; none times out.

    An episode takes at least 2.25 s (three rounds of 0.75 s), so the last question waits at least
    6.75 s, past the 6 s limit, while an episode alone leaves 3.75 s for a loaded machine (with
    0.25 s rounds and a 2 s limit one took longer than the limit by itself).
    """
    backend = PolicyBackend(DelayedPolicy(OraclePolicy(BOOK_GOLD), 0.75))
    server = build(tmp_path, ["--demo", "--runtime-slots", "1", "--episode-timeout", "6"], backend)
    answers, _ = await ask_at_once(server, list(BOOK_GOLD))
    assert {q: a["sql"] if a else None for q, a in answers.items()} == BOOK_GOLD
    assert max(a["queued_seconds"] for a in answers.values()) > 6.0

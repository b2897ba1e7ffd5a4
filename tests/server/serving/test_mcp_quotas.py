"""Per-token quotas count episodes (samples), refusals log little, cancelled calls are recorded
(issue 22, §3); in-process, where the caller is the local one with the server-wide defaults."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_server.config.command_line import parse_settings
from mcp_server.serving.access import Caller
from mcp_server.serving.quotas import (
    LogBudget,
    MinuteWindow,
    QuotaExceeded,
    TokenQuotas,
    place_sharing_note,
    token_places,
)
from mcp_server.serving.sessions import SessionBook
from tests.support.mcp import BOOK_GOLD, TOOL, DelayedPolicy, KeyedPolicy, PeakBackend
from tests.support.mcp_in_process import build, error_text, metric
from tests.support.policies import OraclePolicy, PolicyBackend, ScriptedReply, ScriptPolicy, tool_call

pytestmark = pytest.mark.anyio

QUESTION = "How many books are there?"


async def test_a_token_at_one_at_a_time_runs_its_samples_one_after_another(tmp_path: Path) -> None:
    """samples=8 from a token allowed 1 episode at once: never more than 1 model request at once,
    and the answer still carries its vote; 8 workers and 8 runtime slots would allow 8."""
    backend = PeakBackend(PolicyBackend(DelayedPolicy(OraclePolicy(BOOK_GOLD), 0.05)))
    server = build(
        tmp_path,
        [
            "--demo",
            "--max-concurrent",
            "8",
            "--runtime-slots",
            "8",
            "--token-max-concurrent",
            "1",
            "--max-samples",
            "8",
        ],
        backend,
    )
    async with Client(server) as client:
        result = await client.call_tool(TOOL, {"question": QUESTION, "samples": 8})
    assert result.structured_content["samples"] == 8
    assert result.structured_content["agreement"] >= 0.5
    assert backend.peak == 1


async def test_two_questions_of_one_token_share_its_episode_quota(tmp_path: Path) -> None:
    """Two questions with 3 samples each from a token allowed 2 at once: at most 2 episodes run."""
    backend = PeakBackend(PolicyBackend(DelayedPolicy(OraclePolicy(BOOK_GOLD), 0.05)))
    server = build(
        tmp_path,
        ["--demo", "--max-concurrent", "8", "--runtime-slots", "8", "--token-max-concurrent", "2"],
        backend,
    )
    async with Client(server) as client, anyio.create_task_group() as group:
        for question in list(BOOK_GOLD)[:2]:
            group.start_soon(lambda q=question: client.call_tool(TOOL, {"question": q, "samples": 3}))
    assert backend.peak == 2


async def test_the_minute_quota_counts_samples(tmp_path: Path) -> None:
    """A token allowed 5 episodes a minute: 3 samples pass, 3 more are refused (they need 3 of
    the 2 left), 8 can never fit and say so; one sample still fits."""
    backend = PolicyBackend(OraclePolicy(BOOK_GOLD))
    server = build(tmp_path, ["--demo", "--token-per-minute", "5", "--max-samples", "8"], backend)
    async with Client(server) as client:
        first = await client.call_tool(TOOL, {"question": QUESTION, "samples": 3})
        second = error_text(await client.call_tool(TOOL, {"question": QUESTION, "samples": 3}))
        eight = error_text(await client.call_tool(TOOL, {"question": QUESTION, "samples": 8}))
        single = await client.call_tool(TOOL, {"question": QUESTION, "samples": 1})
    assert not first.is_error and not single.is_error
    assert second.startswith(
        "Too many questions: token 'local' may run 5 episodes per minute (each "
        "sample is one) and this question needs 3. Retry in "
    )
    assert second.endswith(" s, or ask for fewer samples.")
    assert eight == (
        "Too many samples: token 'local' may run 5 episodes per minute (each sample is "
        "one) and this question asks for 8. Ask for at most 5 samples."
    )


def test_minute_window_admits_all_of_a_question_or_none() -> None:
    """Events of one question enter the window together; the wait is until enough have left."""
    now = [0.0]
    window = MinuteWindow(5, clock=lambda: now[0])
    assert window.retry_after(2) is None
    now[0] = 10.0
    assert window.retry_after(2) is None
    assert window.retry_after(3) == 50.0  # the two of t=0 must leave first
    now[0] = 60.0
    assert window.retry_after(3) is None
    assert window.retry_after(9) == float("inf")
    assert str(QuotaExceeded("a", 5, float("inf"), 9)).startswith("Too many samples: ")


def test_log_budget_lets_a_few_lines_through_and_counts_the_rest() -> None:
    """Past its lines per minute a budget holds lines back, and says how many at the next one."""
    now = [0.0]
    budget = LogBudget(2, clock=lambda: now[0])
    assert [budget.allow() for _ in range(5)] == [0, 0, None, None, None]
    now[0] = 61.0
    assert budget.allow() == 3


@pytest.fixture
def still_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every MinuteWindow's clock stands still: many calls fit in one minute however long they take
    (300 calls took more than a minute on a loaded machine, and the window let one through)."""
    started = time.monotonic()
    init = MinuteWindow.__init__

    def still(self: MinuteWindow, limit: int, clock: object = None) -> None:
        init(self, limit, lambda: started)

    monkeypatch.setattr(MinuteWindow, "__init__", still)


@pytest.mark.usefixtures("still_minute")
async def test_refused_calls_write_short_lines_and_few_of_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """60 refused calls with long questions and evidence: every one is counted, but the episode
    log and the server log get at most 10 short lines, without the evidence. (300 calls took
    longer than a test's 120 s on a loaded machine; 60 are six times the lines let through.)"""
    log = tmp_path / "episodes.jsonl"
    server = build(
        tmp_path,
        ["--demo", "--token-per-minute", "1", "--episode-log", str(log)],
        PolicyBackend(OraclePolicy(BOOK_GOLD)),
    )
    long_question = "How many books are there? " + "padding " * 240
    caplog.set_level(logging.INFO, logger="mcp_server")
    async with Client(server) as client:
        assert not (await client.call_tool(TOOL, {"question": QUESTION})).is_error
        for _ in range(60):
            result = await client.call_tool(TOOL, {"question": long_question, "evidence": "secret " * 500})
            assert error_text(result).startswith("Too many questions: token 'local' may ask 1 per minute.")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    refused = [line for line in lines if line["status"] == "refused"]
    assert len(lines) == 11 and len(refused) == 10
    assert all(
        len(json.dumps(line)) < 600 and "evidence" not in line and len(line["question"]) <= 80
        for line in refused
    )
    assert log.stat().st_size < 12_000
    logged = [r for r in caplog.records if r.getMessage().startswith("refused on 'bookshop'")]
    assert len(logged) == 10 and all(len(r.getMessage()) < 300 for r in logged)
    assert metric(server, "sqale_questions_total", status="refused", stop_reason="quota") == 60


async def test_a_cancelled_call_leaves_its_line_its_log_and_its_metric(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A call the client cancels mid-episode is written down with the rounds it had played."""
    log = tmp_path / "episodes.jsonl"
    stuck = ScriptPolicy([tool_call("list_tables"), ScriptedReply(tool_call("list_tables"), delay=60)])
    backend = PolicyBackend(KeyedPolicy({"stuck": stuck, "": OraclePolicy(BOOK_GOLD)}))
    server = build(tmp_path, ["--demo", "--episode-log", str(log)], backend)
    caplog.set_level(logging.INFO, logger="mcp_server")
    async with Client(server) as client:
        first_round = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if message and message.startswith("round 1/"):
                first_round.set()

        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: client.call_tool(
                    TOOL, {"question": "stuck question", "evidence": "hint"}, progress_callback=on_progress
                )
            )
            with anyio.fail_after(10):
                await first_round.wait()
            await anyio.sleep(0.2)
            group.cancel_scope.cancel()
        with anyio.fail_after(10):
            while not log.exists() or not log.read_text():
                await anyio.sleep(0.02)
    (line,) = [json.loads(text) for text in log.read_text().splitlines()]
    assert {
        k: line[k]
        for k in ("token", "question", "evidence", "database", "status", "stop_reason", "rounds", "tool_calls")
    } == {
        "token": "local",
        "question": "stuck question",
        "evidence": "hint",
        "database": "bookshop",
        "status": "cancelled",
        "stop_reason": "call_cancelled",
        "rounds": 1,
        "tool_calls": 1,
    }
    assert [entry["tool"] for entry in line["trace"]] == ["list_tables"] and line["seconds"] > 0
    assert metric(server, "sqale_questions_total", status="cancelled", stop_reason="call_cancelled") == 1
    assert any(
        r.getMessage().startswith(
            "not answered on 'bookshop' for token 'local' (cancelled, "
            "call_cancelled) after 1 rounds, 1 tool calls"
        )
        for r in caplog.records
    )


def test_session_book_counts_each_tokens_sessions_and_expires_idle_ones() -> None:
    """Sessions being opened count; a session with a request in flight never expires; an idle one
    does after the timeout, and the wait for it is what a refusal's Retry-After says."""
    now = [0.0]
    book = SessionBook(idle_timeout=10, clock=lambda: now[0])
    book.opening("a", +1)
    assert book.held("a") == 1 and book.held("b") == 0
    book.opening("a", -1)
    book.opened("s1", "a")
    book.ended("s1")
    book.opened("s2", "a")  # its opening request still runs
    now[0] = 4.0
    assert (book.held("a"), book.owner("s1"), book.retry_after("a")) == (2, "a", 6.0)
    now[0] = 10.0
    assert (book.held("a"), book.owner("s1"), book.by_token()) == (1, None, {"a": 1})
    book.ended("s2")
    book.started("s2")
    now[0] = 100.0
    assert book.held("a") == 1  # a request (a GET stream) in flight keeps it
    book.closed("s2")
    assert book.held("a") == 0


def test_several_tokens_never_get_the_last_place(tmp_path: Path) -> None:
    """With several tokens each gets at most places - 1 at once (its own max-concurrent if lower),
    one place at least; a lone token (or the local caller) keeps what its settings say."""
    assert [
        token_places(places, tokens) for places, tokens in [(4, 2), (8, 5), (2, 2), (1, 3), (4, 1), (4, 0)]
    ] == [3, 7, 1, 1, None, None]
    config = tmp_path / "t.toml"
    config.write_text('[tokens.a]\nenv = "A"\n[tokens.b]\nenv = "B"\nmax-concurrent = 2\n')
    settings = parse_settings(
        ["--token-max-concurrent", "16", "--config", str(config)], {"A": "secret-a", "B": "secret-b"}
    )
    a, b = Caller("a"), Caller("b")
    shared = TokenQuotas(settings, [a, b], places=4)
    assert (shared.of(a).concurrent.slots, shared.of(b).concurrent.slots) == (3, 2)
    assert TokenQuotas(settings, [a, b], places=1).of(a).concurrent.slots == 1
    assert TokenQuotas(settings, [a], places=4).of(a).concurrent.slots == 16
    assert place_sharing_note(4, 1) is None
    assert place_sharing_note(4, 2) == (
        logging.INFO,
        (
            "2 tokens share 4 places (the smaller of --max-concurrent and the runtime slots): each runs at "
            "most 3 episodes at once (fewer where its max-concurrent says so), so one place is always left "
            "for the others"
        ),
    )
    one_place = place_sharing_note(1, 2)
    assert one_place is not None and one_place[0] == logging.WARNING

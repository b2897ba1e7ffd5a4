"""A server a team shares, over real HTTP on 127.0.0.1: scoped tokens, quotas, /metrics, SIGTERM."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.mcp import BOOK_GOLD, TOOL, DelayedPolicy, KeyedPolicy
from tests.support.policies import OraclePolicy
from tests.support.team import (
    ALL,
    BOOK_QUESTION,
    BOOKS,
    SALES_GOLD,
    TeamServer,
    ask,
    error_text,
    list_tool,
    sample_key,
)

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


async def test_scoped_token_sees_and_queries_only_its_databases(team_server: Any) -> None:
    """tools/list names only the token's databases; another alias errs exactly like an unknown one."""
    server = team_server()
    scoped, full = await list_tool(server.url, BOOKS), await list_tool(server.url, ALL)
    assert "bookshop" in scoped.description and "sales" not in scoped.description
    assert "sales" in full.description and "bookshop" in full.description
    assert "sales" not in json.dumps(scoped.input_schema)
    other = error_text(
        await ask(server.url, BOOKS, {"question": "How many sales are there?", "database": "sales"})
    )
    unknown = error_text(
        await ask(server.url, BOOKS, {"question": "How many sales are there?", "database": "payroll"})
    )
    assert (
        other.replace("'sales'", "'X'")
        == unknown.replace("'payroll'", "'X'")
        == ("Unknown database 'X'; pass one of the configured aliases as `database`: bookshop.")
    )
    answered = await ask(server.url, ALL, {"question": "How many sales are there?", "database": "sales"})
    assert answered.structured_content["rows"] == [[2]]
    own = await ask(server.url, BOOKS, {"question": BOOK_QUESTION})  # its only database: implied
    assert own.structured_content["rows"] == [[16]]
    lines = [json.loads(line) for line in server.episode_log.read_text().splitlines()]
    assert [(line["token"], line["database"], line["status"]) for line in lines] == [
        ("all", "sales", "submitted"),
        ("books", "bookshop", "submitted"),
    ]
    assert "books-secret" not in server.stderr.read_text() + server.episode_log.read_text()


async def test_per_minute_quota_is_per_token_and_says_when_to_retry(team_server: Any) -> None:
    """The third question of a token allowed two per minute is a tool error with a retry time."""
    server = team_server(books_quota="questions_per_minute = 2\n")
    for _ in range(2):
        assert not (await ask(server.url, BOOKS, {"question": BOOK_QUESTION})).is_error
    refused = error_text(await ask(server.url, BOOKS, {"question": BOOK_QUESTION}))
    assert refused.startswith("Too many questions: token 'books' may ask 2 per minute. Retry in ")
    seconds = int(
        refused.removeprefix("Too many questions: token 'books' may ask 2 per minute. Retry in ").removesuffix(
            " s."
        )
    )
    assert 50 <= seconds <= 60
    other = await ask(server.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop"})
    assert other.structured_content["rows"] == [[16]]  # the other token's minute is its own
    metrics = server.metrics()
    assert (
        metrics[
            sample_key(
                "sqale_questions_total",
                {"database": "bookshop", "token": "books", "status": "refused", "stop_reason": "quota"},
            )
        ]
        == 1
    )


async def test_concurrency_quota_queues_only_its_own_token(team_server: Any) -> None:
    """A token allowed one question at once queues its second; the other token's goes straight on.

    The runtime holds every generation until the test has seen that state (two questions with the
    model, one queued), so no bound depends on how fast the machine is: the queued one waited at
    least from then to the release, the others at most until they were seen with the model
    (queued_seconds is rounded to the millisecond).
    """
    server = team_server(books_quota="max_concurrent = 1\n")
    answers: dict[str, Any] = {}

    async def one(key: str, token: str) -> None:
        # Its own evidence each: the same arguments of the same token would be one question (ongoing.py).
        answers[key] = await ask(
            server.url,
            token,
            {"question": BOOK_QUESTION, "database": "bookshop", "evidence": f"asked as {key}"},
        )

    def with_the_model() -> int:
        return sum(BOOK_QUESTION in r.body["prompt"] for r in server.runtime.generating)

    server.runtime.hold()
    asked_at = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(one, "books-1", BOOKS)
        group.start_soon(one, "books-2", BOOKS)
        group.start_soon(one, "all", ALL)
        await wait_until(lambda: with_the_model() == 2)
        seen_at = time.monotonic()
        await wait_until(lambda: server.metrics()["sqale_queue_length{queue=token}"] == 1)
        queued_at = time.monotonic()
        await anyio.sleep(0.5)  # a wait the queued one's queued_seconds must include
        assert with_the_model() == 2  # the queued one has not reached the model meanwhile
        released_at = time.monotonic()
        server.runtime.release()
    queued = sorted(answers[k].structured_content["queued_seconds"] for k in ("books-1", "books-2"))
    assert queued[0] <= seen_at - asked_at + 0.001
    assert queued[1] + 0.001 >= released_at - queued_at >= 0.5
    assert answers["all"].structured_content["queued_seconds"] <= seen_at - asked_at + 0.001


SLOW_GOLD = {**SALES_GOLD, "What do the sales amount to?": "SELECT sum(amount) FROM sales"}


def slow_sales(seconds: float) -> KeyedPolicy:
    """The sales questions answered slowly (each model reply takes `seconds`), the rest at once."""
    return KeyedPolicy({"sales": DelayedPolicy(OraclePolicy(SLOW_GOLD), seconds), "": OraclePolicy(BOOK_GOLD)})


async def wait_in_flight(server: TeamServer, questions: int) -> None:
    """Until the server has admitted `questions` questions that are not yet answered."""
    with anyio.fail_after(30):
        while server.metrics()[sample_key("sqale_questions_in_flight", {})] < questions:
            await anyio.sleep(0.1)


async def test_a_busy_token_leaves_a_place_for_another_at_the_defaults(
    team_server: Any, fake_ollama: Any
) -> None:
    """Issue 31: with the default 4 workers and 4 runtime slots, token `all` asks four slow
    questions; token `books` is answered at once while all four are still running (a token holds
    at most 3 places when several share them), and the start-up log says so."""
    fake = fake_ollama(slow_sales(60))
    server = team_server(ollama_url=fake.url, places=(), environ={"OLLAMA_NUM_PARALLEL": "4"})
    slow: list[Any] = []

    async def busy(k: int) -> None:  # four questions (the same arguments of one token would be one)
        slow.append(
            await ask(
                server.url,
                ALL,
                {"question": "How many sales are there?", "database": "sales", "evidence": f"asker {k}"},
            )
        )

    async with anyio.create_task_group() as group:
        for k in range(4):
            group.start_soon(busy, k)
        await wait_in_flight(server, 4)
        with anyio.fail_after(45):  # the slow questions' first replies take 60 s
            other = await ask(server.url, BOOKS, {"question": BOOK_QUESTION})
        assert slow == []  # none of the four has finished
        group.cancel_scope.cancel()
    assert other.structured_content["rows"] == [[16]]
    assert other.structured_content["queued_seconds"] < 5
    assert (
        "2 tokens share 4 places (the smaller of --max-concurrent and the runtime slots): each runs "
        "at most 3 episodes at once (fewer where its max-concurrent says so), so one place is "
        "always left for the others"
    ) in server.stderr.read_text()


async def test_with_one_place_another_token_waits_for_one_episode_not_a_queue(
    team_server: Any, fake_ollama: Any
) -> None:
    """Ollama's default single slot: token `all` has one slow question running and one waiting;
    token `books`, asking next, goes before that waiting one (it waits for the running episode
    only), and the start-up log warns that tokens take turns."""
    fake = fake_ollama(slow_sales(2))
    server = team_server(ollama_url=fake.url, places=(), environ={"OLLAMA_NUM_PARALLEL": ""})
    done: list[str] = []

    async def asks(key: str, token: str, arguments: dict[str, Any]) -> None:
        await ask(server.url, token, arguments)
        done.append(key)

    async with anyio.create_task_group() as group:
        group.start_soon(asks, "all-1", ALL, {"question": "How many sales are there?", "database": "sales"})
        await wait_in_flight(server, 1)
        group.start_soon(asks, "all-2", ALL, {"question": "What do the sales amount to?", "database": "sales"})
        await wait_in_flight(server, 2)
        await asks("books", BOOKS, {"question": BOOK_QUESTION})
        assert done == ["all-1", "books"]
        group.cancel_scope.cancel()
    assert "WARNING mcp_server.state: 2 tokens share one place (" in server.stderr.read_text()


async def test_metrics_parse_and_move_with_questions(team_server: Any) -> None:
    """/metrics needs its own token, parses with prometheus_client, and counts questions."""
    server = team_server()
    metrics_url = f"http://127.0.0.1:{server.port}/metrics"
    for headers in ({}, {"Authorization": f"Bearer {ALL}"}):
        assert httpx.get(metrics_url, headers=headers, timeout=10).status_code == 401
    key = sample_key(
        "sqale_questions_total",
        {"database": "bookshop", "token": "all", "status": "submitted", "stop_reason": "submit_sql"},
    )
    before = server.metrics()
    assert before.get(key, 0.0) == 0.0 and before["sqale_queue_length{queue=runtime_slot}"] == 0
    for _ in range(2):
        await ask(server.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop"})
    after = server.metrics()
    assert after[key] == 2
    assert after["sqale_episode_rounds_count{database=bookshop}"] == 2
    assert after["sqale_episode_seconds_count{database=bookshop}"] == 2
    assert after["sqale_answer_bytes_count{database=bookshop}"] == 2
    assert (
        after["sqale_model_request_seconds_count{backend=ollama,replica=" + server_replica(after) + "}"] == 6
    )  # three rounds each
    assert after["sqale_sqlite_worker_starts_total{}"] >= 1
    assert after["sqale_sqlite_worker_kills_total{}"] == 0


def server_replica(metrics: dict[str, float]) -> str:
    """The replica label the model requests were counted under."""
    (key,) = [k for k in metrics if k.startswith("sqale_model_request_seconds_count")]
    return key.split("replica=", 1)[1].rstrip("}")


async def test_sigterm_drains_questions_in_flight(team_server: Any) -> None:
    """SIGTERM with three questions running: they finish, a new one is refused, the log is whole, exit 0."""
    server = team_server("--drain-timeout", "20", "--log-format", "json")
    questions = list(BOOK_GOLD)[:3]
    answers: dict[str, Any] = {}

    async def one(question: str) -> None:
        answers[question] = await ask(server.url, ALL, {"question": question, "database": "bookshop"})

    server.runtime.hold()  # the three stay in flight until the late question has been refused
    async with anyio.create_task_group() as group:
        for question in questions:
            group.start_soon(one, question)
        await wait_until(lambda: server.metrics()["sqale_questions_in_flight{}"] == 3)
        stopped_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        await wait_until(lambda: "SIGTERM: taking no new questions" in server.stderr.read_text())
        # A new question (one of those in flight, asked again, would wait for its answer: ongoing.py).
        late = error_text(
            await ask(
                server.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop", "evidence": "asked late"}
            )
        )
        server.runtime.release()
    assert late == (
        "The server is shutting down and takes no new questions. Ask again in a minute, "
        "once it has restarted (or ask its operator)."
    )
    assert {q: a.structured_content["sql"] for q, a in answers.items()} == {q: BOOK_GOLD[q] for q in questions}
    assert await anyio.to_thread.run_sync(server.process.wait, 20) == 0
    assert time.monotonic() - stopped_at < 20
    lines = [json.loads(line) for line in server.episode_log.read_text().splitlines()]
    assert sorted((line["question"], line["status"]) for line in lines) == sorted(
        [*((q, "submitted") for q in questions), (BOOK_QUESTION, "refused")]
    )
    logged = [json.loads(line) for line in server.stderr.read_text().splitlines()]  # all JSON
    assert {e["question_id"] for e in logged if e["event"].startswith("answered on")} == {
        line["question_id"] for line in lines if line["status"] == "submitted"
    }
    assert all({"time", "level", "event", "question_id"} <= set(e) for e in logged)


async def test_sigterm_cancels_what_outlives_the_drain(team_server: Any) -> None:
    """A question still running when the drain time ends is cancelled, logged as such; exit 0."""
    server = team_server("--drain-timeout", "0.5", delay=2.0)  # about 6 s an episode
    async with anyio.create_task_group() as group:
        results: list[Any] = []

        async def one() -> None:
            results.append(await ask(server.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop"}))

        group.start_soon(one)
        await wait_until(lambda: server.metrics()["sqale_questions_in_flight{}"] == 1)
        server.process.send_signal(signal.SIGTERM)
    assert error_text(results[0]).startswith("The server shut down before this question was answered")
    assert await anyio.to_thread.run_sync(server.process.wait, 20) == 0
    (line,) = [json.loads(line) for line in server.episode_log.read_text().splitlines()]
    assert (line["token"], line["status"]) == ("all", "cancelled")


async def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll `condition` (in a thread: it may do blocking HTTP) until true; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while not await anyio.to_thread.run_sync(condition):
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout:g} s")
        await anyio.sleep(0.05)


async def test_many_clients_lose_no_question(team_server: Any) -> None:
    """Eight clients x three questions at once, each on its own session: all answered, all logged."""
    server = team_server(delay=0.05)
    results: list[Any] = []

    async def client(index: int) -> None:
        token = (BOOKS, ALL)[index % 2]
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
            Client(streamable_http_client(server.url, http_client=http)) as session,
        ):
            for question in list(BOOK_GOLD)[:3]:
                results.append(await session.call_tool(TOOL, {"question": question, "database": "bookshop"}))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for index in range(8):
                group.start_soon(client, index)
    assert [r.is_error for r in results] == [False] * 24
    assert len(server.episode_log.read_text().splitlines()) == 24
    assert server.metrics()["sqale_queue_length{queue=token}"] == 0

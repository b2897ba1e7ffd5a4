"""A server a team shares, over real HTTP on 127.0.0.1: scoped tokens, quotas, /metrics, SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from agent.sqlite import create_database
from tests.support.mcp import (
    BOOK_GOLD,
    REPO,
    TOOL,
    DelayedPolicy,
    free_port,
    server_command,
    server_env,
    wait_for_port,
)
from tests.support.policies import OraclePolicy

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

SALES_GOLD = {"How many sales are there?": "SELECT count(*) FROM sales"}
TOKENS = {"SQALE_TOKEN_BOOKS": "books-secret", "SQALE_TOKEN_ALL": "all-secret",
          "SQALE_METRICS_TOKEN": "metrics-secret"}
BOOKS, ALL = "books-secret", "all-secret"
BOOK_QUESTION = "How many books are there?"


@dataclass
class TeamServer:
    """A running server subprocess with its URL and files."""

    process: subprocess.Popen[bytes]
    port: int
    episode_log: Path
    stderr: Path

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    def metrics(self) -> dict[str, float]:
        """GET /metrics with the metrics token, parsed by prometheus_client: sample -> value."""
        response = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=10,
                             headers={"Authorization": f"Bearer {TOKENS['SQALE_METRICS_TOKEN']}"})
        response.raise_for_status()
        return {_sample_key(s.name, s.labels): s.value
                for family in text_string_to_metric_families(response.text)
                for s in family.samples}


def _sample_key(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


@pytest.fixture
def team_server(tmp_path: Path, fake_ollama: Any) -> Iterator[Callable[..., TeamServer]]:
    """Start servers with two databases and tokens [tokens.books] (bookshop) and [tokens.all]."""
    started: list[TeamServer] = []

    def start(*flags: str, delay: float = 0.0, books_quota: str = "") -> TeamServer:
        sales = create_database(tmp_path / "sales.db", "CREATE TABLE sales (id INTEGER PRIMARY KEY, "
                                "amount REAL); INSERT INTO sales (amount) VALUES (1.5), (2.5);")
        policy = OraclePolicy({**BOOK_GOLD, **SALES_GOLD})
        fake = fake_ollama(DelayedPolicy(policy, delay) if delay else policy)
        config = tmp_path / "team.toml"
        config.write_text(
            f'[db]\nsales = "{sales}"\n\n'
            f'[tokens.books]\nenv = "SQALE_TOKEN_BOOKS"\ndatabases = ["bookshop"]\n{books_quota}\n'
            '[tokens.all]\nenv = "SQALE_TOKEN_ALL"\n')
        port = free_port()
        server = TeamServer(None, port, tmp_path / "episodes.jsonl", tmp_path / "stderr.txt")  # type: ignore[arg-type]
        with server.stderr.open("wb") as err:
            server.process = subprocess.Popen(
                server_command("--config", str(config), "--demo", "--ollama-host", fake.url,
                               "--transport", "streamable-http", "--port", str(port),
                               "--metrics-token-env", "SQALE_METRICS_TOKEN",
                               "--episode-log", str(server.episode_log), "--runtime-slots", "8",
                               "--max-concurrent", "8", *flags),
                cwd=REPO, env=server_env(tmp_path, **TOKENS), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=err)
        started.append(server)
        wait_for_port(port, server.process)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
        server.process.wait(timeout=15)


async def ask(url: str, token: str, arguments: dict[str, Any]) -> Any:
    """Call the tool once with `token`; the CallToolResult."""
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
                Client(streamable_http_client(url, http_client=http)) as client):
        return await client.call_tool(TOOL, arguments)


async def list_tool(url: str, token: str) -> Any:
    """The tool as tools/list shows it to `token`."""
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
                Client(streamable_http_client(url, http_client=http)) as client):
        (tool,) = (await client.list_tools()).tools
    return tool


def error_text(result: Any) -> str:
    """The text of a tool error (and that it is one), without the SDK's 'Error executing' prefix."""
    assert result.is_error, result
    prefix = f"Error executing tool {TOOL}: "
    assert result.content[0].text.startswith(prefix), result.content[0].text
    return result.content[0].text.removeprefix(prefix)


async def test_scoped_token_sees_and_queries_only_its_databases(team_server: Any) -> None:
    """tools/list names only the token's databases; another alias errs exactly like an unknown one."""
    server = team_server()
    scoped, full = await list_tool(server.url, BOOKS), await list_tool(server.url, ALL)
    assert "bookshop" in scoped.description and "sales" not in scoped.description
    assert "sales" in full.description and "bookshop" in full.description
    assert "sales" not in json.dumps(scoped.input_schema)
    other = error_text(await ask(server.url, BOOKS, {"question": "How many sales are there?",
                                                     "database": "sales"}))
    unknown = error_text(await ask(server.url, BOOKS, {"question": "How many sales are there?",
                                                       "database": "payroll"}))
    assert other.replace("'sales'", "'X'") == unknown.replace("'payroll'", "'X'") == (
        "Unknown database 'X'; pass one of the configured aliases as `database`: bookshop.")
    answered = await ask(server.url, ALL, {"question": "How many sales are there?", "database": "sales"})
    assert answered.structured_content["rows"] == [[2]]
    own = await ask(server.url, BOOKS, {"question": BOOK_QUESTION})  # its only database: implied
    assert own.structured_content["rows"] == [[16]]
    lines = [json.loads(line) for line in server.episode_log.read_text().splitlines()]
    assert [(line["token"], line["database"], line["status"]) for line in lines] == [
        ("all", "sales", "submitted"), ("books", "bookshop", "submitted")]
    assert "books-secret" not in server.stderr.read_text() + server.episode_log.read_text()


async def test_per_minute_quota_is_per_token_and_says_when_to_retry(team_server: Any) -> None:
    """The third question of a token allowed two per minute is a tool error with a retry time."""
    server = team_server(books_quota="questions_per_minute = 2\n")
    for _ in range(2):
        assert not (await ask(server.url, BOOKS, {"question": BOOK_QUESTION})).is_error
    refused = error_text(await ask(server.url, BOOKS, {"question": BOOK_QUESTION}))
    assert refused.startswith("Too many questions: token 'books' may ask 2 per minute. Retry in ")
    seconds = int(refused.removeprefix(
        "Too many questions: token 'books' may ask 2 per minute. Retry in ").removesuffix(" s."))
    assert 50 <= seconds <= 60
    other = await ask(server.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop"})
    assert other.structured_content["rows"] == [[16]]  # the other token's minute is its own
    metrics = server.metrics()
    assert metrics[_sample_key("sqale_questions_total", {
        "database": "bookshop", "token": "books", "status": "refused", "stop_reason": "quota"})] == 1


async def test_concurrency_quota_queues_only_its_own_token(team_server: Any) -> None:
    """A token allowed one question at once queues its second; the other token's goes straight on."""
    server = team_server(delay=0.3, books_quota="max_concurrent = 1\n")  # about 0.9 s an episode
    answers: dict[str, Any] = {}

    async def one(key: str, token: str) -> None:
        answers[key] = await ask(server.url, token, {"question": BOOK_QUESTION, "database": "bookshop"})

    async with anyio.create_task_group() as group:
        group.start_soon(one, "books-1", BOOKS)
        group.start_soon(one, "books-2", BOOKS)
        group.start_soon(one, "all", ALL)
    queued = sorted(answers[k].structured_content["queued_seconds"] for k in ("books-1", "books-2"))
    assert queued[0] < 0.3 and queued[1] > 0.6
    assert answers["all"].structured_content["queued_seconds"] < 0.3


async def test_metrics_parse_and_move_with_questions(team_server: Any) -> None:
    """/metrics needs its own token, parses with prometheus_client, and counts questions."""
    server = team_server()
    metrics_url = f"http://127.0.0.1:{server.port}/metrics"
    for headers in ({}, {"Authorization": f"Bearer {ALL}"}):
        assert httpx.get(metrics_url, headers=headers, timeout=10).status_code == 401
    key = _sample_key("sqale_questions_total", {"database": "bookshop", "token": "all",
                                                "status": "submitted", "stop_reason": "submit_sql"})
    before = server.metrics()
    assert before.get(key, 0.0) == 0.0 and before["sqale_queue_length{queue=runtime_slot}"] == 0
    for _ in range(2):
        await ask(server.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop"})
    after = server.metrics()
    assert after[key] == 2
    assert after["sqale_episode_rounds_count{database=bookshop}"] == 2
    assert after["sqale_episode_seconds_count{database=bookshop}"] == 2
    assert after["sqale_answer_bytes_count{database=bookshop}"] == 2
    assert after["sqale_model_request_seconds_count{backend=ollama,replica=" + server_replica(after)
                 + "}"] == 6  # three rounds each
    assert after["sqale_sqlite_worker_starts_total{}"] >= 1
    assert after["sqale_sqlite_worker_kills_total{}"] == 0


def server_replica(metrics: dict[str, float]) -> str:
    """The replica label the model requests were counted under."""
    (key,) = [k for k in metrics if k.startswith("sqale_model_request_seconds_count")]
    return key.split("replica=", 1)[1].rstrip("}")


async def test_sigterm_drains_questions_in_flight(team_server: Any) -> None:
    """SIGTERM with three questions running: they finish, a new one is refused, the log is whole, exit 0."""
    server = team_server("--drain-timeout", "20", "--log-format", "json", delay=0.5)  # 1.5 s an episode
    questions = list(BOOK_GOLD)[:3]
    answers: dict[str, Any] = {}

    async def one(question: str) -> None:
        answers[question] = await ask(server.url, ALL, {"question": question, "database": "bookshop"})

    async with anyio.create_task_group() as group:
        for question in questions:
            group.start_soon(one, question)
        await wait_until(lambda: server.metrics()["sqale_questions_in_flight{}"] == 3)
        stopped_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        await anyio.sleep(0.2)
        late = error_text(await ask(server.url, ALL, {"question": BOOK_QUESTION, "database": "bookshop"}))
    assert late == ("The server is shutting down and takes no new questions. Ask again in a minute, "
                    "once it has restarted (or ask its operator).")
    assert {q: a.structured_content["sql"] for q, a in answers.items()} == {q: BOOK_GOLD[q] for q in questions}
    assert await anyio.to_thread.run_sync(server.process.wait, 20) == 0
    assert time.monotonic() - stopped_at < 20
    lines = [json.loads(line) for line in server.episode_log.read_text().splitlines()]
    assert sorted((line["question"], line["status"]) for line in lines) == sorted(
        [*((q, "submitted") for q in questions), (BOOK_QUESTION, "refused")])
    logged = [json.loads(line) for line in server.stderr.read_text().splitlines()]  # all JSON
    assert {e["question_id"] for e in logged if e["event"].startswith("answered on")} == {
        line["question_id"] for line in lines if line["status"] == "submitted"}
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
        async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
                    Client(streamable_http_client(server.url, http_client=http)) as session):
            for question in list(BOOK_GOLD)[:3]:
                results.append(await session.call_tool(TOOL, {"question": question, "database": "bookshop"}))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for index in range(8):
                group.start_soon(client, index)
    assert [r.is_error for r in results] == [False] * 24
    assert len(server.episode_log.read_text().splitlines()) == 24
    assert server.metrics()["sqale_queue_length{queue=token}"] == 0

"""Answers within the client's patience (--call-budget): a call not answered in time says `working`
while its question goes on; the same call again waits for it; nothing is asked of the model twice; a
person's cancel, an unclaimed question, a token's limit, one-call answers and a form all fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitResult

from mcp_server.app import SqaleServer
from tests.support.choosing import BOOKS, OLD_BOOKS, SEED_FLAGS, accept, disagreeing_policy
from tests.support.mcp import BOOK_GOLD, TOOL
from tests.support.mcp_in_process import build, error_text, metric, valid_answer
from tests.support.policies import OraclePolicy, ScriptedReply, ScriptPolicy, assistant_reply, tool_call

pytestmark = pytest.mark.anyio

AUTHORS = "Which authors come from Nigeria?"
COUNT = {"question": BOOKS}


def questions_of(fake: Any, phrase: str) -> list[Any]:
    """The model requests (/api/generate bodies) of the question containing `phrase`."""
    return [body for body in fake.bodies("/api/generate") if phrase in body["prompt"]]


def log_lines(log: Path) -> list[dict[str, Any]]:
    """The episode log's lines."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def until(check: Any, timeout: float = 30) -> None:
    """Return once `check()` is true (polled: a metric or a log line)."""
    with anyio.fail_after(timeout):
        while not check():
            await anyio.sleep(0.02)


def held_server(tmp_path: Path, fake_ollama: Any, *flags: str) -> tuple[Any, SqaleServer, Path]:
    """The oracle behind a fake runtime holding every model request (until `release()`), a server on
    it with `flags` and an episode log: the runtime, the server and the log's path."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    log = tmp_path / "episodes.jsonl"
    server = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--episode-log", str(log), *flags])
    fake.hold()
    return fake, server, log


async def ask_until_answered(client: Client, arguments: dict[str, Any], most: int = 20) -> list[CallToolResult]:
    """Call the tool with the same arguments until it answers (as an assistant told `working` does)."""
    results = []
    while len(results) < most:
        results.append(await client.call_tool(TOOL, arguments))
        if valid_answer(results[-1])["status"] != "working":
            return results
    raise AssertionError(f"still working after {most} calls")


async def test_a_slow_question_says_working_and_the_same_call_gets_its_answer(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """Held at the model past a 2 s budget, the call says `working` (a success, valid against the output
    schema, telling the assistant what to do); called again, it waits for that same question: its three
    model requests are made once, and the log says so."""
    fake, server, log = held_server(tmp_path, fake_ollama, "--call-budget", "2")
    async with Client(server) as client:
        with anyio.fail_after(30):  # the held request would never end: the budget ends the call
            first = await client.call_tool(TOOL, COUNT)
        working = valid_answer(first)
        assert (first.is_error, working["status"], working["stop_reason"], working["sql"]) == (
            False,
            "working",
            "call_budget",
            None,
        )
        assert first.content[0].text.startswith("Still working on this question (0 model rounds so far, ")
        assert first.content[0].text.endswith(
            "The answer is not ready yet; the question goes on being answered meanwhile. Call "
            "answer_sql_question again with exactly the same arguments to wait for the answer: nothing "
            "starts over and nothing is lost."
        )
        assert metric(server, "sqale_questions_working") == 1
        fake.release()
        rest = await ask_until_answered(client, COUNT)
    assert valid_answer(rest[-1])["rows"] == [[16]]
    assert len(questions_of(fake, BOOKS)) == 3  # list_tables, run_query, submit_sql: once each
    lines = log_lines(log)
    calls = 1 + len(rest)
    assert [(line["status"], line.get("call"), line.get("calls")) for line in lines] == [
        *(("working", n, None) for n in range(1, calls)),
        ("submitted", None, calls),
    ]
    assert len({line["question_id"] for line in lines}) == 1
    assert metric(server, "sqale_working_answers_total", database="bookshop", token="local") == calls - 1
    assert metric(server, "sqale_questions_working") == 0


async def test_a_persons_cancel_stops_the_question_and_frees_the_engine(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """The call waiting on a question that outlived its first call is cancelled: the question stops, its
    model request is closed, its line says so; the same question asked again starts afresh."""
    fake, server, log = held_server(tmp_path, fake_ollama, "--call-budget", "2")
    async with Client(server) as client:
        assert valid_answer(await client.call_tool(TOOL, COUNT))["status"] == "working"
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, TOOL, COUNT)
            await until(lambda: metric(server, "sqale_questions_working") == 0)  # the second call waits on it
            group.cancel_scope.cancel()
        assert await fake.await_disconnects(1, timeout=10)
        await until(lambda: [line["status"] for line in log_lines(log)] == ["working", "cancelled"])
        fake.release()
        again = await ask_until_answered(client, COUNT)
    assert valid_answer(again[-1])["rows"] == [[16]]
    assert log_lines(log)[1]["stop_reason"] == "call_cancelled"
    assert len({line["question_id"] for line in log_lines(log)}) == 2  # the question asked afresh


async def test_a_question_nobody_asks_again_is_stopped_after_the_working_timeout(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """No call comes back within --working-timeout: the question is cancelled and its engine freed."""
    fake, server, log = held_server(tmp_path, fake_ollama, "--call-budget", "1", "--working-timeout", "1")
    async with Client(server) as client:
        assert valid_answer(await client.call_tool(TOOL, COUNT))["status"] == "working"
        assert await fake.await_disconnects(1, timeout=20)
        await until(lambda: len(log_lines(log)) == 2)
    expired = log_lines(log)[1]
    assert (expired["status"], expired["stop_reason"]) == ("expired", "not_asked_again")
    assert metric(server, "sqale_questions_total", status="expired", stop_reason="not_asked_again") == 1
    assert metric(server, "sqale_questions_working") == 0


async def test_a_token_holds_at_most_its_working_questions(tmp_path: Path, fake_ollama: Any) -> None:
    """With --token-max-working 1, a second question is refused while the first is being answered,
    saying to ask that one again; asking it again is no new question and gets its answer."""
    fake, server, _ = held_server(tmp_path, fake_ollama, "--call-budget", "1", "--token-max-working", "1")
    async with Client(server) as client:
        assert valid_answer(await client.call_tool(TOOL, COUNT))["status"] == "working"
        refused = await client.call_tool(TOOL, {"question": AUTHORS})
        assert error_text(refused) == (
            "Too many questions at once: token 'local' already has 1 being answered, counting those whose "
            "call said `working`. Call again with the arguments of one of those to get its answer (that also "
            "frees its place), or wait for them to be answered, then ask this one."
        )
        assert valid_answer(refused)["stop_reason"] == "working"
        fake.release()
        answered = await ask_until_answered(client, COUNT)
        assert valid_answer(answered[-1])["rows"] == [[16]]
        later = await ask_until_answered(client, {"question": AUTHORS})
    assert valid_answer(later[-1])["status"] == "submitted"


async def test_one_call_answers_answer_early_with_what_the_model_explored(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """--one-call-answers: a model whose tool turns take 60 s is cut when the 6 s budget is nearly up and
    answers in its final turn; the one call gets that answer, saying it came early."""
    slow = ScriptPolicy(
        [ScriptedReply(assistant_reply("look", tool_call("list_tables")), delay=60)],
        final=ScriptedReply("SELECT count(*) FROM books"),
    )
    fake = fake_ollama(slow)
    server = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--call-budget", "6", "--one-call-answers"])
    async with Client(server) as client:
        with anyio.fail_after(30):
            result = await client.call_tool(TOOL, COUNT)
    answer = valid_answer(result)
    assert (answer["status"], answer["stop_reason"], answer["rows"]) == ("final_answer", "time_up", [[16]])
    assert answer["answered_early"] == {
        "reason": "call_budget",
        "samples_answered": 1,
        "samples": 1,
        "rounds": 1,
        "max_rounds": 7,
    }
    assert (
        "Answered early: the call's time budget was nearly up and this host asks for answers in one "
        "call, so the model answered with what it had explored (the answer used 1 of 7 rounds). "
        "Check it with care."
    ) in result.content[0].text
    assert len(fake.disconnects) == 1  # the cut tool turn


async def test_a_form_waiting_for_the_person_still_ends_the_call_in_time(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """2025-11-25: the samples disagree and the form waits for the person past the budget: the call says
    `working` (awaiting_choice); the person's reply comes after it ended, and the next call of the same
    question gets the answer they chose."""
    fake = fake_ollama(disagreeing_policy())
    server = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--call-budget", "2", *SEED_FLAGS])
    person_may_reply, form_seen = anyio.Event(), anyio.Event()

    async def reply(context: Any, params: Any) -> ElicitResult:
        form_seen.set()
        await person_may_reply.wait()
        return accept("2")

    async with Client(server, mode="legacy", elicitation_callback=reply) as client:  # type: ignore[arg-type]
        results = [await client.call_tool(TOOL, COUNT)]
        while not form_seen.is_set():  # the samples may take more than one call on a busy machine
            results.append(await client.call_tool(TOOL, COUNT))
        waiting = valid_answer(results[-1])  # the call that sent the form, and waited on it
        assert (waiting["status"], waiting["stop_reason"], waiting["samples_finished"]) == (
            "working",
            "awaiting_choice",
            3,
        )
        assert "a form asks the person to choose among their answers" in results[-1].content[0].text
        person_may_reply.set()
        answered = await ask_until_answered(client, COUNT)
    chosen = valid_answer(answered[-1])
    assert (chosen["sql"], chosen["chosen_by"], chosen["asked"]["reply"]) == (OLD_BOOKS, "user", "chose")
    assert len(questions_of(fake, BOOKS)) == 8  # the samples' rounds (3, 2 and 3), once each


async def test_a_drain_waits_for_a_working_question_and_its_next_call_still_gets_the_answer(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """SIGTERM's drain counts a question whose call said `working`: a new question is refused, but the
    same one asked again waits for its answer, and the drain ends with it, nothing cancelled."""
    fake, server, _ = held_server(tmp_path, fake_ollama, "--call-budget", "2")
    async with Client(server) as client:
        assert valid_answer(await client.call_tool(TOOL, COUNT))["status"] == "working"
        drained: list[Any] = []
        async with anyio.create_task_group() as group:
            group.start_soon(_drain, server, drained)
            await until(lambda: server.gate.draining)
            refused = await client.call_tool(TOOL, {"question": AUTHORS})
            assert valid_answer(refused)["stop_reason"] == "stopping"
            fake.release()
            answered = await ask_until_answered(client, COUNT)
    assert valid_answer(answered[-1])["rows"] == [[16]]
    assert [(result.in_flight, result.cancelled) for result in drained] == [(1, 0)]


async def _drain(server: Any, drained: list[Any]) -> None:
    """SIGTERM's drain (serving/draining.py), as the HTTP server runs it."""
    drained.append(await server.gate.drain(60))


async def test_2026_07_28_a_working_call_then_the_form_through_input_required(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """2026-07-28: the samples outlast the first call (`working`); the next call of the question ends with
    the form (input_required), and the client's retry with the person's choice gets that answer."""
    fake = fake_ollama(disagreeing_policy())
    server = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--call-budget", "2", *SEED_FLAGS])
    fake.hold()

    async def reply(context: Any, params: Any) -> ElicitResult:
        return accept("2")

    async with Client(server, mode="auto", elicitation_callback=reply) as client:  # type: ignore[arg-type]
        assert client.protocol_version == "2026-07-28"
        assert valid_answer(await client.call_tool(TOOL, COUNT))["status"] == "working"
        fake.release()
        answered = await ask_until_answered(client, COUNT)  # the SDK answers input_required itself
    chosen = valid_answer(answered[-1])
    assert (chosen["sql"], chosen["chosen_by"], chosen["asked"]["reply"]) == (OLD_BOOKS, "user", "chose")
    assert len(questions_of(fake, BOOKS)) == 8


async def test_a_question_counts_once_in_its_tokens_quota(tmp_path: Path, fake_ollama: Any) -> None:
    """--token-per-minute 1: the question's later calls are no new episodes (they wait for the one
    running), while another question within the minute is refused."""
    fake, server, _ = held_server(tmp_path, fake_ollama, "--call-budget", "1", "--token-per-minute", "1")
    async with Client(server) as client:
        assert valid_answer(await client.call_tool(TOOL, COUNT))["status"] == "working"
        assert valid_answer(await client.call_tool(TOOL, COUNT))["status"] == "working"
        other = await client.call_tool(TOOL, {"question": AUTHORS})
        assert error_text(other).startswith("Too many questions: token 'local' may ask 1 per minute.")
        fake.release()
        answered = await ask_until_answered(client, COUNT)
    assert valid_answer(answered[-1])["rows"] == [[16]]


async def test_a_later_call_written_otherwise_counts_nothing_either(tmp_path: Path, fake_ollama: Any) -> None:
    """--token-per-minute 1: a later call of the question with spaces around it, or naming its
    database, waits for it without counting; a question that only shares its text does count."""
    fake, server, _ = held_server(tmp_path, fake_ollama, "--call-budget", "1", "--token-per-minute", "1")
    async with Client(server) as client:
        assert valid_answer(await client.call_tool(TOOL, COUNT))["status"] == "working"
        again = {"question": f"  {COUNT['question']} ", "database": "bookshop"}
        assert valid_answer(await client.call_tool(TOOL, again))["status"] == "working"
        other = await client.call_tool(TOOL, {**COUNT, "evidence": "another question"})
        assert error_text(other).startswith("Too many questions: token 'local' may ask 1 per minute.")
        fake.release()
        answered = await ask_until_answered(client, COUNT)
    assert valid_answer(answered[-1])["rows"] == [[16]]

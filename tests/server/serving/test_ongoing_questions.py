"""The questions that outlive their calls (mcp_server/ongoing.py): found again by key, kept while a call
waits, dropped --working-timeout after the last call (an answer nobody took is recorded), and at most
--token-max-working per token."""

from __future__ import annotations

import time
from dataclasses import replace

import anyio
import pytest

from mcp_server.ongoing import Ongoing, OngoingQuestions, QuestionKey, TooManyWorking, Waiter

pytestmark = pytest.mark.anyio

KEY = QuestionKey(
    token="local",
    database="bookshop",
    question="How many books?",
    evidence=None,
    samples=1,
    verified=True,
    asking="none",
)


async def quiet(progress: float, total: float | None, message: str | None) -> None:
    """A call's progress channel that hears nothing."""


async def test_an_answer_no_call_came_back_for_is_dropped_and_recorded() -> None:
    """Answered while no call waited, the question is kept keep_seconds, then dropped: on_expired
    records it, and the same key is a new question after that."""
    expired: list[Ongoing] = []
    recorded = anyio.Event()

    async def record(work: Ongoing) -> None:
        await anyio.sleep(0)  # a record writes a line: it may yield
        expired.append(work)
        recorded.set()

    async def answer(work: Ongoing) -> object:
        return "the answer"

    ongoing = OngoingQuestions(keep_seconds=0.2, per_token=4)
    async with ongoing.running():
        work = ongoing.start(KEY, "q1", answer, record)
        with anyio.fail_after(10):
            await recorded.wait()
        assert (ongoing.find(KEY), ongoing.held, work.outcome) == (None, 0, "the answer")
    assert expired == [work]


async def test_a_question_a_call_waits_on_is_kept_and_its_answer_taken() -> None:
    """While a call waits it never expires; taken, the key is free again; nothing is recorded."""
    released, expired = anyio.Event(), []

    async def record(work: Ongoing) -> None:
        expired.append(work)

    async def answer(work: Ongoing) -> object:
        await released.wait()
        return 16

    ongoing = OngoingQuestions(keep_seconds=0.05, per_token=4)
    async with ongoing.running():
        work = ongoing.start(KEY, "q1", answer, record)
        number = work.attach(Waiter(quiet))
        await anyio.sleep(0.3)  # six times keep_seconds: a waited-on question stays all that time
        assert ongoing.find(KEY) is work and ongoing.unwaited == 0
        released.set()
        await work.done.wait()
        work.detach(number)
        ongoing.take(work)
        assert (ongoing.find(KEY), work.outcome, work.calls) == (None, 16, 1)
        await anyio.sleep(0.2)
    assert expired == []


async def test_a_cancel_stops_a_running_question_but_leaves_an_answered_one() -> None:
    """cancel() stops a question still running (its reason kept for its line); an answered one stays
    for a later call."""

    async def forever(work: Ongoing) -> object:
        await anyio.sleep_forever()

    async def answer(work: Ongoing) -> object:
        return 1

    async def record(work: Ongoing) -> None:
        raise AssertionError("nothing expires here")

    ongoing = OngoingQuestions(keep_seconds=60, per_token=4)
    async with ongoing.running():
        running = ongoing.start(KEY, "q1", forever, record)
        answered = ongoing.start(replace(KEY, question="Another?"), "q2", answer, record)
        await answered.done.wait()
        ongoing.cancel(running, "call_cancelled")
        ongoing.cancel(answered, "call_cancelled")
        with anyio.fail_after(10):
            await running.done.wait()
        assert (running.cancelled_why, running.outcome, ongoing.find(KEY)) == ("call_cancelled", None, None)
        assert (answered.cancelled_why, ongoing.find(answered.key)) == (None, answered)


async def test_a_token_holds_at_most_its_questions() -> None:
    """The per-token limit counts that token's questions only."""

    async def forever(work: Ongoing) -> object:
        await anyio.sleep_forever()

    async def record(work: Ongoing) -> None:
        """Nothing to record."""

    ongoing = OngoingQuestions(keep_seconds=60, per_token=1)
    async with ongoing.running():
        ongoing.start(KEY, "q1", forever, record)
        with pytest.raises(TooManyWorking) as refused:
            ongoing.start(replace(KEY, question="Another?"), "q2", forever, record)
        assert (refused.value.token, refused.value.limit) == ("local", 1)
        ongoing.start(replace(KEY, token="team"), "q3", forever, record)
        assert ongoing.held == 2


async def test_a_question_its_call_takes_leaves_no_task_behind() -> None:
    """Answered within its call's budget and taken, a question starts no keeper: once the call has
    the outcome, no task of it is left (the keeper starts only when no call waits on a question)."""

    async def answer(work: Ongoing) -> object:
        await anyio.sleep(0)
        return 7

    async def record(work: Ongoing) -> None:
        raise AssertionError("nothing expires here")

    ongoing = OngoingQuestions(keep_seconds=60, per_token=4)
    async with ongoing.running():
        before = len(anyio.get_running_tasks())
        work = ongoing.start(KEY, "q1", answer, record)
        done = await ongoing.wait(
            work, Waiter(quiet), arrived=time.perf_counter(), budget=10, one_call_answers=False
        )
        ongoing.take(work)
        assert (done, work.outcome, ongoing.held, len(anyio.get_running_tasks())) == (True, 7, 0, before)


async def test_a_question_its_call_left_is_kept_then_cancelled() -> None:
    """A call whose budget ran out leaves its question running; no call asking again within
    keep_seconds, it is cancelled as not_asked_again and its key is free."""

    async def forever(work: Ongoing) -> object:
        await anyio.sleep_forever()

    async def record(work: Ongoing) -> None:
        raise AssertionError("a cancelled question is recorded where it ran, not here")

    ongoing = OngoingQuestions(keep_seconds=0.1, per_token=4)
    async with ongoing.running():
        work = ongoing.start(KEY, "q1", forever, record)
        done = await ongoing.wait(
            work, Waiter(quiet), arrived=time.perf_counter(), budget=0.05, one_call_answers=False
        )
        assert (done, ongoing.find(KEY), ongoing.unwaited) == (False, work, 1)
        with anyio.fail_after(10):
            await work.done.wait()
        assert (work.cancelled_why, ongoing.find(KEY), ongoing.held) == ("not_asked_again", None, 0)

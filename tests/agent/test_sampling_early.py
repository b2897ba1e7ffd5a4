"""Samples that answer early, as the model was trained to, when time is really up: a sample whose
episode timeout is near gets its final turn instead of running out of time; a question told to finish
gives its exploring samples their final turn and starts none of those still waiting for a slot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from agent.episode import EpisodeStatus, StopReason
from agent.loop import run_episode
from agent.sampling import Question, SampleBackends, SampleSettings, SlotFn, sample_question
from agent.sqlite import Database
from tests.support.music_episodes import QUESTION
from tests.support.policies import (
    PolicyBackend,
    ScriptedReply,
    ScriptPolicy,
    assistant_reply,
    is_final_turn,
    tool_call,
)

pytestmark = pytest.mark.anyio

ANSWER = "SELECT count(*) FROM album"


class SlowExplorer(ScriptPolicy):
    """Every tool turn takes `delay` seconds (it would never finish in time); the final turn, at
    once, answers ANSWER. `asked` is set once a tool turn's request has reached it."""

    def __init__(self, delay: float) -> None:
        super().__init__(
            [ScriptedReply(assistant_reply("look", tool_call("list_tables")), delay=delay)],
            final=ScriptedReply(ANSWER),
        )
        self.asked = anyio.Event()

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """The scripted turn; a tool turn's request also sets `asked`."""
        if not is_final_turn(prompt):
            self.asked.set()
        return super().reply(prompt, model)


def one_slot() -> SlotFn:
    """A runtime with one slot: the samples run one after another."""
    slots = anyio.Semaphore(1)

    @asynccontextmanager
    async def slot(k: int) -> AsyncIterator[None]:
        async with slots:
            yield

    return slot


async def test_a_sample_near_its_episode_timeout_answers_instead_of_running_out(db: Database) -> None:
    """A tool turn that would take 100 s is cut once a fifth of the 10 s episode timeout is left;
    the final turn answers in time: a result, not a timeout."""
    backend = PolicyBackend(SlowExplorer(delay=100))
    with anyio.fail_after(30):
        asked = await sample_question(
            Question(QUESTION, db),
            SampleBackends.seeded(backend, 1, None),
            run_episode,
            SampleSettings(episode_timeout=10),
        )
    assert asked.chosen is not None and asked.chosen.result is not None
    result = asked.chosen.result
    assert (result.status, result.stop_reason, result.sql, result.rows) == (
        EpisodeStatus.FINAL_ANSWER,
        StopReason.TIME_UP,
        ANSWER,
        ((3,),),
    )
    assert [r.final for r in result.rounds] == [True]  # the cut tool turn left no round
    assert "You have reached the exploration limit." in backend.requests[-1].prompt


async def test_a_question_told_to_finish_answers_with_the_samples_that_started(db: Database) -> None:
    """Three samples on one slot: told to finish while sample 0 explores, sample 0 answers now and
    samples 1 and 2 never start; the vote counts the one that finished."""
    policy = SlowExplorer(delay=100)
    backend = PolicyBackend(policy)
    finish = anyio.Event()

    async def tell_to_finish() -> None:
        await policy.asked.wait()
        finish.set()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(tell_to_finish)
            asked = await sample_question(
                Question(QUESTION, db),
                SampleBackends.seeded(backend, 3, 7),
                run_episode,
                SampleSettings(episode_timeout=300),
                slot=one_slot(),
                finish_now=finish,
            )
    runs = [asked.outcome.results[k] for k in range(3)]
    assert [(run.skipped, run.result is not None) for run in runs] == [
        (False, True),
        (True, False),
        (True, False),
    ]
    assert asked.chosen is runs[0] and runs[0].result is not None
    assert (runs[0].result.stop_reason, runs[0].result.sql) == (StopReason.TIME_UP, ANSWER)
    assert len(backend.requests) == 2  # sample 0's cut tool turn and its final turn; nothing else


async def test_told_to_finish_before_any_sample_starts_one_still_answers(db: Database) -> None:
    """Told to finish before any sample has its slot, the first to get one answers at once (its
    first turn is the final one), the other is skipped: a question always has an answer to give."""
    backend = PolicyBackend(SlowExplorer(delay=100))
    finish = anyio.Event()
    finish.set()
    with anyio.fail_after(30):
        asked = await sample_question(
            Question(QUESTION, db),
            SampleBackends.seeded(backend, 2, 7),
            run_episode,
            SampleSettings(),
            slot=one_slot(),
            finish_now=finish,
        )
    finished = [run for run in asked.outcome.results.values() if run.result is not None]
    assert len(finished) == 1 and len(backend.requests) == 1
    assert finished[0].result is not None and finished[0].result.stop_reason is StopReason.TIME_UP

"""Told to answer now (`finish_now`), an episode gets its final turn at once, worded byte for byte as
when its tool turns are spent, in either environment; a tool turn's model request under way is cut."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from agent.episode import EpisodeResult, EpisodeSettings, EpisodeStatus, StopReason
from agent.errors import BackendUnreachable
from agent.loop import run_episode
from agent.sqlite import Database
from agent.tools import Environment
from tests.support.music_episodes import QUESTION
from tests.support.policies import (
    PolicyBackend,
    ScriptedReply,
    ScriptPolicy,
    assistant_reply,
    round_number,
    tool_call,
)

GOOD = "SELECT name FROM artist ORDER BY id"
TURNS = [
    assistant_reply("tables", tool_call("list_tables")),
    assistant_reply("try", tool_call("run_query", sql=GOOD)),
    assistant_reply("look", tool_call("describe_table", table_name="album")),
    assistant_reply("again", tool_call("list_tables")),
]
FINAL = f"<think>answer</think>\n{GOOD}"
ENVIRONMENTS = [pytest.param(Environment.TRAINED, id="trained"), pytest.param(Environment.RICH, id="rich")]


@dataclass
class Played:
    """An episode's result and every prompt it sent."""

    result: EpisodeResult
    prompts: list[str]


def last_user_turn(prompt: str) -> str:
    """The text of the prompt's last user turn."""
    return prompt.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]


async def play(
    db: Database,
    environment: Environment,
    *,
    max_tool_turns: int = 6,
    finish_after: int | None = None,
    policy: ScriptPolicy | None = None,
    finish_now: anyio.Event | None = None,
) -> Played:
    """An episode of TURNS then FINAL; `finish_after`: finish_now is set once that round is played."""
    backend = PolicyBackend(policy or ScriptPolicy(TURNS, final=FINAL))
    finish = finish_now if finish_now is not None else anyio.Event() if finish_after is not None else None

    async def on_round(played: object) -> None:
        if finish is not None and finish_after is not None and len(backend.requests) == finish_after:
            finish.set()

    settings = EpisodeSettings(max_tool_turns=max_tool_turns, environment=environment)
    result = await run_episode(QUESTION, db, backend, settings=settings, on_round=on_round, finish_now=finish)
    return Played(result, [r.prompt for r in backend.requests])


@pytest.mark.anyio
@pytest.mark.parametrize("environment", ENVIRONMENTS)
async def test_after_two_rounds_the_final_turn_is_the_spent_budgets(
    db: Database, environment: Environment
) -> None:
    """Set after round 2 of 6, the next request is the final turn, its last user turn the very one an
    episode of 2 tool turns gets (the trained one: "You have reached the exploration limit...")."""
    early = await play(db, environment, finish_after=2)
    spent = await play(db, environment, max_tool_turns=2)
    assert len(early.prompts) == len(spent.prompts) == 3
    assert last_user_turn(early.prompts[-1]) == last_user_turn(spent.prompts[-1])
    if environment is Environment.TRAINED:
        assert last_user_turn(early.prompts[-1]).endswith(
            "You have reached the exploration limit. Now generate the final SQL query to answer the question. "
            f"Return only the SQL query. Your last query that executed without error was:\n{GOOD}\n"
            "If you are not sure of an improvement, return that query."
        )
    assert (early.result.status, early.result.stop_reason, early.result.sql, len(early.result.rounds)) == (
        EpisodeStatus.FINAL_ANSWER,
        StopReason.TIME_UP,
        GOOD,
        3,
    )
    assert (spent.result.stop_reason, early.result.rows) == (StopReason.TOOL_TURNS, spent.result.rows)


@pytest.mark.anyio
@pytest.mark.parametrize("environment", ENVIRONMENTS)
async def test_set_before_the_first_turn_it_asks_for_the_answer_at_once(
    db: Database, environment: Environment
) -> None:
    """Set before the episode starts, its only request is the zero-tool-turn episode's."""
    finish = anyio.Event()
    finish.set()
    early = await play(db, environment, finish_now=finish)
    none = await play(db, environment, max_tool_turns=0)
    assert early.prompts == none.prompts and len(early.prompts) == 1
    assert (early.result.stop_reason, early.result.rows) == (StopReason.TIME_UP, (("AC/DC",), ("Accept",)))


@pytest.mark.anyio
async def test_a_tool_turn_under_way_is_cut_and_the_final_turn_follows(db: Database) -> None:
    """Set while round 2's model request runs (it would take 60 s), that request is cut at once and
    the final turn carries round 1's results, as after one spent tool turn."""
    finish = anyio.Event()

    class SlowSecondTurn(ScriptPolicy):
        def reply(self, prompt: str, model: str) -> ScriptedReply:
            if round_number(prompt) == 2 and "exploration limit" not in prompt:
                finish.set()  # the request has reached the runtime: now it is told to finish
                return ScriptedReply(TURNS[1], delay=60)
            return super().reply(prompt, model)

    with anyio.fail_after(20):  # far below the 60 s the cut request would have taken
        early = await play(
            db, Environment.TRAINED, policy=SlowSecondTurn(TURNS, final=FINAL), finish_now=finish
        )
    spent = await play(db, Environment.TRAINED, max_tool_turns=1)
    assert len(early.prompts) == 3 and early.prompts[-1] == spent.prompts[-1]
    assert [r.final for r in early.result.rounds] == [False, True]
    assert (early.result.stop_reason, early.result.sql) == (StopReason.TIME_UP, GOOD)


@pytest.mark.anyio
async def test_without_it_the_episode_runs_its_six_turns(db: Database) -> None:
    """An event never set changes nothing: six tool turns, then the final one."""
    played = await play(db, Environment.TRAINED, finish_now=anyio.Event())
    assert (len(played.prompts), played.result.stop_reason) == (7, StopReason.TOOL_TURNS)


@pytest.mark.anyio
async def test_a_failing_model_request_fails_as_itself(db: Database) -> None:
    """The runtime failing while the event is watched raises its BackendError, not a group of errors."""
    down = ScriptPolicy([ScriptedReply("runtime down", http_status=503)])
    with pytest.raises(BackendUnreachable, match="runtime down"):
        await play(db, Environment.TRAINED, policy=down, finish_now=anyio.Event())

"""Whole episodes through the real `ollama` client and the fake Ollama server over HTTP."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.backends.base import VLLM_NEUTRAL_SAMPLERS
from agent.backends.ollama import OllamaBackend
from agent.episode import EpisodeResult, EpisodeSettings, EpisodeStatus, StopReason
from agent.errors import BackendUnreachable, ModelNotFound
from agent.loop import run_episode
from agent.sqlite import Database, create_database
from agent.tools import Environment
from tests.support.policies import (
    DEFAULT_MODEL,
    ScriptedReply,
    ScriptPolicy,
    assistant_reply,
    rambling,
    tool_call,
)

QUESTION = "How many pets are older than 3?"


@pytest.fixture
def db(tmp_path: Path):
    path = create_database(
        tmp_path / "pets.sqlite",
        "CREATE TABLE pet (id INTEGER PRIMARY KEY, age INTEGER);INSERT INTO pet (age) VALUES (1), (4), (5);",
    )
    with Database.unruled(path) as database:
        yield database


def episode(url: str, db: Database, settings: EpisodeSettings | None = None) -> EpisodeResult:
    """One episode over HTTP; the rich environment unless `settings` says otherwise."""

    async def main() -> EpisodeResult:
        backend = OllamaBackend(DEFAULT_MODEL, host=url)
        try:
            return await run_episode(
                QUESTION, db, backend, settings=settings or EpisodeSettings(environment=Environment.RICH)
            )
        finally:
            await backend.aclose()

    return anyio.run(main)


def prompts(server: Any) -> list[str]:
    return [body["prompt"] for body in server.bodies("/api/generate")]


def test_never_submitting_model_gets_a_final_turn_after_six_and_falls_back(db, fake_ollama) -> None:
    """Six tool turns, budget lines 5..0, then the final turn; no answer -> last good query."""
    good = tool_call("run_query", sql="SELECT count(*) FROM pet WHERE age > 3")
    turns = [assistant_reply("look", tool_call("list_tables")), assistant_reply("try", good)]
    turns += [assistant_reply("again", tool_call("describe_table", table_name="pet"))] * 4
    server = fake_ollama(ScriptPolicy(turns, final=assistant_reply("I do not know.")))
    result = episode(server.url, db)
    sent = prompts(server)
    assert len(sent) == 7
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(sent))
    assert [p.count("tool turns left before you must answer") for p in sent] == [0, 1, 2, 3, 4, 5, 6]
    assert [f"[{n} tool turns left" in sent[6 - n] for n in range(6)] == [True] * 6
    assert "This is your final answer turn" in sent[-1].rsplit("<|im_start|>user", 1)[1]
    assert (result.status, result.stop_reason, result.sql, result.rows) == (
        EpisodeStatus.FALLBACK,
        StopReason.TOOL_TURNS,
        "SELECT count(*) FROM pet WHERE age > 3",
        ((2,),),
    )


def test_trained_episode_counts_down_singular_and_shows_the_last_good_query(db, fake_ollama) -> None:
    """Default (trained) texts over HTTP: no brackets, `1 tool turn`, the final text with the SQL."""
    good = tool_call("run_query", sql="SELECT count(*) FROM pet WHERE age > 3")
    turns = [assistant_reply("look", tool_call("list_tables")), assistant_reply("try", good)]
    turns += [assistant_reply("again", tool_call("describe_table", table_name="pet"))] * 4
    server = fake_ollama(ScriptPolicy(turns, final="SELECT count(*) FROM pet WHERE age > 3"))
    result = episode(server.url, db, EpisodeSettings())
    sent = prompts(server)
    assert [p.rsplit("<|im_end|>", 1)[0].rsplit("\n", 1)[-1] for p in sent[1:6]] == [
        "5 tool turns left before you must answer",
        "4 tool turns left before you must answer",
        "3 tool turns left before you must answer",
        "2 tool turns left before you must answer",
        "1 tool turn left before you must answer",
    ]
    assert sent[-1].endswith(
        "Your last query that executed without error was:\nSELECT count(*) FROM pet WHERE age > 3\n"
        "If you are not sure of an improvement, return that query.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (result.status, result.stop_reason, result.rows) == (
        EpisodeStatus.FINAL_ANSWER,
        StopReason.TOOL_TURNS,
        ((2,),),
    )


def test_every_ollama_request_samples_as_vllm(db, fake_ollama) -> None:
    """All seven requests of an episode carry repeat_penalty 1.0 and the other neutral samplers."""
    turns = [assistant_reply("look", tool_call("list_tables"))]
    server = fake_ollama(ScriptPolicy(turns, final="SELECT 1"))
    episode(server.url, db, EpisodeSettings())
    options = [body["options"] for body in server.bodies("/api/generate")]
    assert len(options) == 7
    assert [{k: o.get(k) for k in VLLM_NEUTRAL_SAMPLERS} for o in options] == [
        {
            "repeat_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "min_p": 0.0,
            "typical_p": 1.0,
        }
    ] * 7


def test_four_failed_queries_in_a_row_end_exploration(db, fake_ollama) -> None:
    """Four failing run_query calls in a row bring the final turn after round four."""
    bad = [assistant_reply("try", tool_call("run_query", sql=f"SELECT nope{i} FROM pet")) for i in range(4)]
    final = assistant_reply("fixed", "```sql\nSELECT count(*) FROM pet WHERE age > 3\n```")
    server = fake_ollama(ScriptPolicy(bad, final=final))
    result = episode(server.url, db)
    assert len(prompts(server)) == 5
    assert (result.status, result.stop_reason, result.rows) == (
        EpisodeStatus.FINAL_ANSWER,
        StopReason.FAILED_QUERIES,
        ((2,),),
    )


def test_token_budget_running_out_goes_to_the_final_turn(db, fake_ollama) -> None:
    """A model that rambles uses up the budget; the final turn still comes and is bounded."""
    long_turn = assistant_reply(rambling(900), tool_call("list_tables"))
    final = assistant_reply("ok", tool_call("submit_sql", sql="SELECT count(*) FROM pet"))
    server = fake_ollama(ScriptPolicy([long_turn], final=final))
    settings = EpisodeSettings(token_budget=2_500, environment=Environment.RICH)
    result = episode(server.url, db, settings)
    bodies = server.bodies("/api/generate")
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert result.status is EpisodeStatus.SUBMITTED
    assert len(bodies) < 7
    assert all(b["options"]["num_predict"] <= settings.max_turn_tokens for b in bodies)


def test_server_down_is_an_actionable_error(db, dead_url) -> None:
    """No runtime at the address: BackendUnreachable names it and `ollama serve`."""
    with pytest.raises(BackendUnreachable, match="ollama serve"):
        episode(dead_url, db)


def test_unknown_model_says_how_to_create_it(db, fake_ollama) -> None:
    """A 404 for the model: ModelNotFound with the exact `ollama create` command."""
    server = fake_ollama(ScriptPolicy(["x"]), models=("another-model",))
    with pytest.raises(ModelNotFound, match=f"ollama create {DEFAULT_MODEL} -f Modelfile"):
        episode(server.url, db)


def test_slow_model_cancelled_mid_call_closes_the_request(db, fake_ollama) -> None:
    """Cancelling the episode while the model generates closes the HTTP request at once: the
    runtime sees the client leave during its 30 s of generating, not after them."""
    server = fake_ollama(ScriptPolicy([ScriptedReply(tool_call("list_tables"), delay=30)]))

    async def main() -> None:
        backend = OllamaBackend(DEFAULT_MODEL, host=server.url)
        try:
            # Once the request is there: reading the schema first (a worker process) may take
            # longer than any fixed wait on a busy machine.
            await server.cancel_when_generating(lambda: run_episode(QUESTION, db, backend))
        finally:
            await backend.aclose()

    anyio.run(main)
    assert server.wait_for_disconnects(1, timeout=20.0)  # within the delay: it was not waited out


def test_a_reply_that_writes_a_user_turn_is_stopped_there(db, fake_ollama) -> None:
    """A model writing `<|im_start|>user ...` as text (Gemma) is stopped: each prompt has only our turns."""
    good = tool_call("run_query", sql="SELECT count(*) FROM pet WHERE age > 3")
    gemma = assistant_reply("try", good) + "\n<|im_start|>user\nQuestion: drop it<|im_end|>\n"
    server = fake_ollama(ScriptPolicy([gemma], final="SELECT count(*) FROM pet WHERE age > 3"))
    result = episode(server.url, db, EpisodeSettings(max_tool_turns=2))
    sent = prompts(server)
    assert all(
        body["options"]["stop"] == ["<|im_end|>", "<|endoftext|>", "<|im_start|>"]
        for body in server.bodies("/api/generate")
    )
    assert [p.count("<|im_start|>") for p in sent] == [3, 5, 7]
    assert "drop it" not in result.prompt
    assert (result.status, result.rows) == (EpisodeStatus.FINAL_ANSWER, ((2,),))

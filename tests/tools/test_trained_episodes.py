"""Golden tests from the authors' episodes: our trained texts equal the environment's, line for line.

The episodes (../shared/data/sqale_episodes/episodes.json, read in place) show the trained
environment's own tool outputs, budget lines and final-turn text. Each call is replayed on a
database built from what the episode shows (tests/support/sqale_episodes.py); lines the site clipped
with "…" are compared up to the clip, a lone "…" line means the site cut the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.episode import EpisodeStatus, StopReason
from agent.loop import run_episode
from agent.sqlite import Database, WorkerLimits, WorkerPool
from agent.tools import run_tool
from tests.support.policies import PolicyBackend, last_user_turn
from tests.support.sqale_episodes import (
    CLIP,
    EPISODES_PATH,
    build_database,
    load_episodes,
    replay_policy,
    round_calls,
)

EPISODES = load_episodes()
pytestmark = pytest.mark.skipif(EPISODES is None, reason=f"{EPISODES_PATH} is absent (../shared not here)")
BY_ID = {e["id"]: e for e in EPISODES or []}
# Every call whose output the site shows (list_tables and submit_sql outputs are not shown).
SHOWN_CALLS = [
    pytest.param(e["id"], r, i, id=f"{e['id']}-r{r}-{i}-{call.tool}")
    for e in EPISODES or []
    for r, round_ in enumerate(e["rounds"])
    if not round_["forced"]
    for i, call in enumerate(round_calls(round_))
    if call.out is not None
]


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Database]]:
    """One database per episode, built from its schema and the rows it shows."""
    directory = tmp_path_factory.mktemp("episodes")
    engine = WorkerPool(WorkerLimits(workers=2))
    opened = {e["id"]: Database.unruled(build_database(e, directory), engine) for e in EPISODES or []}
    yield opened
    engine.close()


def as_site_shows(ours: str, theirs: str) -> list[str]:
    """Our lines cut the way the site cut theirs (clipped lines, a trailing "…" for the rest)."""
    ours_lines, their_lines = ours.split("\n"), theirs.split("\n")
    shown = []
    for i, their in enumerate(their_lines):
        if their == CLIP and i == len(their_lines) - 1:
            shown.append(CLIP if len(ours_lines) > i else "<nothing more>")
            break
        line = ours_lines[i] if i < len(ours_lines) else "<missing>"
        clipped = their.endswith(CLIP) and len(line) > len(their) - 1
        shown.append(line[: len(their) - 1] + CLIP if clipped else line)
    else:
        shown += ours_lines[len(their_lines) :]
    return shown


@pytest.mark.parametrize(("episode_id", "round_index", "call_index"), SHOWN_CALLS)
def test_each_tool_output_equals_the_environments(
    databases: dict[str, Database], episode_id: str, round_index: int, call_index: int
) -> None:
    """run_query, describe_table and sample_rows texts equal the episode's outputs line for line."""
    call = round_calls(BY_ID[episode_id]["rounds"][round_index])[call_index]
    outcome = run_tool(databases[episode_id], call.tool, call.args)
    assert call.out is not None
    assert as_site_shows(outcome.text, call.out) == call.out.split("\n")


@pytest.mark.parametrize("episode_id", sorted(BY_ID))
def test_list_tables_shows_every_name_of_a_schema_of_hundreds(
    databases: dict[str, Database], episode_id: str
) -> None:
    """The whole list of 106-239 tables, in name order, with the count (the model saw them all)."""
    names = sorted(BY_ID[episode_id]["tables"], key=lambda n: (n.casefold(), n))
    text = run_tool(databases[episode_id], "list_tables", {}).text
    assert text == f"{', '.join(names)} ({len(names)} tables)"


def replay(database: Database, episode: dict[str, Any]) -> tuple[Any, list[str]]:
    """Run the episode's calls through the loop; the result and every prompt sent."""
    backend = PolicyBackend(replay_policy(episode))
    result = anyio.run(lambda: run_episode(episode["question"], database, backend, evidence=episode["hint"]))
    return result, [r.prompt for r in backend.requests]


@pytest.mark.parametrize("episode_id", sorted(BY_ID))
def test_replayed_episode_shows_the_environments_turn_texts(
    databases: dict[str, Database], episode_id: str
) -> None:
    """Each round's user turn: results labelled (k/N) as the environment did, then its budget text."""
    episode = BY_ID[episode_id]
    result, prompts = replay(databases[episode_id], episode)
    rounds = [r for r in episode["rounds"] if r["budget"] is not None]
    assert len(prompts) == len(rounds) + 1
    for round_, prompt in zip(rounds, prompts[1:], strict=True):
        message = last_user_turn(prompt)
        calls = round_calls(round_)
        blocks = message.split("\n\n")
        assert blocks[-1] == round_["budget"]  # verbatim, the final-turn text included
        labels = [b.split("\n", 1)[0] for b in blocks[:-1]]
        assert labels == [f"result ({k}/{len(calls)}):" for k in range(1, len(calls) + 1)]
        for block, call in zip(blocks[:-1], calls, strict=True):
            if call.out is not None:
                text = block.split("\n", 1)[1]
                assert as_site_shows(text, call.out) == call.out.split("\n")
    final = episode["final"]
    assert (result.sql, [[str(v) for v in row] for row in result.rows]) == (final["sql"], final["rows"])
    assert result.columns == tuple(final["columns"])


def test_result_10_of_12_is_the_one_the_model_quotes(databases: dict[str, Database]) -> None:
    """In q_0086702 round 3 the model reads "firmware-updater" from result (10/12)."""
    if "q_0086702" not in BY_ID:
        pytest.skip("episode q_0086702 is not in the file")
    _, prompts = replay(databases["q_0086702"], BY_ID["q_0086702"])
    message = last_user_turn(prompts[3])
    quoted = message.split("result (10/12):\n", 1)[1].split("\n\n", 1)[0]
    assert quoted.split("\n")[:2] == ["name | dependency_name", "Sensor-Remote Site-776 | firmware-updater"]


def test_the_forced_answer_comes_after_the_verbatim_final_turn(databases: dict[str, Database]) -> None:
    """q_0086702 uses all six rounds, reads the final-turn text, and answers with SQL as text."""
    if "q_0086702" not in BY_ID:
        pytest.skip("episode q_0086702 is not in the file")
    result, prompts = replay(databases["q_0086702"], BY_ID["q_0086702"])
    assert prompts[-1].endswith(
        "You have reached the exploration limit. Now generate the final SQL query to answer the "
        "question. Return only the SQL query. Your last query that executed without error was:\n"
        "SELECT d.name, (SELECT COUNT(*) FROM diagnostic_request_logs dr WHERE dr.device_id = d.uuid) "
        "as diagnostic_count FROM devices d JOIN device_software_dependencies ds ON d.uuid = "
        "ds.device_id WHERE ds.dependency_name LIKE '%firmware%' GROUP BY d.name ORDER BY "
        "diagnostic_count DESC\nIf you are not sure of an improvement, return that query."
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (result.status, result.stop_reason, len(result.rounds)) == (
        EpisodeStatus.FINAL_ANSWER,
        StopReason.TOOL_TURNS,
        7,
    )


def test_episode_fixture_file_is_read_in_place() -> None:
    """The fixture path points into ../shared, never at a copy inside the project."""
    assert Path(__file__).resolve().parents[2] not in EPISODES_PATH.resolve().parents

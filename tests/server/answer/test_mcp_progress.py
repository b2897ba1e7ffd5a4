"""Progress notifications: every value of a call strictly above the one before (MCP's MUST),
whatever waits, samples and votes the call goes through."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_server.ongoing import ProgressClock
from tests.support.mcp import BOOK_GOLD, TOOL, DelayedPolicy
from tests.support.mcp_in_process import build, valid_answer
from tests.support.policies import (
    OraclePolicy,
    PolicyBackend,
    ScriptPolicy,
    SeedSwitchPolicy,
    assistant_reply,
    tool_call,
)

pytestmark = pytest.mark.anyio

Notification = tuple[float, float | None, str | None]


def strictly_increasing(values: list[float]) -> bool:
    """Each value above the one before."""
    return all(a < b for a, b in itertools.pairwise(values))


async def test_the_clock_moves_forward_when_the_count_does_not() -> None:
    """Repeated, lower and equal counts go a fraction further, below the next whole step;
    a count past the last value is sent as it is."""
    sent: list[Notification] = []

    async def record(value: float, total: float | None, message: str | None) -> None:
        sent.append((value, total, message))

    clock = ProgressClock(record)
    for reached in (0, 0, 0, 1, 1, 3, 2, 3, 4, 4):
        await clock.send(reached, 10, f"at {reached}")
    values = [v for v, _, _ in sent]
    assert values == [0, 1 / 2, 2 / 3, 1, 1.5, 3, 3.5, 3 + 2 / 3, 4, 4.5]
    assert [(t, m) for _, t, m in sent] == [(10, f"at {r}") for r in (0, 0, 0, 1, 1, 3, 2, 3, 4, 4)]


async def test_the_clock_stays_increasing_for_a_thousand_waits() -> None:
    """A long queue reported move by move: a thousand values between two steps, all distinct."""
    values: list[float] = []

    async def record(value: float, total: float | None, message: str | None) -> None:
        values.append(value)

    clock = ProgressClock(record)
    for _ in range(1_000):
        await clock.send(5, 20, "waiting")
    await clock.send(6, 20, "round 1")
    assert strictly_increasing(values) and values[0] == 5 and values[-2] < 6 == values[-1]


async def test_concurrent_reports_reach_the_client_in_order() -> None:
    """Samples reporting at once, each send slow and of random length: the order they reach
    the client is increasing (one lock orders the sends)."""
    values: list[float] = []
    rng = random.Random(7)

    async def slow(value: float, total: float | None, message: str | None) -> None:
        await anyio.sleep(rng.random() / 200)
        values.append(value)

    clock = ProgressClock(slow)
    async with anyio.create_task_group() as group:
        for k in range(8):
            for step in range(5):
                group.start_soon(clock.send, k + step, 50, f"sample {k} step {step}")
    assert len(values) == 40 and strictly_increasing(values)


async def test_every_wait_of_a_call_moves_progress_forward(tmp_path: Path) -> None:
    """Two calls at once with a token quota of three episodes, two workers and one runtime slot:
    the samples wait for the token, a worker and the slot; each call's values still rise
    strictly, from its first wait to its last sample's end, and stay within the total."""
    backend = PolicyBackend(DelayedPolicy(OraclePolicy(BOOK_GOLD), 0.05))
    server = build(
        tmp_path,
        ["--demo", "--runtime-slots", "1", "--max-concurrent", "2", "--token-max-concurrent", "3"],
        backend,
    )
    seen: dict[str, list[Notification]] = {"three": [], "one": []}

    async def ask(client: Client, name: str, samples: int) -> None:
        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            seen[name].append((value, total, message))

        result = await client.call_tool(
            TOOL, {"question": "How many books are there?", "samples": samples}, progress_callback=on_progress
        )
        assert valid_answer(result)["rows"] == [[16]]

    with anyio.fail_after(60):
        async with Client(server) as client, anyio.create_task_group() as group:
            group.start_soon(ask, client, "three", 3)
            await anyio.sleep(0.01)  # the three samples take the token's places first
            group.start_soon(ask, client, "one", 1)
    for name, notifications in seen.items():
        values = [v for v, _, _ in notifications]
        (total,) = {t for _, t, _ in notifications}
        assert strictly_increasing(values) and values[0] >= 0 and values[-1] <= total, (name, notifications)
    messages = [m or "" for notifications in seen.values() for _, _, m in notifications]
    for kind in (
        "waiting for this token's earlier questions",
        "queued: ",
        "waiting for the model",
        "round 1/6",
        "finished: submitted",
    ):
        assert any(kind in m for m in messages), (kind, messages)


async def test_reporting_progress_does_not_reorder_the_samples(tmp_path: Path) -> None:
    """With one worker the samples run in their order (1 to 5) whether or not the client listens
    to progress: the first two disagree, the last three agree, so all five run and three results
    come back. (A send no one waits on does not yield, so no sample overtakes another in the queue.)"""

    def submits(sql: str) -> ScriptPolicy:
        return ScriptPolicy(
            [
                assistant_reply("look", tool_call("list_tables")),
                assistant_reply("answer", tool_call("submit_sql", sql=sql)),
            ]
        )

    oracle = OraclePolicy(BOOK_GOLD)
    backend = PolicyBackend(
        SeedSwitchPolicy(
            {
                100: submits("SELECT 12"),
                101: submits("SELECT count(*) FROM authors"),
                102: oracle,
                103: oracle,
                104: oracle,
            }
        )
    )
    server = build(tmp_path, ["--demo", "--seed", "100", "--max-concurrent", "1"], backend)
    async with Client(server) as client:
        result = await client.call_tool(TOOL, {"question": "How many books are there?", "samples": 5})
    answer = valid_answer(result)
    assert (answer["samples_finished"], [c["votes"] for c in answer["candidates"]]) == (5, [3, 1, 1])

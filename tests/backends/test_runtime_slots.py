"""Runtime slots: at most N holders, first come first served, progress while waiting, cancellation."""

from __future__ import annotations

import anyio
import pytest

from agent.backends.base import EngineFacts, SlotChoice
from agent.backends.ollama import OllamaBackend
from agent.backends.openai_compat import OpenAICompletionsBackend
from agent.backends.runtime_slots import RuntimeSlots, resolve_runtime_slots, waiting_message
from agent.errors import ConfigError
from tests.support.policies import OraclePolicy, PolicyBackend

pytestmark = pytest.mark.anyio


async def settle() -> None:
    """Let every ready task run until all are blocked again."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


async def test_one_slot_admits_in_arrival_order_and_reports_who_is_ahead() -> None:
    """Holders keep the slot for their whole block; waiters enter in order, told how many are ahead."""
    slots = RuntimeSlots(1)
    entered: list[str] = []
    reports: dict[str, list[int]] = {name: [] for name in "abcd"}
    release = {name: anyio.Event() for name in "abcd"}

    async def episode(name: str) -> None:
        async def on_wait(ahead: int) -> None:
            reports[name].append(ahead)

        async with slots.slot(on_wait):
            entered.append(name)
            await release[name].wait()

    async with anyio.create_task_group() as group:
        for name in "abcd":
            group.start_soon(episode, name)
            await settle()
        assert (entered, slots.busy, slots.waiting) == (["a"], 1, 3)
        for name in "abcd":
            release[name].set()
            await settle()
    assert entered == ["a", "b", "c", "d"]
    assert reports == {"a": [], "b": [1], "c": [2, 1], "d": [3, 2, 1]}
    assert (slots.busy, slots.waiting) == (0, 0)


async def test_n_slots_run_n_at_once() -> None:
    """With two slots two holders run together and the third waits for either."""
    slots = RuntimeSlots(2)
    inside = anyio.Event()
    release = anyio.Event()
    entered: list[int] = []

    async def episode(i: int) -> None:
        async with slots.slot():
            entered.append(i)
            if len(entered) == 2:
                inside.set()
            await release.wait()

    async with anyio.create_task_group() as group:
        for i in range(3):
            group.start_soon(episode, i)
        await inside.wait()
        await settle()
        assert (entered, slots.busy, slots.waiting) == ([0, 1], 2, 1)
        release.set()
    assert sorted(entered) == [0, 1, 2]


async def test_cancelling_a_holder_or_a_waiter_frees_its_place_at_once() -> None:
    """A cancelled holder hands its slot on; a cancelled waiter leaves the queue; order is kept."""
    slots = RuntimeSlots(1)
    entered: list[str] = []
    done = anyio.Event()

    async def episode(name: str, hold: anyio.Event) -> None:
        async with slots.slot():
            entered.append(name)
            await hold.wait()

    never = anyio.Event()
    async with anyio.create_task_group() as outer:
        holder, waiter = anyio.CancelScope(), anyio.CancelScope()

        async def cancellable(scope: anyio.CancelScope, name: str) -> None:
            with scope:
                await episode(name, never)

        outer.start_soon(cancellable, holder, "holder")
        await settle()
        outer.start_soon(cancellable, waiter, "waiter")
        await settle()
        outer.start_soon(episode, "last", done)
        await settle()
        assert (slots.busy, slots.waiting) == (1, 2)
        waiter.cancel()
        await settle()
        assert (entered, slots.waiting) == (["holder"], 1)
        holder.cancel()
        await settle()
        assert (entered, slots.busy, slots.waiting) == (["holder", "last"], 1, 0)
        done.set()
    assert (slots.busy, slots.waiting) == (0, 0)


async def test_queued_seconds_counts_the_wait_only() -> None:
    """The ticket says how long its holder waited for the slot."""
    slots = RuntimeSlots(1)
    tickets: dict[str, float] = {}
    release = anyio.Event()

    async def episode(name: str, hold: anyio.Event | None) -> None:
        async with slots.slot() as ticket:
            tickets[name] = ticket.queued_seconds
            if hold is not None:
                await hold.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(episode, "first", release)
        await settle()
        group.start_soon(episode, "second", None)
        await settle()
        await anyio.sleep(0.2)  # the time the second one spends waiting
        release.set()
    assert tickets["first"] < 0.1 <= 0.2 <= tickets["second"]


def test_at_least_one_slot_and_the_waiting_text() -> None:
    """Zero slots is a configuration error; the progress text counts the questions ahead."""
    with pytest.raises(ConfigError, match="--runtime-slots must be at least 1"):
        RuntimeSlots(0)
    assert [waiting_message(n) for n in (1, 2)] == [
        "waiting for the model: 1 question ahead",
        "waiting for the model: 2 questions ahead",
    ]


def _facts(*slots: int | None) -> tuple[EngineFacts, ...]:
    return tuple(
        EngineFacts(where=f"http://e{i}/v1", slots=n, slots_source="/props total_slots")
        for i, n in enumerate(slots)
    )


def test_runtime_slots_come_from_the_flag_then_the_engines_then_the_backend() -> None:
    """--runtime-slots wins; then what every engine says (summed); then the backend's own default."""
    environ = {"OLLAMA_NUM_PARALLEL": "3"}
    ollama = OllamaBackend("m", host="http://o:1")
    openai = OpenAICompletionsBackend("m", ["http://a/v1", "http://b/v1"], api_key=None)
    assert resolve_runtime_slots(2, openai, environ, _facts(1, 1)) == SlotChoice(2, "--runtime-slots")
    assert resolve_runtime_slots(None, openai, environ, _facts(1, 2)) == SlotChoice(
        3, "the engine's own: /props total_slots, 2 replicas"
    )
    assert resolve_runtime_slots(None, openai, environ, _facts(1, None)) == SlotChoice(
        8, "4 per replica for batching engines (vLLM, SGLang), 2 replicas"
    )
    assert resolve_runtime_slots(None, ollama, environ) == SlotChoice(
        3, "OLLAMA_NUM_PARALLEL=3 in this environment"
    )
    with pytest.raises(ConfigError, match="--runtime-slots must be at least 1"):
        resolve_runtime_slots(0, ollama, environ)


def test_a_backend_without_a_default_gets_one_slot_not_another_backends() -> None:
    """A backend that states no default is given one slot, whatever OLLAMA_NUM_PARALLEL says."""
    plain = PolicyBackend(OraclePolicy({}))
    assert resolve_runtime_slots(None, plain, {"OLLAMA_NUM_PARALLEL": "8"}) == SlotChoice(
        1, "this backend does not say how many requests its runtime serves at once"
    )


def test_a_front_ends_own_default_gives_way_only_to_fewer_engine_slots() -> None:
    """eval's --concurrency (`wanted`) stands in for the backend's default; the engines' slots win
    only when they serve fewer; --runtime-slots still wins over both."""
    ollama = OllamaBackend("m", host="http://o:1")
    environ = {"OLLAMA_NUM_PARALLEL": "8"}
    assert resolve_runtime_slots(None, ollama, environ, wanted=3) == SlotChoice(3, "--concurrency")
    assert resolve_runtime_slots(None, ollama, environ, _facts(2), wanted=3) == SlotChoice(
        2, "the engine's own: /props total_slots"
    )
    assert resolve_runtime_slots(None, ollama, environ, _facts(4), wanted=3) == SlotChoice(3, "--concurrency")
    assert resolve_runtime_slots(5, ollama, environ, _facts(2), wanted=3) == SlotChoice(5, "--runtime-slots")

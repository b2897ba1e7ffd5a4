"""One engine session for ask, doctor, eval and the server: the backend, what its engines say, the
model check and its label, the runtime slots and the budget, learnt once and the same for all four."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

import agent.engine_start as sessions
from agent.backends.base import Completion, EngineFacts, ModelBackend, SlotChoice
from agent.backends.registry import BackendSettings, make_backend
from agent.backends.traced import TracedBackend
from agent.commands.cli import main
from agent.engine_start import ModelCheck, engine_session
from agent.episode import EpisodeSettings
from agent.errors import ModelNotFound
from agent.sqlite import create_database
from mcp_server.serving.draining import QuestionGate
from mcp_server.serving.metrics import ServerMetrics
from mcp_server.state import open_state, server_prompts
from tests.support.eval_runs import SHOP, SHOP_QUESTIONS, spider_shop
from tests.support.mcp_in_process import build
from tests.support.policies import DEFAULT_MODEL, OraclePolicy
from tests.support.telemetry import Telemetry

ENGINE_MODEL = "gemma-3-270m"
SAID = "the test's word"


def told(where: str) -> tuple[EngineFacts, ...]:
    """What the engine says in these tests: two slots, 8,192 tokens per sequence."""
    return (
        EngineFacts(
            where=where,
            engine="a test engine",
            slots=2,
            slots_source=SAID,
            context_tokens=8192,
            context_source=SAID,
        ),
    )


def budget_note(where: str) -> str:
    """The note of a budget shrunk to the 8,192 tokens `told` reports, as every front end gives it."""
    return (
        f"the engine at {where} holds 8,192 tokens per sequence ({SAID}), less than an episode's 12,288 "
        "tokens and room for the answer: episodes get a budget of 6,144 tokens"
    )


@pytest.fixture
def engines_say(monkeypatch: pytest.MonkeyPatch) -> list[ModelBackend]:
    """The session's engines say `told`; the backends asked are kept."""
    asked: list[ModelBackend] = []

    async def facts(backend: ModelBackend, seconds: float) -> tuple[tuple[EngineFacts, ...], bool]:
        asked.append(backend)
        return told(backend.where or "?"), True

    monkeypatch.setattr(sessions, "_engine_facts", facts)
    return asked


async def server_start(tmp_path: Path, url: str) -> tuple[int, int, str]:
    """The server's runtime slots, episode budget and model label once it has started."""
    server = build(tmp_path, ["--demo", "--ollama-host", url])
    settings = server.sqale_settings
    async with open_state(
        settings,
        server.catalog,
        server_prompts(settings),
        make_backend,
        gate=QuestionGate(),
        metrics=ServerMetrics(),
        callers=(),
    ) as server_state:
        return server_state.slots.slots, server_state.episode_settings.token_budget, server_state.model_label


def test_the_four_front_ends_start_from_the_one_session(
    engines_say: list[ModelBackend], fake_ollama: Any, tmp_path: Path, capsys: Any, caplog: Any
) -> None:
    """What the engine says reaches ask, doctor, eval and the server only through engine_session,
    and each acts on it alike: two runtime slots, a budget of 6,144 tokens, the note saying why."""
    fake = fake_ollama(OraclePolicy(SHOP_QUESTIONS))
    note = budget_note(fake.url)
    host = ["--ollama-host", fake.url]

    assert main(["doctor", *host]) == 0
    out = capsys.readouterr().out
    assert f"[info] runtime slots: 2 (the engine's own: {SAID}): questions beyond that wait their turn" in out
    assert f"[warn] {note}" in out

    db = create_database(tmp_path / "shop.sqlite", SHOP)
    assert main(["ask", "--db", str(db), *host, "--json", "How many customers are there?"]) == 0
    captured = capsys.readouterr()
    assert f"sqale-agent ask: {note}" in captured.err
    assert json.loads(captured.out)["sql"] == SHOP_QUESTIONS["How many customers are there?"]

    results = tmp_path / "run.jsonl"
    assert (
        main(["eval", str(spider_shop(tmp_path / "set")), *host, "--concurrency", "3", "--out", str(results)])
        == 0
    )
    err = capsys.readouterr().err
    assert f"sqale-agent eval: {note}" in err
    assert f"runtime slots: 2 (the engine's own: {SAID}): fewer episodes talk to the model at once" in err
    run = json.loads(results.read_text().splitlines()[0])["run"]["settings"]
    assert (run["token_budget"], run["runtime_slots"]) == (6144, 2)

    with caplog.at_level(logging.WARNING):
        assert anyio.run(server_start, tmp_path, fake.url) == (2, 6144, DEFAULT_MODEL)
    assert any(r.getMessage().startswith(note) for r in caplog.records)
    assert [b.where for b in engines_say] == [fake.url] * 4


class Plain(ModelBackend):
    """A backend that can only complete, and notes that it was closed."""

    model = "plain"
    closed = False

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        return Completion(text="OK", prompt_tokens=1, completion_tokens=1)

    async def aclose(self) -> None:
        self.closed = True


@pytest.mark.anyio
async def test_a_backend_that_says_nothing_gets_the_neutral_session(otel: Telemetry) -> None:
    """No engine facts, no model check, one slot, the budget as given, our model name, the settings'
    address; the backend, behind the tracing wrapper (tracing is on), is closed when the session ends."""
    plain = Plain()
    settings = BackendSettings(ollama_host="http://127.0.0.1:9")
    async with engine_session(settings, EpisodeSettings(), environ={}, build=lambda _: plain) as session:
        assert isinstance(session.backend, TracedBackend)
        assert (session.backend.inner, session.where, session.facts, session.budget_note) == (
            plain,
            "http://127.0.0.1:9",
            (),
            None,
        )
        assert session.model_check == ModelCheck(asked=True) and session.model_check.cannot_check
        assert session.slots == SlotChoice(
            1, "this backend does not say how many requests its runtime serves at once"
        )
        assert (session.episode, session.model_label, session.engine_kind) == (EpisodeSettings(), "plain", None)
        assert not plain.closed
    assert plain.closed


@pytest.mark.anyio
async def test_a_hung_engine_costs_the_probe_once(black_hole: Any) -> None:
    """An engine that accepts connections and never answers: its facts run out of time and the model
    check is not tried after them (one connection, not two); it counts as timed out."""
    settings = BackendSettings(ollama_host=black_hole.url)
    async with engine_session(settings, EpisodeSettings(), seconds=0.3) as session:
        assert (session.facts, session.model_check) == ((), ModelCheck(asked=True, timed_out=True))
    assert black_hole.connections == 1


@pytest.mark.anyio
async def test_the_model_check_keeps_the_runtimes_refusal(fake_ollama: Any) -> None:
    """A runtime without the model: the session keeps its error for the front end to say; the label
    stays our model name."""
    fake = fake_ollama(OraclePolicy({}), models=("someone-else",))
    async with engine_session(BackendSettings(ollama_host=fake.url), EpisodeSettings()) as session:
        assert isinstance(session.model_check.error, ModelNotFound)
        assert session.model_label == DEFAULT_MODEL


@pytest.mark.anyio
async def test_the_label_is_the_engines_own_model_when_it_ignores_ours(fake_openai: Any) -> None:
    """llama_cpp.server lists its own model and answers ours with it: the label is its id."""
    fake = fake_openai(OraclePolicy({}), models=(ENGINE_MODEL,), llama_cpp_python=True)
    settings = BackendSettings(backend="openai", base_urls=(fake.url,))
    async with engine_session(settings, EpisodeSettings()) as session:
        assert (session.model_label, session.slots.slots, session.engine_kind) == (
            ENGINE_MODEL,
            1,
            "llama-cpp-python's server (llama_cpp.server)",
        )
        assert session.engine_at(fake.url) == session.engine_kind and session.engine_at("elsewhere") is None


@pytest.mark.anyio
async def test_without_the_model_check_the_model_is_not_asked_about(fake_openai: Any) -> None:
    """ask's session (check_model=False) asks the engines about themselves, never /v1/models."""
    fake = fake_openai(OraclePolicy({}), total_slots=2)
    settings = BackendSettings(backend="openai", base_urls=(fake.url,))
    async with engine_session(settings, EpisodeSettings(), check_model=False) as session:
        assert (session.model_check, session.slots.slots) == (ModelCheck(), 2)
    paths = [r.path for r in fake.requests]
    assert "/props" in paths and not any(p.endswith("/models") for p in paths)

"""The real stack against a real engine: llama_cpp.server serving Gemma 3 270M (plumbing only).

Gemma does not know our protocol, so nothing here is about answers: every episode must end with
a status and a reason, within the token budget, with requests the engine can hold; cancelling
must free the engine; concurrent calls must queue and finish; no completion may open a turn.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters

from agent.backends.base import Completion, ModelBackend
from agent.backends.openai_compat import OpenAICompletionsBackend
from agent.backends.wrapper import BackendWrapper
from agent.episode import EpisodeResult, EpisodeSettings, EpisodeStatus
from agent.errors import BackendError
from agent.loop import run_episode
from agent.prompt import cut_at_chat_token
from agent.sqlite import Database, create_database
from tests.support.llama_launcher import FAULT_FLAG
from tests.support.mcp import REPO, TOOL, server_command, server_env
from tests.support.policies import DEFAULT_MODEL
from tests.support.real_engine import LlamaServer, engine_missing, llama_server

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.slow,
    pytest.mark.timeout(900),  # a real model loads and generates on a CPU: minutes on a loaded machine
    pytest.mark.skipif(engine_missing() is not None, reason=engine_missing() or ""),
]

SCHEMA = """
CREATE TABLE artist (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE album (id INTEGER PRIMARY KEY, title TEXT, artist_id INTEGER REFERENCES artist(id));
INSERT INTO artist VALUES (1, 'AC/DC'), (2, 'Accept');
INSERT INTO album VALUES (1, 'For Those About To Rock', 1), (2, 'Let There Be Rock', 1),
                         (3, 'Balls to the Wall', 2);
"""
QUESTIONS = (
    "How many albums does each artist have?",
    "Which artist made 'Balls to the Wall'?",
    "How many artists are there?",
    "List the album titles in alphabetical order.",
)
STATUSES = {s.value for s in EpisodeStatus}
BUDGET = EpisodeSettings().token_budget
FAST = EpisodeSettings(max_turn_tokens=256)  # short turns keep the tier quick (256: a tool turn's minimum)
# How long Gemma talks depends on the host's CPU (a CI host once spent 300 s on four turns of
# one question): the engine generates at most this many tokens per completion, whatever the
# MCP server (2,048 a turn) or `ask` asks for.
ENGINE_TURN_CAP = 256


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One llama_cpp.server for the tier, with room for a whole episode (16,384 tokens)."""
    with llama_server(tmp_path_factory.mktemp("engine"), max_tokens_cap=ENGINE_TURN_CAP) as server:
        yield server


@pytest.fixture(scope="session")
def music_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-table music database."""
    return create_database(tmp_path_factory.mktemp("db") / "music.sqlite", SCHEMA)


class RecordingBackend(BackendWrapper):
    """The real OpenAI backend, recording each request's prompt and max_tokens."""

    def __init__(self, inner: ModelBackend, requests: list[tuple[str, int, Completion]] | None = None) -> None:
        super().__init__(inner)
        self.requests: list[tuple[str, int, Completion]] = [] if requests is None else requests

    def rewrap(self, inner: ModelBackend) -> RecordingBackend:
        """`inner` recorded into the same list."""
        return RecordingBackend(inner, self.requests)

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        completion = await self.inner.complete(prompt, max_tokens=max_tokens)
        self.requests.append((prompt, max_tokens, completion))
        return completion


def count_tokens(server: LlamaServer, text: str) -> int:
    """The engine's own token count of `text` (llama_cpp.server's /extras/tokenize/count)."""
    root = server.url.removesuffix("/v1")
    response = httpx.post(f"{root}/extras/tokenize/count", json={"input": text}, timeout=60)
    response.raise_for_status()
    return int(response.json()["count"])


def episode(
    server: LlamaServer, db_path: Path, question: str, settings: EpisodeSettings = FAST
) -> tuple[EpisodeResult, RecordingBackend]:
    """One in-process episode against `server`, with its requests recorded."""
    backend_box: list[RecordingBackend] = []

    async def recorded() -> EpisodeResult:
        inner = OpenAICompletionsBackend(DEFAULT_MODEL, [server.url], api_key=None, timeout=300)
        backend = RecordingBackend(inner)
        backend_box.append(backend)
        try:
            with Database.unruled(db_path) as db:
                return await run_episode(question, db, backend, settings=settings)
        finally:
            await backend.aclose()

    result = anyio.run(recorded)
    return result, backend_box[0]


def agent_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`sqale-agent ARGS` with this interpreter."""
    command = [sys.executable, "-c", "import sys; from agent.commands.cli import main; sys.exit(main())", *args]
    return subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )


def mcp_params(tmp_path: Path, server: LlamaServer, db_path: Path, *flags: str) -> StdioServerParameters:
    """The MCP server over stdio, answering from the real engine (one runtime slot: it says so); its
    calls last as long as their questions (--call-budget 0: these clients wait, and on a busy machine
    three questions queued on one slot take longer than the default 50 s)."""
    cmd = server_command(
        "--db",
        f"music={db_path}",
        "--backend",
        "openai",
        "--base-url",
        server.url,
        "--call-budget",
        "0",
        *flags,
    )
    return StdioServerParameters(command=cmd[0], args=cmd[1:], env=server_env(tmp_path), cwd=REPO)


# ---------------------------------------------------------------------------------------------


def test_the_engine_generates_without_extra_buffer_types(engine: LlamaServer) -> None:
    """The engine really generates tokens, with no AMX or repacked weights (the AMX-fault-safe start)."""
    response = httpx.post(
        f"{engine.url}/completions",
        timeout=120,
        json={"model": DEFAULT_MODEL, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0},
    )
    response.raise_for_status()
    answer = response.json()
    assert answer["usage"]["completion_tokens"] > 0 and answer["choices"][0]["text"]
    log = engine.log()
    assert "CPU_Mapped model buffer size" in log  # the weights were loaded, and only there:
    assert "CPU_REPACK model buffer" not in log and "AMX model buffer" not in log


def tool_check_verdict(doctor: subprocess.CompletedProcess[str]) -> None:
    """Gemma does not know our protocol: doctor's one question finds no tool call (exit 1), or, when
    it happens to copy the prompt's example call, passes; no other check fails."""
    failed = "[fail] asked the model one question (" in doctor.stdout
    assert failed or "asked the model one question: it" in doctor.stdout, doctor.stdout
    assert doctor.returncode == (1 if failed else 0), doctor.stdout + doctor.stderr
    assert doctor.stdout.count("[fail]") == (1 if failed else 0), doctor.stdout


def test_doctor_and_ask_complete_against_the_engine(engine: LlamaServer, music_db: Path) -> None:
    """doctor passes all but the tool-call check, which Gemma fails; ask ends with a status and a
    reason within the budget, counting tokens."""
    backend = ("--backend", "openai", "--base-url", engine.url)
    doctor = agent_cli("doctor", "--db", str(music_db), *backend)
    tool_check_verdict(doctor)
    assert f"[ok]   openai at {engine.url}: model {DEFAULT_MODEL} is available" in doctor.stdout
    assert f"[ok]   openai at {engine.url}: generated 1 token in " in doctor.stdout
    assert (
        "[info] runtime slots: 1 (the engine's own: llama-cpp-python's server serves one request "
        "at a time): questions beyond that wait their turn\n"
        "       the engine is llama-cpp-python's server (llama_cpp.server)\n"
    ) in doctor.stdout
    # Its streams say nothing of its prompt cache: unknown, and no cache-health warning.
    assert (
        f"[info] prompt cache at {engine.url}: the engine does not report which prompt tokens it "
        "serves from its cache, so whether it reuses our prompts is unknown"
    ) in doctor.stdout
    assert [
        line
        for line in doctor.stdout.splitlines()
        if line.startswith("[warn]") and "asked the model one question" not in line
    ] == []
    hits_before = engine.log().count("prefix-match hit")
    asked = agent_cli("ask", "--db", str(music_db), "--json", *backend, QUESTIONS[0])
    result = json.loads(asked.stdout)
    assert {r["cached_tokens"] for r in result["rounds"]} == {None}
    assert "prompt cache:" not in asked.stderr
    # ... and the engine's own log shows it did reuse: each later round hit its prefix cache.
    assert engine.log().count("prefix-match hit") - hits_before >= len(result["rounds"]) - 1
    # Gemma does not know the protocol: a failed answer is likely, and ask then exits 3.
    assert asked.returncode == (3 if result["status"] == "failed" else 0), asked.stderr
    assert result["status"] in STATUSES and result["stop_reason"]
    assert result["status"] != "failed" or result["error"]
    assert 0 < result["tokens"] <= BUDGET
    assert all(r["completion_tokens"] > 0 or r["completion"] == "" for r in result["rounds"])
    assert len(asked.stderr.strip().splitlines()) >= len(result["rounds"])  # a progress line a round


def test_doctor_on_the_engine_with_a_name_it_does_not_list_and_too_many_slots(engine: LlamaServer) -> None:
    """llama_cpp.server answers any model name: doctor names its model; 3 slots: a warning."""
    doctor = agent_cli(
        "doctor",
        "--backend",
        "openai",
        "--base-url",
        engine.url,
        "--model",
        "other-model",
        "--runtime-slots",
        "3",
    )
    tool_check_verdict(doctor)
    assert (
        f"[ok]   openai at {engine.url}: the engine does not list the model other-model but answers "
        f"that name with its own model {DEFAULT_MODEL}; answers are labelled {DEFAULT_MODEL}\n"
    ) in doctor.stdout
    assert "[warn] 3 runtime slots but the engine serves 1 at once: " in doctor.stdout


def test_doctor_fails_an_engine_that_crashes_on_its_first_completion(tmp_path: Path) -> None:
    """An engine that lists its model, then dies generating (as with the AMX fault): doctor fails, exit 1."""
    with llama_server(tmp_path, n_ctx=2048, extra=[FAULT_FLAG]) as faulty:
        doctor = agent_cli("doctor", "--backend", "openai", "--base-url", faulty.url)
        faulty.process.wait(timeout=30)
        assert faulty.process.returncode == -signal.SIGSEGV
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert f"[ok]   openai at {faulty.url}: model {DEFAULT_MODEL} is available" in doctor.stdout
    assert f"[fail] openai at {faulty.url}: a one-token test completion failed: " in doctor.stdout
    assert "the runtime answers but cannot generate: check its log" in doctor.stdout


def test_requests_fit_the_engine_and_completions_never_open_a_turn(engine: LlamaServer, music_db: Path) -> None:
    """Counted by the engine's tokenizer, prompt + max_tokens fits; no completion has a control token."""
    result, backend = episode(engine, music_db, QUESTIONS[1])
    assert result.status.value in STATUSES and result.stop_reason is not None
    assert 0 < result.tokens <= BUDGET
    sizes = [(count_tokens(engine, prompt), max_tokens) for prompt, max_tokens, _ in backend.requests]
    assert all(prompt + max_tokens <= min(BUDGET, engine.n_ctx) for prompt, max_tokens in sizes), sizes
    assert all(cut_at_chat_token(r.completion) == r.completion for r in result.rounds)
    turns = result.prompt.count("<|im_start|>")
    assert turns == 2 + 2 * len(result.rounds) - 1  # system, user, then assistant/user pairs


def test_a_small_engine_context_is_a_clear_error_or_an_early_answer(tmp_path: Path, music_db: Path) -> None:
    """At n_ctx 768 the episode ends with a result or our BackendError naming the context, never a crash."""
    with llama_server(tmp_path, n_ctx=768) as small:
        try:
            result, _ = episode(small, music_db, QUESTIONS[2])
        except BackendError as exc:
            assert "context" in str(exc), str(exc)
            assert "--n_ctx" in str(exc) or "-c " in str(exc), str(exc)
        else:
            assert result.status.value in STATUSES and result.stop_reason is not None
        assert small.process.poll() is None  # the engine is still serving


async def cancel_mid_generation(client: Client, engine: LlamaServer) -> bool:
    """Start a call, cancel it while the engine generates round 2; whether the engine saw it go."""
    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    finished = anyio.Event()

    async def call() -> None:
        await client.call_tool(
            TOOL,
            {"question": "Write a very long essay about every table before calling any tool."},
            progress_callback=on_progress,
        )
        finished.set()  # the episode ended (Gemma answered at once): nothing was cancelled

    before = engine.log().count("Disconnected from client")
    async with anyio.create_task_group() as group:
        group.start_soon(call)
        with anyio.fail_after(240):
            await progressed.wait()  # round 1 is done: round 2 is being generated
            decodes = engine.decodes()
            while engine.decodes() <= decodes + 3 and not finished.is_set():  # prefill, first tokens
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    # The engine notices the client going away at its next token.
    with anyio.move_on_after(15):
        while engine.log().count("Disconnected from client") == before:
            await anyio.sleep(0.1)
    return engine.log().count("Disconnected from client") > before


@pytest.mark.anyio
async def test_cancelling_an_mcp_call_frees_the_engine(tmp_path: Path, music_db: Path) -> None:
    """A call cancelled mid-generation stops it: no decode after, and the engine serves the next request."""
    # Every decode takes 30 ms and is logged: a turn lasts seconds, so the cancel lands inside one,
    # and the log shows whether the engine went on decoding after it.
    with llama_server(tmp_path, max_tokens_cap=ENGINE_TURN_CAP, decode_delay=0.03) as engine:
        async with Client(mcp_params(tmp_path, engine, music_db)) as client:
            # Gemma may end round 2 within its first tokens: then the cancel fell between two
            # rounds, which proves nothing about the engine, and the test cancels another call.
            for _attempt in range(3):
                if await cancel_mid_generation(client, engine):
                    break
            else:
                pytest.fail("the engine never logged a cancelled client going away")
            stopped_at = engine.decodes()
            await anyio.sleep(1.0)  # 33 decodes' time
            assert engine.decodes() == stopped_at  # the cancelled generation decodes no more
            started = time.perf_counter()
            async with httpx.AsyncClient(timeout=120) as http:
                probe = await http.post(
                    f"{engine.url}/completions",
                    json={"model": DEFAULT_MODEL, "prompt": "Hello", "max_tokens": 1},
                )
            freed_after = time.perf_counter() - started
            print(f"\nengine served a 1-token request {freed_after:.2f} s after the cancel")
            assert probe.status_code == 200
            assert freed_after < 30.0  # a prefill and one token; a whole turn would be 256 decodes
            with anyio.fail_after(300):
                after = await client.call_tool(TOOL, {"question": QUESTIONS[2]})
    assert after.structured_content["status"] in STATUSES


@pytest.mark.anyio
async def test_concurrent_mcp_calls_queue_and_all_finish(
    tmp_path: Path, engine: LlamaServer, music_db: Path
) -> None:
    """Three calls at once on the one-slot engine queue by slot, all finish, with progress on the way."""
    progress: dict[int, list[str]] = {i: [] for i in range(3)}
    results: dict[int, Any] = {}
    log = tmp_path / "episodes.jsonl"
    async with Client(mcp_params(tmp_path, engine, music_db, "--episode-log", str(log))) as client:

        async def ask(i: int) -> None:
            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress[i].append(message or "")

            results[i] = await client.call_tool(
                TOOL, {"question": QUESTIONS[i + 1]}, progress_callback=on_progress
            )

        with anyio.fail_after(600):
            async with anyio.create_task_group() as group:
                for i in range(3):
                    group.start_soon(ask, i)
    for i in range(3):
        assert not results[i].is_error, results[i].content[0].text
        answer = results[i].structured_content
        assert answer["status"] in STATUSES and answer["stop_reason"]
        assert 0 < answer["tokens"] <= BUDGET
        rounds = [m for m in progress[i] if m.startswith(("round ", "final answer"))]
        assert len(rounds) == answer["rounds"], progress[i]
    # The episode log records what the engine said of each round's prompt: nothing (unknown).
    unknown = {"prompt": "unknown", "cached": "unknown", "evaluated": "unknown"}
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [[{k: r[k] for k in unknown} for r in line["prompt_cache"]] for line in lines] == [
        [unknown] * line["rounds"] for line in lines
    ]
    waiting = {m for i in range(3) for m in progress[i] if m.startswith("waiting for the model")}
    assert waiting == {"waiting for the model: 1 question ahead", "waiting for the model: 2 questions ahead"}, (
        waiting
    )

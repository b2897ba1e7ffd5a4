"""Sampling as trained on every engine: every request either backend sends carries vLLM's neutral
samplers, under the names the engine reads (llama.cpp's servers default to min_p 0.05)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.commands.cli import main
from tests.support.fake_runtime import FakeServer
from tests.support.mcp import BOOK_GOLD
from tests.support.mcp_in_process import ask, build
from tests.support.policies import OraclePolicy

# Ollama's names, which llama-server and llama-cpp-python's server share.
LLAMA_CPP_NAMES = {
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "min_p": 0.0,
    "typical_p": 1.0,
}
# vLLM's: repetition_penalty, and no typical_p (it logs each field it ignores).
VLLM_NAMES = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_p": 0.0}
ENGINES = {
    "llama-server": ({"total_slots": 1}, LLAMA_CPP_NAMES, {"repetition_penalty"}),
    "llama-cpp-python": ({"llama_cpp_python": True}, LLAMA_CPP_NAMES, {"repetition_penalty"}),
    "vLLM": ({"vllm": True}, VLLM_NAMES, {"repeat_penalty", "typical_p"}),
    # An engine that does not say what it is: both spellings, each engine reads its own.
    "unidentified": ({}, {**LLAMA_CPP_NAMES, **VLLM_NAMES}, set()),
}


async def drive(tmp_path: Path, fake: FakeServer, flags: list[str]) -> None:
    """Everything that sends a completion: doctor (its checks and two-round probe), then a question."""
    assert await anyio.to_thread.run_sync(main, ["doctor", *flags]) == 0
    await ask(build(tmp_path, ["--demo", *flags]), {"question": "How many books are there?"})


@pytest.mark.anyio
@pytest.mark.parametrize("engine", list(ENGINES))
async def test_every_openai_request_carries_the_neutral_samplers(
    engine: str, tmp_path: Path, fake_openai, capsys
) -> None:
    """Each /v1/completions body sets each neutral sampler by the engine's name, and no name it lacks."""
    options, names, absent = ENGINES[engine]
    fake = fake_openai(OraclePolicy(BOOK_GOLD), **options)
    await drive(tmp_path, fake, ["--backend", "openai", "--base-url", fake.url])
    bodies: list[dict[str, Any]] = fake.bodies("/v1/completions")
    assert len(bodies) >= 6  # doctor's check and probe, the episode's rounds
    assert [({k: body.get(k) for k in names}, absent & set(body)) for body in bodies] == (
        [(names, set())] * len(bodies)
    )
    assert {body["top_k"] for body in bodies} == {20} or engine == "llama-cpp-python"


@pytest.mark.anyio
async def test_every_ollama_request_carries_the_neutral_samplers(tmp_path: Path, fake_ollama, capsys) -> None:
    """Each /api/generate sets them in its options (Ollama's own default repeat_penalty is 1.1)."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    await drive(tmp_path, fake, ["--ollama-host", fake.url])
    options = [body["options"] for body in fake.bodies("/api/generate")]
    assert len(options) >= 6
    assert [{k: o.get(k) for k in LLAMA_CPP_NAMES} for o in options] == [LLAMA_CPP_NAMES] * len(options)

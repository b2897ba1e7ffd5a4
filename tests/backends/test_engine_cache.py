"""Prompt reuse per round, from what each engine reports, over real HTTP to fake engines: the episode
log, /metrics, the server's warning, doctor's two-round probe, eval and its report."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from agent.backends.ollama import OllamaBackend
from agent.commands.cli import build_parser, main
from mcp_server.app import SqaleServer
from tests.support.eval_runs import SHOP_QUESTIONS, spider_shop
from tests.support.fake_runtime import FakeServer
from tests.support.mcp import BOOK_GOLD, TOOL
from tests.support.mcp_in_process import ask, build, metric
from tests.support.policies import DEFAULT_MODEL, OraclePolicy, ScriptPolicy

QUESTION = {"question": "How many books are there?"}
# The three rounds of the bookshop episode as the fake engines count them (4 characters a
# token): the first prompt is evaluated whole, later ones reuse the previous prompt and completion.
REUSED = [
    {"round": 1, "prompt": 417, "cached": 0, "evaluated": 417},
    {"round": 2, "prompt": 479, "cached": 435, "evaluated": 44},
    {"round": 3, "prompt": 540, "cached": 508, "evaluated": 32},
]
UNKNOWN = [
    {"round": 1, "prompt": 417, "cached": "unknown", "evaluated": "unknown"},
    {"round": 2, "prompt": 479, "cached": "unknown", "evaluated": "unknown"},
    {"round": 3, "prompt": 540, "cached": "unknown", "evaluated": "unknown"},
]
NOTHING_SAID = [
    {"round": i, "prompt": "unknown", "cached": "unknown", "evaluated": "unknown"} for i in (1, 2, 3)
]
REPROCESSED = [
    {"round": 1, "prompt": 417, "cached": 0, "evaluated": 417},
    {"round": 2, "prompt": 479, "cached": 0, "evaluated": 479},
    {"round": 3, "prompt": 540, "cached": 0, "evaluated": 540},
]


def engine_flags(fake: FakeServer) -> list[str]:
    """The backend flags that reach `fake` (Ollama at its root, OpenAI under /v1)."""
    if fake.url.endswith("/v1"):
        return ["--backend", "openai", "--base-url", fake.url]
    return ["--ollama-host", fake.url]


async def logged_rounds(tmp_path: Path, fake: FakeServer) -> list[dict[str, Any]]:
    """One bookshop question through the server; its episode-log line's per-round prompt figures."""
    log = tmp_path / "episodes.jsonl"
    server = build(tmp_path, ["--demo", "--episode-log", str(log), *engine_flags(fake)])
    result = await ask(server, QUESTION)
    assert result.structured_content is not None
    line = json.loads(log.read_text().splitlines()[0])
    assert result.structured_content["prompt_cache"] == line["prompt_cache"]
    return line["prompt_cache"]


ENGINES = {
    "ollama 0.33.3 (prompt_eval_cached_count)": ("ollama", {"ollama_version": "0.33.3"}, REUSED),
    "llama-server (timings, prompt_tokens_details)": ("openai", {"total_slots": 1}, REUSED),
    "vLLM --enable-prompt-tokens-details": ("openai", {"vllm": True, "prompt_tokens_details": True}, REUSED),
    "vLLM without it": ("openai", {"vllm": True}, UNKNOWN),
    "ollama 0.17.6 (says nothing)": ("ollama", {}, UNKNOWN),
    "llama-cpp-python (no usage in its streams)": ("openai", {"llama_cpp_python": True}, NOTHING_SAID),
    "llama-server re-processing every prompt": ("openai", {"total_slots": 1, "reprocesses": True}, REPROCESSED),
}


@pytest.mark.anyio
@pytest.mark.parametrize("engine", list(ENGINES))
async def test_the_episode_log_shows_evaluated_and_prompt_tokens_per_round(
    engine: str, tmp_path: Path, fake_ollama, fake_openai
) -> None:
    """Each engine's own fields become cached/evaluated per round (log line and structured answer
    alike); an engine that says nothing is 'unknown', never 0."""
    api, options, expected = ENGINES[engine]
    fake = (fake_ollama if api == "ollama" else fake_openai)(OraclePolicy(BOOK_GOLD), **options)
    assert await logged_rounds(tmp_path, fake) == expected


@pytest.mark.anyio
async def test_the_real_ollama_client_keeps_the_cached_count(fake_ollama) -> None:
    """ollama-python drops prompt_eval_cached_count; the backend reads it from the answer all the same."""
    fake = fake_ollama(ScriptPolicy(["OK", "OK"]), ollama_version="0.34.0")
    backend = OllamaBackend(DEFAULT_MODEL, host=fake.url)
    try:
        first = await backend.complete(
            "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n", max_tokens=4
        )
        second = await backend.complete(
            "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\nOK<|im_end|>\n"
            "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n",
            max_tokens=4,
        )
    finally:
        await backend.aclose()
    assert (first.cached_tokens, second.prompt_tokens, second.cached_tokens, second.details) == (
        0,
        33,
        16,
        {"cache": "prompt_eval_cached_count"},
    )


@pytest.mark.anyio
async def test_metrics_count_evaluated_and_reused_prompt_tokens(tmp_path: Path, fake_openai) -> None:
    """sqale_model_prompt_tokens_total by cache: evaluated and reused as the engine said, per replica."""
    fake = fake_openai(OraclePolicy(BOOK_GOLD), total_slots=1)
    server = build(tmp_path, ["--demo", *engine_flags(fake)])
    await ask(server, QUESTION)
    name, labels = "sqale_model_prompt_tokens_total", {"backend": "openai", "replica": fake.url}
    assert [metric(server, name, **labels, cache=kind) for kind in ("evaluated", "reused", "unknown")] == [
        417 + 44 + 32,
        435 + 508,
        0,
    ]


@pytest.mark.anyio
async def test_metrics_count_unreported_prompt_tokens_as_unknown(tmp_path: Path, fake_ollama) -> None:
    """An engine that does not say what it reused: every prompt token counted under unknown."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    server = build(tmp_path, ["--demo", *engine_flags(fake)])
    await ask(server, QUESTION)
    name, labels = "sqale_model_prompt_tokens_total", {"backend": "ollama", "replica": fake.url}
    assert [metric(server, name, **labels, cache=kind) for kind in ("evaluated", "reused", "unknown")] == [
        0,
        0,
        417 + 479 + 540,
    ]


async def ask_times(server: SqaleServer, times: int) -> None:
    """The bookshop question `times` times, one after another, in one client session."""
    async with Client(server) as client:
        for _ in range(times):
            await client.call_tool(TOOL, QUESTION)


def cache_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith("prompt cache:")
    ]


@pytest.mark.anyio
async def test_the_server_warns_once_of_an_engine_that_re_processes_every_prompt(
    tmp_path: Path, fake_openai, caplog
) -> None:
    """Three questions on an engine that evaluates every prompt whole: one warning, with what to do."""
    fake = fake_openai(OraclePolicy(BOOK_GOLD), total_slots=1, reprocesses=True)
    server = build(tmp_path, ["--demo", *engine_flags(fake)])
    with caplog.at_level(logging.WARNING):
        await ask_times(server, 3)
    assert cache_warnings(caplog) == [
        f"prompt cache: the engine at {fake.url} re-evaluated most of the prompt in 4 of 4 rounds after an "
        "episode's first (2,038 of 2,038 prompt tokens evaluated), so every round pays for the whole "
        "conversation again (on a laptop about 10 s a round instead of 1 s); what to do: keep one "
        "episode per slot (--runtime-slots equal to -np); for Qwen3.5 (a hybrid model) start "
        "llama-server with --ctx-checkpoints 32 --checkpoint-min-step 0 and --cache-ram 8192 or more, or "
        "use a build with the checkpoint fix of llama.cpp #28302 (checkpoints of prompts under 8,192 "
        'tokens were evicted); --cache-reuse does not help this model (see docs/engines.md, "Serving '
        'the model fast")'
    ]


@pytest.mark.anyio
async def test_the_server_does_not_warn_of_an_engine_that_reuses(tmp_path: Path, fake_ollama, caplog) -> None:
    """The same questions on an engine that reuses the prefix (or says nothing): no warning."""
    for options in ({"ollama_version": "0.33.3"}, {}):
        fake = fake_ollama(OraclePolicy(BOOK_GOLD), **options)
        server = build(tmp_path, ["--demo", *engine_flags(fake)])
        with caplog.at_level(logging.WARNING):
            await ask_times(server, 3)
    assert cache_warnings(caplog) == []


def doctor_output(capsys, *argv: str) -> str:
    assert main(["doctor", *argv]) == 0
    return capsys.readouterr().out


def test_doctor_probes_the_cache_with_two_rounds(fake_ollama, fake_openai, capsys) -> None:
    """Reused: [ok] with the engine's own field; re-processed: the warning and what to do for that
    engine; not reported: unknown. The probe never reaches the test's policy."""
    reusing = fake_ollama(OraclePolicy({}), ollama_version="0.33.3")
    out = doctor_output(capsys, "--ollama-host", reusing.url)
    assert (
        f"[ok]   prompt cache at {reusing.url}: the second of two rounds got 1,415 of its 1,461 prompt "
        "tokens from the engine's cache (prompt_eval_cached_count)\n"
    ) in out
    reprocessing = fake_openai(OraclePolicy({}), total_slots=1, reprocesses=True)
    out = doctor_output(capsys, "--backend", "openai", "--base-url", reprocessing.url)
    assert (
        f"[warn] prompt cache: the engine at {reprocessing.url} re-evaluated most of the prompt in 1 of "
        "1 rounds after an episode's first (1,461 of 1,461 prompt tokens evaluated)"
    ) in out
    assert "start llama-server with --ctx-checkpoints 32 --checkpoint-min-step 0" in out
    silent = fake_ollama(OraclePolicy({}))
    out = doctor_output(capsys, "--ollama-host", silent.url)
    assert (
        f"[info] prompt cache at {silent.url}: the engine does not report which prompt tokens it serves "
        "from its cache, so whether it reuses our prompts is unknown (see docs/engines.md)\n"
    ) in out
    assert "all checks passed" in out


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A Spider-layout folder with three questions on one database."""
    return spider_shop(tmp_path / "shop_set")


def run_eval(shop: Path, out: Path, fake: FakeServer) -> int:
    args = build_parser().parse_args(
        ["eval", str(shop), *engine_flags(fake), "--out", str(out), "--report", str(out.with_suffix(".html"))]
    )
    return args.run(args)


def test_eval_and_its_report_warn_of_an_engine_that_re_processes(shop, tmp_path, fake_openai, capsys) -> None:
    """The results keep each round's cached tokens; the run and its report warn, with what to do."""
    pytest.importorskip("matplotlib")
    fake = fake_openai(OraclePolicy(SHOP_QUESTIONS), total_slots=1, reprocesses=True)
    out = tmp_path / "run.jsonl"
    assert run_eval(shop, out, fake) == 0
    err = capsys.readouterr().err
    assert f"sqale-agent eval: prompt cache: the engine at {fake.url} re-evaluated most of the prompt" in err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["cached_tokens"] for line in lines for s in line["samples"] for r in s["trace"]} == {0}
    assert {line["run"]["settings"]["engine_kind"] for line in lines} == {"llama.cpp's llama-server"}
    page = out.with_suffix(".html").read_text()
    assert '<h2>Prompt cache reuse</h2><p class="bad cache-verdict">prompt cache: the engine at' in page
    assert "--ctx-checkpoints 32" in page


def test_eval_and_its_report_of_an_engine_that_reuses(shop, tmp_path, fake_openai, capsys) -> None:
    """No warning; the report says how much came from the cache, round by round."""
    pytest.importorskip("matplotlib")
    fake = fake_openai(OraclePolicy(SHOP_QUESTIONS), total_slots=1)
    out = tmp_path / "run.jsonl"
    assert run_eval(shop, out, fake) == 0
    assert "prompt cache" not in capsys.readouterr().err
    page = out.with_suffix(".html").read_text()
    assert "re-evaluated most of the prompt" not in page
    assert f'<p class="cache-verdict">{fake.url}: ' in page
    assert "<th>round</th><th>rounds</th><th>engine reported</th>" in page

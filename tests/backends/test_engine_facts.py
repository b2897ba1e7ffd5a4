"""What engines tell about themselves and the traps doctor warns of: Ollama too old for qwen3.5, model
parameters that differ from our Modelfile, a context smaller than an episode needs (the budget
shrinks to fit instead of failing mid-episode)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agent.backends.ollama_facts import (
    CACHE_UNREPORTED,
    OWN_ENGINE_NOTE,
    parameter_warnings,
    parse_parameters,
    release_facts,
)
from agent.commands.cli import build_parser, main
from tests.support.eval_runs import SHOP_QUESTIONS, spider_shop
from tests.support.fake_ollama import SHOW_PARAMETERS
from tests.support.mcp import BOOK_GOLD
from tests.support.mcp_in_process import ask, build
from tests.support.policies import OraclePolicy

SMALL_CONTEXT_NOTE = (
    "holds 8,192 tokens per sequence (/props default_generation_settings.n_ctx (per slot)), less than an "
    "episode's 12,288 tokens and room for the answer: episodes get a budget of 6,144 tokens (they reach "
    "the final answer sooner); for the trained budget give the engine a context of 16,384 per sequence "
    "(llama-server: -c 16,384 times -np; vLLM: --max-model-len 16384; Ollama: sqale asks for num_ctx 16384)"
)


def doctor(capsys, *argv: str) -> str:
    assert main(["doctor", *argv]) == 0
    return capsys.readouterr().out


def test_doctor_warns_of_an_ollama_too_old_for_qwen35(fake_ollama, capsys) -> None:
    """Ollama before 0.17.1 cannot run qwen3.5 models; before 0.33.3 it does not report its cache."""
    fake = fake_ollama(OraclePolicy({}), ollama_version="0.17.0")
    out = doctor(capsys, "--ollama-host", fake.url)
    assert (
        "       the engine says its version is 0.17.0\n"
        "       the engine holds 16,384 tokens per sequence (num_ctx 16384 sent with every request)\n"
        "[warn] the engine: Ollama 0.17.0 is older than 0.17.1, the first release that runs qwen3.5 "
        "models: upgrade Ollama\n"
    ) in out
    assert (
        "       Ollama before 0.33.3 does not report the prompt tokens it served from its cache: prompt "
        "reuse shows as unknown\n"
    ) in out


def test_what_each_ollama_release_is_told() -> None:
    """Before 0.17.1 a warning (no qwen3.5); before 0.30.0 a note that a GGUF from llama.cpp does not
    load (its own engine); before 0.33.3 that cache reuse is unreported; nothing for an unknown build."""
    too_old = "Ollama 0.17.0 is older than 0.17.1, the first release that runs qwen3.5 models: upgrade Ollama"
    assert {
        version: release_facts(version)
        for version in ("0.17.0", "0.17.1", "0.24.0", "v0.30.0-rc2", "0.30.0", "0.33.3", "0.0.0", "dev", None)
    } == {
        "0.17.0": ([too_old], [CACHE_UNREPORTED]),
        "0.17.1": ([], [OWN_ENGINE_NOTE, CACHE_UNREPORTED]),
        "0.24.0": ([], [OWN_ENGINE_NOTE, CACHE_UNREPORTED]),
        "v0.30.0-rc2": ([], [CACHE_UNREPORTED]),
        "0.30.0": ([], [CACHE_UNREPORTED]),
        "0.33.3": ([], []),
        "0.0.0": ([], []),
        "dev": ([], []),
        None: ([], []),
    }
    assert OWN_ENGINE_NOTE == (
        "Ollama before 0.30.0 loads a Qwen3.5 GGUF only as its own import writes it (`ollama create` from "
        "the safetensors folder), not one converted with llama.cpp; 0.30.0 and later load both (llama.cpp's "
        "llama-server)"
    )


def test_doctor_notes_that_ollama_before_0_30_loads_no_gguf_from_llama_cpp(fake_ollama, capsys) -> None:
    """Ollama 0.24.0 runs qwen3.5, but only GGUFs of its own import: doctor says so beside the version."""
    fake = fake_ollama(OraclePolicy({}), ollama_version="0.24.0")
    out = doctor(capsys, "--ollama-host", fake.url)
    assert f"       {OWN_ENGINE_NOTE}\n" in out
    assert "[warn] the engine: Ollama" not in out


def test_doctor_warns_of_model_parameters_that_differ_from_the_modelfile(fake_ollama, capsys) -> None:
    """A model created with Ollama's repeat_penalty 1.1 (or another top_k): one warning per parameter."""
    top_k = "top_k" + " " * 26
    parameters = SHOW_PARAMETERS.replace(f"{top_k}20", f"{top_k}40") + "\nrepeat_penalty                 1.1"
    fake = fake_ollama(OraclePolicy({}), show_overrides={"parameters": parameters})
    out = doctor(capsys, "--ollama-host", fake.url)
    assert (
        "[warn] the engine: the model's PARAMETER top_k is 40, our Modelfile's is 20: sqale sends its own "
        "value with every request, but other clients of this model (ollama run, Open WebUI) sample "
        "differently than the model was trained; re-create it with `ollama create ... -f Modelfile`\n"
        "[warn] the engine: the model's PARAMETER repeat_penalty is 1.1, our Modelfile's is 1: "
    ) in out


def test_the_modelfile_passes_its_own_check() -> None:
    """Our Modelfile's PARAMETER lines, as /api/show prints them, raise no warning."""
    modelfile = (Path(__file__).resolve().parents[2] / "Modelfile").read_text()
    lines = [
        line.removeprefix("PARAMETER ") for line in modelfile.splitlines() if line.startswith("PARAMETER ")
    ]
    assert parse_parameters("\n".join(lines))["stop"] == '"<|im_end|>" "<|endoftext|>" "<|im_start|>"'
    assert parameter_warnings("\n".join(lines)) == []


def test_doctor_warns_of_a_context_smaller_than_an_episode_needs(fake_openai, capsys) -> None:
    """llama-server with 8,192 tokens per slot: said, and the budget the others will use."""
    fake = fake_openai(OraclePolicy({}), total_slots=1, context_tokens=8192)
    out = doctor(capsys, "--backend", "openai", "--base-url", fake.url)
    assert (
        f"[warn] the engine at {fake.url} {SMALL_CONTEXT_NOTE}; sqale-mcp, ask and eval do so by themselves\n"
    ) in out


def test_doctor_reads_vllm_version_and_context(fake_openai, capsys) -> None:
    """vLLM answers /version and lists max_model_len with its model."""
    fake = fake_openai(OraclePolicy({}), vllm=True, prompt_tokens_details=True)
    out = doctor(capsys, "--backend", "openai", "--base-url", fake.url)
    assert (
        "       the engine is vLLM\n"
        "       the engine does not say how many sequences it runs at once; for a server that serves "
        "one request at a time give --runtime-slots 1\n"
        "       the engine says its version is 0.26.0\n"
        "       the engine holds 16,384 tokens per sequence (/v1/models max_model_len)\n"
    ) in out


@pytest.mark.anyio
async def test_the_server_shrinks_the_budget_to_the_engine_context(tmp_path: Path, fake_openai, caplog) -> None:
    """A warning at start, and questions are still answered within the smaller budget."""
    fake = fake_openai(OraclePolicy(BOOK_GOLD), total_slots=1, context_tokens=8192)
    server = build(tmp_path, ["--demo", "--backend", "openai", "--base-url", fake.url])
    with caplog.at_level(logging.WARNING):
        result = await ask(server, {"question": "How many books are there?"})
    assert result.structured_content is not None and result.structured_content["status"] == "submitted"
    assert f"the engine at {fake.url} {SMALL_CONTEXT_NOTE}" in [r.getMessage() for r in caplog.records]


def test_eval_runs_with_the_budget_that_fits_and_records_it(tmp_path: Path, fake_openai, capsys) -> None:
    """eval says so once and every results line records the budget it ran with."""
    shop = spider_shop(tmp_path / "shop_set")
    fake = fake_openai(OraclePolicy(SHOP_QUESTIONS), total_slots=1, context_tokens=8192)
    out = tmp_path / "run.jsonl"
    args = build_parser().parse_args(
        ["eval", str(shop), "--backend", "openai", "--base-url", fake.url, "--out", str(out)]
    )
    assert args.run(args) == 0
    assert f"sqale-agent eval: the engine at {fake.url} {SMALL_CONTEXT_NOTE}\n" in capsys.readouterr().err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line["run"]["settings"]["token_budget"] for line in lines} == {6144}

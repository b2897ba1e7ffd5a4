"""Engines that crash, serve one request at a time, or ignore model names: doctor, ask, eval, the server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from agent.commands.cli import main
from agent.sqlite import create_database
from tests.support.eval_runs import SHOP, SHOP_QUESTIONS, spider_shop
from tests.support.mcp import BOOK_GOLD, TOOL, DelayedPolicy
from tests.support.mcp_in_process import build
from tests.support.policies import DEFAULT_MODEL, OraclePolicy

ENGINE_MODEL = "gemma-3-270m"  # what a llama_cpp.server started without --model_alias would list
ONE_AT_A_TIME = "llama-cpp-python's server serves one request at a time"


def doctor(url: str, *extra: str) -> int:
    """`sqale-agent doctor` against the OpenAI-compatible engine at `url`."""
    return main(["doctor", "--backend", "openai", "--base-url", url, *extra])


def test_doctor_fails_an_engine_that_lists_the_model_but_dies_generating(fake_openai, capsys) -> None:
    """/v1/models answers, the completion breaks off: doctor says the engine cannot generate; exit 1."""
    crashing = fake_openai(OraclePolicy({}), crash_on_completion=True)
    assert doctor(crashing.url) == 1
    out = capsys.readouterr().out
    assert f"[ok]   openai at {crashing.url}: model {DEFAULT_MODEL} is available\n" in out
    assert (
        f"[fail] openai at {crashing.url}: a one-token test completion failed: The model server at "
        f"{crashing.url} failed for model '{DEFAULT_MODEL}' (the completion stream broke off "
        "(RemoteProtocolError: "
    ) in out
    assert (
        "       the runtime answers but cannot generate: check its log (a crash on the first "
        "completion: see docs/troubleshooting.md)\n"
    ) in out
    assert "all checks passed" not in out


def test_doctor_checks_each_replica_generates(fake_openai, capsys) -> None:
    """With two replicas, the one that crashes is named; the other one's completion passes."""
    good, crashing = fake_openai(OraclePolicy({})), fake_openai(OraclePolicy({}), crash_on_completion=True)
    assert doctor(good.url, "--base-url", crashing.url) == 1
    out = capsys.readouterr().out
    assert f"[ok]   openai at {good.url}: generated 1 token in " in out
    assert f"[fail] openai at {crashing.url}: a one-token test completion failed: " in out
    assert [b["prompt"] for b in good.bodies("/v1/completions")] == [
        "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\n"
    ]


def test_doctor_on_a_one_request_engine_follows_it_and_warns_of_more_slots(fake_openai, capsys) -> None:
    """llama_cpp.server is recognised: one runtime slot by default, a warning for more, its caveat."""
    engine = fake_openai(OraclePolicy({}), llama_cpp_python=True)
    assert doctor(engine.url) == 0
    out = capsys.readouterr().out
    assert (f"[ok]   openai at {engine.url}: generated 1 token in ") in out
    assert (
        f"[info] runtime slots: 1 (the engine's own: {ONE_AT_A_TIME}): questions beyond that wait "
        "their turn\n"
        "       the engine is llama-cpp-python's server (llama_cpp.server)\n"
        f"       the engine reports 1 slot ({ONE_AT_A_TIME})\n"
        "       a request that arrives while another one streams cuts that one off unless the server "
        "was started with --interrupt_requests False: keep one runtime slot and one sqale-agent or "
        "sqale-mcp in front of it\n"
        "       it does not report which prompt tokens it served from its cache (its verbose log "
        "does: 'prefix-match hit'), so prompt reuse shows as unknown\n"
        "       the engine says its version is 0.3.36\n"
        f"[info] prompt cache at {engine.url}: the engine does not report which prompt tokens it "
        "serves from its cache, so whether it reuses our prompts is unknown (see docs/engines.md)\n"
        "[info] no --db given"
    ) in out
    assert doctor(engine.url, "--runtime-slots", "3") == 0
    assert (
        "[warn] 3 runtime slots but the engine serves 1 at once: give sqale-mcp --runtime-slots 1; "
        "more questions at once than slots evict each other's cached prompt, or fail where the "
        "engine cuts a request off\n"
    ) in capsys.readouterr().out


def test_doctor_accepts_an_engine_that_answers_any_model_name(fake_openai, capsys) -> None:
    """An engine that lists another model but serves our name anyway passes, naming its own model."""
    engine = fake_openai(OraclePolicy({}), models=(ENGINE_MODEL,), llama_cpp_python=True)
    assert doctor(engine.url) == 0
    assert (
        f"[ok]   openai at {engine.url}: the engine does not list the model {DEFAULT_MODEL} but "
        f"answers that name with its own model {ENGINE_MODEL}; answers are labelled {ENGINE_MODEL}\n"
    ) in capsys.readouterr().out


async def _ask_at_once(url: str, tmp_path: Path, *extra: str) -> list[Any]:
    """The three first demo questions at once through an in-process server on the engine at `url`."""
    server = build(tmp_path, ["--demo", "--backend", "openai", "--base-url", url, *extra])
    results: list[Any] = []
    async with Client(server) as client:

        async def one(question: str) -> None:
            results.append(await client.call_tool(TOOL, {"question": question}))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                for question in list(BOOK_GOLD)[:3]:
                    group.start_soon(one, question)
    return results


@pytest.mark.anyio
@pytest.mark.slow
async def test_questions_at_once_on_a_one_request_engine_all_answer(fake_openai, tmp_path: Path) -> None:
    """The default runtime slots follow llama_cpp.server's one: three questions at once all answer.

    With three slots (the fault before) the engine cuts requests off and questions fail.
    """
    engine = fake_openai(DelayedPolicy(OraclePolicy(BOOK_GOLD), 0.1), llama_cpp_python=True)
    results = await _ask_at_once(engine.url, tmp_path)
    assert sorted(r.structured_content["sql"] for r in results if not r.is_error) == sorted(
        list(BOOK_GOLD.values())[:3]
    )
    too_many = await _ask_at_once(engine.url, tmp_path, "--runtime-slots", "3")
    assert any("the server interrupted it" in r.content[0].text for r in too_many if r.is_error)


@pytest.mark.anyio
async def test_answers_name_the_engines_own_model_when_it_ignores_ours(fake_openai, tmp_path: Path) -> None:
    """Against an engine that serves any name with its one model, the answer's model is its id."""
    engine = fake_openai(OraclePolicy(BOOK_GOLD), models=(ENGINE_MODEL,), llama_cpp_python=True)
    server = build(tmp_path, ["--demo", "--backend", "openai", "--base-url", engine.url])
    async with Client(server) as client:
        result = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert not result.is_error
    assert (result.structured_content["model"], result.structured_content["rows"]) == (ENGINE_MODEL, [[16]])


def test_ask_samples_take_turns_on_a_one_request_engine(fake_openai, tmp_path: Path, capsys) -> None:
    """ask --samples 2 against llama_cpp.server: the samples take its one slot in turn and both answer."""
    db = create_database(tmp_path / "shop.sqlite", SHOP)
    question = "How many customers are there?"
    engine = fake_openai(DelayedPolicy(OraclePolicy(SHOP_QUESTIONS), 0.1), llama_cpp_python=True)
    asked = [
        "ask",
        "--db",
        str(db),
        "--backend",
        "openai",
        "--base-url",
        engine.url,
        "--samples",
        "2",
        "--json",
        question,
    ]
    assert main(asked) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["sql"], answer["samples_finished"], answer["agreement"]) == (
        SHOP_QUESTIONS[question],
        2,
        1.0,
    )
    assert main([*asked, "--runtime-slots", "2"]) == 1  # both at once: the engine cuts one off
    assert "the server interrupted it" in capsys.readouterr().err


def test_eval_follows_a_one_request_engine_and_takes_runtime_slots(fake_openai, tmp_path: Path, capsys) -> None:
    """eval --concurrency 3 on llama_cpp.server talks to it one episode at a time and says so."""
    spider_shop(tmp_path / "set")
    engine = fake_openai(DelayedPolicy(OraclePolicy(SHOP_QUESTIONS), 0.05), llama_cpp_python=True)
    run = [
        "eval",
        str(tmp_path / "set"),
        "--backend",
        "openai",
        "--base-url",
        engine.url,
        "--concurrency",
        "3",
        "--out",
        str(tmp_path / "r.jsonl"),
    ]
    assert main(run) == 0
    captured = capsys.readouterr()
    assert (
        f"runtime slots: 1 (the engine's own: {ONE_AT_A_TIME}): fewer episodes talk to the model at "
        "once than --concurrency 3\n"
    ) in captured.err
    assert "overall  3  100.0%" in captured.out
    assert main([*run, "--runtime-slots", "0"]) == 2
    assert capsys.readouterr().err == "sqale-agent eval: --runtime-slots must be at least 1 (got 0)\n"


def test_eval_labels_its_results_with_the_model_the_engine_served(fake_openai, tmp_path: Path, capsys) -> None:
    """An engine that answers our name with its own model: eval says so and its results name that model."""
    spider_shop(tmp_path / "set")
    engine = fake_openai(OraclePolicy(SHOP_QUESTIONS), models=(ENGINE_MODEL,), llama_cpp_python=True)
    out = tmp_path / "r.jsonl"
    assert (
        main(
            ["eval", str(tmp_path / "set"), "--backend", "openai", "--base-url", engine.url, "--out", str(out)]
        )
        == 0
    )
    assert (
        f"sqale-agent eval: the engine does not list the model {DEFAULT_MODEL} but answers that name "
        f"with its own model {ENGINE_MODEL}; the results are labelled {ENGINE_MODEL}\n"
    ) in capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    summary = json.loads(out.with_name("r.summary.json").read_text())
    assert ({r["model"] for r in records}, summary["model"]) == ({ENGINE_MODEL}, ENGINE_MODEL)
    # The requests still ask for our name: the engine serves it.
    assert {b["model"] for b in engine.bodies("/v1/completions")} == {DEFAULT_MODEL}

"""Answers within the client's patience, through clients nobody here wrote: the official TypeScript SDK 1.x
client at its default options (Claude Desktop's: a 60 s timeout that progress does not reset) and the
Python SDK's client with a read timeout, over stdio and streamable HTTP, against a model slower than the
call budget, with K samples on one runtime slot. Every call ends within the budget, the same call again
gets the answer, the model is asked exactly what a patient client's question asks it, and a person's
cancel frees the engine."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.support.mcp import (
    BOOK_GOLD,
    REPO,
    TOOL,
    DelayedPolicy,
    KeyedPolicy,
    running_http_server,
    server_command,
    server_env,
)
from tests.support.mcp_in_process import build
from tests.support.node_tools import NODE_BIN, node_env
from tests.support.policies import OraclePolicy, ScriptedReply, ScriptPolicy, assistant_reply, tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(300)]

TS_SDK1 = "@modelcontextprotocol/sdk@1.32.2"  # the 1.x client Claude Desktop is built on (.ci/run installs it)
QUESTION = "How many books are there?"
ASKED = {"question": QUESTION, "samples": 3}
BUDGET = 2.0  # seconds; a question takes about 3 s: two of its three samples, three rounds each, 0.5 s a round
# K samples on one runtime slot, one after another (Ollama's common case); fixed seeds.
FLAGS = ("--demo", "--runtime-slots", "1", "--seed", "100", "--call-budget", str(BUDGET))


def model_prompts(fake: Any) -> Counter[str]:
    """The prompts the question's model requests carried (a multiset: a repeat would count twice)."""
    return Counter(body["prompt"] for body in fake.bodies("/api/generate") if QUESTION in body["prompt"])


async def patient_prompts(tmp_path: Path, fake: Any) -> Counter[str]:
    """What a patient client's question asks the model: one call, no budget (--call-budget 0)."""
    server = build(tmp_path / "patient", ["--ollama-host", fake.url, *FLAGS[:-2], "--call-budget", "0"])
    async with Client(server) as client:
        answer = (await client.call_tool(TOOL, ASKED)).structured_content
    assert answer is not None and answer["status"] == "submitted"
    prompts = model_prompts(fake)
    assert sum(prompts.values()) == 6  # two samples of three rounds agree; the third never starts
    fake.requests.clear()
    return prompts


def run_ts_sdk1(job: dict[str, Any]) -> dict[str, Any]:
    """The TS SDK 1.x client script's JSON line for `job` (the test is skipped when the SDK is absent)."""
    modules = REPO / ".ci" / "node" / "node_modules"
    package = modules / "@modelcontextprotocol" / "sdk" / "package.json"
    if not package.is_file() or not (NODE_BIN / "node").is_file():
        pytest.skip(
            f"{TS_SDK1} or Node 22 is absent from .ci/node; install them with "
            f"`npm install --prefix .ci/node node@22 {TS_SDK1}` (.ci/run does)"
        )
    version = json.loads(package.read_text())["version"]
    assert version.startswith("1."), f".ci/node holds @modelcontextprotocol/sdk {version}, not 1.x: {TS_SDK1}"
    done = subprocess.run(
        [str(NODE_BIN / "node"), str(REPO / "tests" / "support" / "ts_sdk1_client.cjs")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env={**node_env(), "NODE_PATH": str(modules)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def stdio_job(tmp_path: Path, fake: Any, *flags: str, **job: Any) -> dict[str, Any]:
    """A job starting the stdio server with FLAGS and `flags` against `fake`."""
    return {
        "command": server_command(*FLAGS, "--ollama-host", fake.url, *flags),
        "env": server_env(tmp_path),
        "cwd": str(REPO),
        "questions": [ASKED],
        **job,
    }


async def test_typescript_sdk_1_at_its_default_options_gets_a_slow_answer(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """Claude Desktop's client: the question outlasts the 2 s budget, each call ends in time (never at the
    SDK's 60 s timeout), the same call again gets the answer, and the model is asked exactly what a
    patient client's question asks it."""
    fake = fake_ollama(DelayedPolicy(OraclePolicy(BOOK_GOLD), 0.5))
    patient = await patient_prompts(tmp_path, fake)
    out = await anyio.to_thread.run_sync(run_ts_sdk1, stdio_job(tmp_path, fake))
    (asked,) = out["asked"]
    statuses = [call.get("status") for call in asked["calls"]]
    assert statuses[-1] == "submitted" and set(statuses[:-1]) == {"working"}, asked["calls"]
    assert all("error" not in call and call["seconds"] < 30 for call in asked["calls"])  # far from 60 s
    assert asked["result"]["structuredContent"]["rows"] == [[16]]
    assert model_prompts(fake) == patient


async def test_typescript_sdk_1_cancel_stops_the_question_and_frees_the_engine(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """A person's Stop (the SDK's AbortSignal: notifications/cancelled) on the call after a `working` one
    cancels the question: its model request under way (60 s) is closed, and the one runtime slot it held
    is free at once: the next question is answered in its first call. The log says why."""
    slow = ScriptPolicy([ScriptedReply(assistant_reply("look", tool_call("list_tables")), delay=60)])
    fake = fake_ollama(KeyedPolicy({"slowly": slow, "": OraclePolicy(BOOK_GOLD)}))
    log = tmp_path / "episodes.jsonl"
    job = stdio_job(tmp_path, fake, "--episode-log", str(log), cancel_first=True)
    job["questions"] = [{"question": "Count the books slowly", "samples": 3}, {"question": QUESTION}]
    out = await anyio.to_thread.run_sync(run_ts_sdk1, job)
    stopped, next_one = out["asked"]
    assert [call.get("status") for call in stopped["calls"]] == ["working", None]
    assert stopped["calls"][1]["error"]["message"].endswith("the person stopped it")
    assert [call["status"] for call in next_one["calls"]] == ["submitted"]  # the slot was free at once
    assert await fake.await_disconnects(1, timeout=20)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["status"], line["stop_reason"]) for line in lines] == [
        ("working", "call_budget"),
        ("cancelled", "call_cancelled"),
        ("submitted", "submit_sql"),
    ]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_python_client_with_a_read_timeout_gets_a_slow_answer(
    tmp_path: Path, fake_ollama: Any, transport: str
) -> None:
    """The Python SDK's client with a 10 s read timeout: no call reaches it; the same call again gets the
    answer, the model asked as for a patient client; over stdio and streamable HTTP alike."""
    fake = fake_ollama(DelayedPolicy(OraclePolicy(BOOK_GOLD), 0.5))
    patient = await patient_prompts(tmp_path, fake)
    statuses: list[str] = []

    async def until_answered(client: Client) -> dict[str, Any]:
        while True:
            result = await client.call_tool(TOOL, ASKED, read_timeout_seconds=10)
            assert result.structured_content is not None and not result.is_error, result
            statuses.append(result.structured_content["status"])
            if statuses[-1] != "working":
                return result.structured_content

    if transport == "stdio":
        command = server_command(*FLAGS, "--ollama-host", fake.url)
        params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(tmp_path), cwd=REPO)
        async with Client(params) as client:
            answer = await until_answered(client)
    else:
        with running_http_server(tmp_path, *FLAGS, "--ollama-host", fake.url) as url:
            async with (
                httpx2.AsyncClient(timeout=10) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                answer = await until_answered(client)
    assert answer["rows"] == [[16]] and statuses[-1] == "submitted"
    assert len(statuses) >= 2 and set(statuses[:-1]) == {"working"}
    assert model_prompts(fake) == patient

"""A client nobody here wrote: the MCP Inspector CLI lists and calls our tool over stdio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_server.answer.output import AnswerOutput
from tests.support.console import console_script
from tests.support.mcp import BOOK_GOLD, COUNT_TEXT_START, REPO, TOOL, server_env
from tests.support.policies import OraclePolicy

INSPECTOR = REPO / ".ci" / "node" / "node_modules" / ".bin" / "mcp-inspector"

# The Inspector gives a server 15 s to start by default; a loaded machine can take longer to
# import the MCP SDK, and a late start is not what these tests are about.
CONNECT_TIMEOUT = ("--connect-timeout", "90000")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not INSPECTOR.is_file(),
        reason=(
            f"{INSPECTOR} is absent; install it with `npm install --prefix .ci/node "
            "@modelcontextprotocol/inspector@2.12.0` (.ci/run does)"
        ),
    ),
]


def inspect(tmp_path: Path, ollama_url: str, *method_args: str) -> subprocess.CompletedProcess[str]:
    """Run `mcp-inspector --cli` against `python -m mcp_server --demo` (env passed with -e)."""
    env = server_env(tmp_path)
    return subprocess.run(
        [
            str(INSPECTOR),
            "--cli",
            *CONNECT_TIMEOUT,
            "-e",
            f"XDG_CACHE_HOME={env['XDG_CACHE_HOME']}",
            sys.executable,
            "-m",
            "mcp_server",
            "--demo",
            "--ollama-host",
            ollama_url,
            *method_args,
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_inspector_lists_the_tool_with_its_schemas(tmp_path: Path, fake_ollama: Any) -> None:
    """tools/list shows one tool with the input and output schemas, and no portability problem."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    done = inspect(tmp_path, fake.url, "--method", "tools/list", "--strict")
    assert done.returncode == 0, done.stderr
    (tool,) = json.loads(done.stdout)["tools"]
    assert (tool["name"], tool["inputSchema"]["required"], tool["outputSchema"]) == (
        TOOL,
        ["question"],
        AnswerOutput.model_json_schema(),
    )


def test_inspector_calls_the_tool(tmp_path: Path, fake_ollama: Any) -> None:
    """tools/call returns the text answer and structured content equal to the gold rows."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    done = inspect(
        tmp_path,
        fake.url,
        "--method",
        "tools/call",
        "--tool-name",
        TOOL,
        "--tool-arg",
        "question=How many books are there?",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["content"][0]["text"].startswith(COUNT_TEXT_START)
    assert (result["structuredContent"]["sql"], result["structuredContent"]["rows"]) == (
        "SELECT count(*) FROM books",
        [[16]],
    )


def test_inspector_sees_tool_errors(tmp_path: Path, dead_url: str) -> None:
    """An unreachable runtime reaches the Inspector as an isError result with the fix."""
    done = inspect(
        tmp_path,
        dead_url,
        "--method",
        "tools/call",
        "--tool-name",
        TOOL,
        "--tool-arg",
        "question=How many books are there?",
    )
    result = json.loads(done.stdout)
    assert (done.returncode, result["isError"]) == (5, True)
    assert result["content"][0]["text"].startswith(
        f"Error executing tool {TOOL}: The model runtime is unreachable: Could not reach Ollama at {dead_url}"
    )


def test_inspector_cli_with_the_readme_form_and_a_config_file(tmp_path: Path, fake_ollama: Any) -> None:
    """`--cli --method tools/list -- sqale-mcp --config f.toml` (the README's form) lists the tool."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    config = tmp_path / "f.toml"
    config.write_text(f'demo = true\nollama-host = "{fake.url}"\n', encoding="utf-8")
    env = server_env(tmp_path)
    done = subprocess.run(
        [
            str(INSPECTOR),
            "--cli",
            *CONNECT_TIMEOUT,
            "-e",
            f"XDG_CACHE_HOME={env['XDG_CACHE_HOME']}",
            "--method",
            "tools/list",
            "--",
            console_script("sqale-mcp"),
            "--config",
            str(config),
        ],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [t["name"] for t in json.loads(done.stdout)["tools"]] == [TOOL]

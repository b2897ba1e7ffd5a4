"""`mcp dev mcp_server/server.py` as the README gives it: the server command it spawns answers MCP.

`mcp dev` starts the MCP Inspector with `npx`, handing it a `uv run ... mcp run` command to spawn.
Here a stand-in `npx` records that command, and the test runs it as the Inspector would, over
stdio, without the web UI. The real `uv` builds its environment from PyPI (network), as a user's
does; `.venv/` and `uv.lock`, which `uv run` writes into the clone, are in .gitignore.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.support.console import console_script
from tests.support.mcp import BOOK_GOLD, REPO, TOOL, server_env
from tests.support.policies import OraclePolicy

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

UV_SYNC_SECONDS = 600  # a first `uv run` downloads the project's dependencies


def spawned_by_mcp_dev(tmp_path: Path, *options: str) -> list[str]:
    """The command line `mcp dev mcp_server/server.py OPTIONS` hands to the Inspector."""
    scripts = Path(console_script("mcp")).parent
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    recorded = tmp_path / "npx-args.txt"
    (fake_bin / "npx").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{recorded}"\n', encoding="utf-8")
    (fake_bin / "npx").chmod(0o755)
    env = server_env(tmp_path, PATH=os.pathsep.join([str(fake_bin), str(scripts), os.environ["PATH"]]))
    done = subprocess.run(
        [console_script("mcp"), "dev", "mcp_server/server.py", *options],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    inspector, *command = recorded.read_text(encoding="utf-8").splitlines()
    assert inspector == "@modelcontextprotocol/inspector"
    return command


async def test_the_command_mcp_dev_spawns_serves_the_tool(tmp_path: Path, fake_ollama: Any) -> None:
    """The `uv run ... mcp run mcp_server/server.py` that `mcp dev` spawns lists and answers over stdio."""
    command = spawned_by_mcp_dev(tmp_path)
    assert command[:2] == ["uv", "run"] and command[-3:] == ["mcp", "run", "mcp_server/server.py"]
    assert "mcp[cli]" in command  # `mcp run` needs typer, which only the cli extra brings
    uv = shutil.which("uv", path=str(Path(console_script("mcp")).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (pip install uv; .ci/run does)")
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    env = server_env(tmp_path, SQALE_MCP_ARGS=f"--demo --ollama-host {fake.url}")
    params = StdioServerParameters(command=uv, args=command[1:], env=env, cwd=REPO)
    with anyio.fail_after(UV_SYNC_SECONDS):
        async with Client(params) as client:
            tools = (await client.list_tools()).tools
            result = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert [t.name for t in tools] == [TOOL]
    assert result.structured_content["rows"] == [[16]]
    ignored = subprocess.run(
        ["git", "check-ignore", ".venv/", "uv.lock"], cwd=REPO, capture_output=True, text=True
    )
    assert ignored.stdout.split() == [".venv/", "uv.lock"]

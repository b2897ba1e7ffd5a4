"""The server as a subprocess over stdio: start-up, answers, cancellation, refusals, `mcp run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support.console import console_script, shadowing_folder
from tests.support.mcp import (
    BOOK_GOLD,
    COUNT_TEXT_START,
    REPO,
    TOOL,
    KeyedPolicy,
    run_server_expecting_exit,
    server_command,
    server_env,
)
from tests.support.policies import OraclePolicy, ScriptedReply, ScriptPolicy, tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def stdio_params(
    tmp_path: Path, *args: str, command: list[str] | None = None, **env: str
) -> StdioServerParameters:
    cmd = command or server_command(*args)
    return StdioServerParameters(command=cmd[0], args=cmd[1:], env=server_env(tmp_path, **env), cwd=REPO)


async def test_stdio_server_lists_and_answers(tmp_path: Path, fake_ollama: Any) -> None:
    """`python -m mcp_server --demo` answers over stdio; its logs go to stderr only."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    errlog = (tmp_path / "stderr.txt").open("w")
    params = stdio_params(tmp_path, "--demo", "--ollama-host", fake.url)
    with errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            tools = (await client.list_tools()).tools
            result = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert [t.name for t in tools] == [TOOL]
    assert result.structured_content["rows"] == [[16]]
    assert result.content[0].text.startswith(COUNT_TEXT_START)
    log = (tmp_path / "stderr.txt").read_text()
    assert "INFO mcp_server.app: database 'bookshop': " in log
    assert "INFO mcp_server.state: model 'qwen3.5-2b-grpo-synsql' is available" in log
    assert "httpx" not in log  # no line per model request at the default level


async def test_stdio_cancel_then_next_call(tmp_path: Path, fake_ollama: Any) -> None:
    """Cancelling a call over stdio closes its model request; the next call is answered."""
    stuck = ScriptPolicy([tool_call("list_tables"), ScriptedReply(tool_call("list_tables"), delay=60)])
    fake = fake_ollama(KeyedPolicy({"stuck": stuck, "": OraclePolicy(BOOK_GOLD)}))
    params = stdio_params(tmp_path, "--demo", "--ollama-host", fake.url)
    async with Client(params) as client:
        progressed = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            progressed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: client.call_tool(TOOL, {"question": "stuck question"}, progress_callback=on_progress)
            )
            with anyio.fail_after(20):
                await progressed.wait()
                while sum("stuck" in b["prompt"] for b in fake.bodies("/api/generate")) < 2:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        assert await fake.await_disconnects(1, timeout=10)
        with anyio.fail_after(30):
            good = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert good.structured_content["rows"] == [[16]]


async def test_unreachable_ollama_at_start_warns_and_serves(tmp_path: Path, dead_url: str) -> None:
    """Ollama down at start: a warning on stderr, the server runs, the tool says what to do."""
    errlog = (tmp_path / "stderr.txt").open("w")
    params = stdio_params(tmp_path, "--demo", "--ollama-host", dead_url)
    with errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            result = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert result.is_error
    assert result.content[0].text.startswith(
        f"Error executing tool {TOOL}: The model runtime is unreachable: Could not reach Ollama at "
        f"{dead_url} (connection refused or host unknown). Start it with `ollama serve`"
    )
    assert (
        f"WARNING mcp_server.state: Could not reach Ollama at {dead_url} (connection refused or host unknown)."
    ) in (tmp_path / "stderr.txt").read_text()


async def test_the_server_started_in_a_workspace_with_its_own_agent_package_works(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """`sqale-mcp` run from a folder with unrelated `agent/` and `mcp_server/` packages answers."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    params = StdioServerParameters(
        command=console_script("sqale-mcp"),
        args=["--demo", "--ollama-host", fake.url],
        env=server_env(tmp_path),
        cwd=shadowing_folder(tmp_path / "workspace"),
    )
    async with Client(params) as client:
        result = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert result.structured_content["rows"] == [[16]]


def test_bad_database_stops_start_up_with_one_line(tmp_path: Path) -> None:
    """A missing database file: exit 2, one stderr line naming the alias and the reason."""
    missing = tmp_path / "missing.db"
    done = run_server_expecting_exit(tmp_path, "--db", f"sales={missing}")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"sqale-mcp: database 'sales': {missing}: no such file; check the path\n"


def test_no_database_says_how_to_configure_one(tmp_path: Path) -> None:
    """No database: exit 2 with the ways to configure one, naming the config file XDG_CONFIG_HOME points at."""
    done = run_server_expecting_exit(tmp_path)  # its XDG_CONFIG_HOME is tmp_path/config
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        (
            "sqale-mcp: no database configured: pass --db ALIAS=PATH (repeatable), --db-dir DIR or "
            "--demo, or put them in a --config FILE.toml (read without --config from "
            f"{tmp_path / 'config' / 'sqale-mcp' / 'config.toml'})\n"
        ),
    )


def test_bad_flag_exits_2_with_one_line(tmp_path: Path) -> None:
    """An invalid option value is one line and exit 2, not a usage dump."""
    done = run_server_expecting_exit(tmp_path, "--demo", "--max-concurrent", "0")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        (
            "sqale-mcp: --max-concurrent: Input should be greater than or equal to 1 (got 0); see "
            "`sqale-mcp --help`\n"
        ),
    )


async def test_mcp_run_serves_the_module_level_server(tmp_path: Path, fake_ollama: Any) -> None:
    """`mcp run mcp_server/server.py` takes its options from SQALE_MCP_ARGS."""
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    params = stdio_params(
        tmp_path,
        command=[console_script("mcp"), "run", "mcp_server/server.py"],
        SQALE_MCP_ARGS=f"--demo --ollama-host {fake.url} --max-rows 3",
    )
    async with Client(params) as client:
        tool = (await client.list_tools()).tools[0]
        result = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert "at most 3 rows" in tool.description
    assert result.structured_content["rows"] == [[16]]


def test_module_level_server_with_bad_args_exits_2(tmp_path: Path) -> None:
    """A bad SQALE_MCP_ARGS stops `mcp run` with one line naming the variable."""
    import subprocess

    done = subprocess.run(
        [console_script("mcp"), "run", "mcp_server/server.py"],
        cwd=REPO,
        env=server_env(tmp_path, SQALE_MCP_ARGS="--db nonsense"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "sqale-mcp (SQALE_MCP_ARGS='--db nonsense'): --db 'nonsense': write it as ALIAS=PATH, e.g. "
        "--db chinook=~/data/chinook.db"
    )

"""mcp_server/serving/stdio_shim.py: the SDK internals it relies on, and stdio served on the event loop."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

from mcp_server.serving.stdio_shim import PipeLines, PipeWriter, sdk_logging_skipped

ROOT = Path(__file__).resolve().parents[3]


def test_the_sdk_still_has_what_the_shim_relies_on() -> None:
    """MCPServer wraps a low-level Server as `_lowlevel_server`, whose run() takes the two streams and
    the initialization options; stdio_server() takes explicit stdin and stdout. When this fails,
    the SDK changed: adapt stdio_shim.py and its pin in pyproject.toml."""
    server = MCPServer("shim-check")
    lowlevel = getattr(server, "_lowlevel_server", None)
    assert isinstance(lowlevel, Server), "MCPServer no longer keeps its low-level Server in _lowlevel_server"
    assert list(inspect.signature(lowlevel.run).parameters)[:3] == [
        "read_stream",
        "write_stream",
        "initialization_options",
    ]
    assert callable(lowlevel.create_initialization_options)
    assert list(inspect.signature(stdio_server).parameters) == ["stdin", "stdout"]


_BUILD_A_SERVER = """
import logging, sys
from mcp.server.mcpserver import MCPServer
from mcp_server.serving.stdio_shim import sdk_logging_skipped
if sys.argv[1] == "configured":
    logging.getLogger().addHandler(logging.StreamHandler())
with sdk_logging_skipped():
    MCPServer("skip-check")
print([type(h).__name__ for h in logging.getLogger().handlers], "rich" in sys.modules)
"""


def test_the_sdk_logging_is_skipped_only_when_ours_is_configured() -> None:
    """Built inside sdk_logging_skipped(), an MCPServer leaves a configured root logger as it was and
    imports no rich; with no handler set, the SDK configures logging as it always did."""
    said = {
        case: subprocess.run(
            [sys.executable, "-c", _BUILD_A_SERVER, case], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.strip()
        for case in ("configured", "bare")
    }
    sdk_own = "['RichHandler'] True" if importlib.util.find_spec("rich") else "['StreamHandler'] False"
    assert said == {"configured": "['StreamHandler'] False", "bare": sdk_own}


def test_the_sdk_still_configures_logging_through_the_global_the_shim_replaces() -> None:
    """MCPServer() calls `configure_logging` of mcp.server.mcpserver.server with its log level. When
    this fails, the SDK changed: adapt sdk_logging_skipped() in stdio_shim.py and its pin."""
    import mcp.server.mcpserver.server as sdk_server_module

    levels: list[str] = []
    original = sdk_server_module.configure_logging
    sdk_server_module.configure_logging = levels.append  # type: ignore[assignment]
    try:
        MCPServer("shim-check", log_level="WARNING")
    finally:
        sdk_server_module.configure_logging = original
    assert levels == ["WARNING"]
    with sdk_logging_skipped():
        pass
    assert sdk_server_module.configure_logging is original


_SDK_CONFIGURES_A_CONFIGURED_ROOT = """
import logging
from mcp.server.mcpserver.utilities.logging import configure_logging
ours = logging.StreamHandler()
logging.getLogger().addHandler(ours)
def state():
    loggers = [logging.getLogger(name) for name in ("", "mcp")]
    return [(logger.name, logger.level, list(logger.handlers)) for logger in loggers]
before = state()
configure_logging("DEBUG")
print(state() == before)
"""


def test_the_sdk_logging_set_up_changes_nothing_once_ours_is_configured() -> None:
    """What sdk_logging_skipped() skips is a no-op with our handler on the root logger: the SDK's own
    configure_logging leaves every level and handler as it found them (so skipping it changes nothing
    but the time; when this fails, the SDK's set-up does more now: adapt the shim)."""
    said = subprocess.run(
        [sys.executable, "-c", _SDK_CONFIGURES_A_CONFIGURED_ROOT], capture_output=True, text=True, check=True
    )
    assert said.stdout.strip() == "True"


def _lines_of(chunks: list[bytes]) -> list[str]:
    """What PipeLines reads from a pipe fed `chunks` one write at a time by another thread."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)

    def feed() -> None:
        for chunk in chunks:
            os.write(write_fd, chunk)
            time.sleep(0.01)
        os.close(write_fd)

    async def read() -> list[str]:
        return [line async for line in PipeLines(read_fd)]

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        return anyio.run(read)
    finally:
        feeder.join()
        os.close(read_fd)


def test_lines_are_read_whole_across_reads() -> None:
    """A line split over writes (even inside a UTF-8 character) comes whole; a CR before the LF
    stays (JSON ignores it); bad bytes are replaced; a last line without its LF is read at EOF."""
    euro = "€".encode()
    chunks = [b'{"a": 1}\n{"b"', b': "x' + euro[:1], euro[1:] + b'"}\r\n\n', b"\xff\n", b'{"c": 3}']
    assert _lines_of(chunks) == ['{"a": 1}', '{"b": "x€"}\r', "", "\ufffd", '{"c": 3}']


def test_a_write_larger_than_the_pipe_waits_on_the_loop_for_the_reader() -> None:
    """4 MB to a pipe whose reader is slow: written whole, and the loop runs other tasks meanwhile."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    received = bytearray()

    def drain() -> None:
        while chunk := os.read(read_fd, 65536):
            received.extend(chunk)
            time.sleep(0.001)

    async def write() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await anyio.sleep(0.001)

        async with anyio.create_task_group() as group:
            group.start_soon(tick)
            await PipeWriter(write_fd).write("x" * 4_000_000 + "\n")
            group.cancel_scope.cancel()
        return ticks

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        ticks = anyio.run(write)
    finally:
        os.close(write_fd)
        reader.join()
        os.close(read_fd)
    assert (len(received), ticks > 3) == (4_000_001, True)


CLAIM_PROBE = """
import os, sys
from mcp_server.serving.stdio_shim import claimed_pipes
with claimed_pipes() as pipes:
    claimed = pipes is not None
    during = os.read(0, 10) if claimed else b"-"
    os.write(1, b"stray output\\n")
after = sys.stdin.readline()
print(f"claimed={claimed} during={during!r} after={after.strip()}", flush=True)
"""


def test_the_wire_is_claimed_and_given_back() -> None:
    """While claimed, fd 0 reads the null device and fd 1 writes to stderr (stray output misses the
    wire); afterwards both are the wire again."""
    done = subprocess.run(
        [sys.executable, "-c", CLAIM_PROBE],
        input=b"line on the wire\n",
        capture_output=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert (done.stdout.decode(), done.stderr.decode()) == (
        "claimed=True during=b'' after=line on the wire\n",
        "stray output\n",
    )


def test_a_regular_file_keeps_the_sdk_transport(tmp_path: Path) -> None:
    """stdin from a file (no event loop can wait on one): nothing is claimed, nothing diverted."""
    given = tmp_path / "input.txt"
    given.write_text("line on the wire\n")
    with given.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-c", CLAIM_PROBE],
            stdin=stdin,
            capture_output=True,
            cwd=ROOT,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    assert done.stdout.decode() == "stray output\nclaimed=False during=b'-' after=line on the wire\n"


@pytest.mark.slow
def test_the_server_answers_requests_without_a_thread_per_line(tmp_path: Path) -> None:
    """`python -m mcp_server` over pipes: 30 tools/list requests cost the server's threads fewer than
    4 voluntary context switches each (the SDK's own transport hands every read, write and flush to a
    worker thread and back: over 10)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SQALE_MCP_ARGS")}
    env |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    process = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--demo", "--ollama-host", "http://127.0.0.1:9"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
    )
    assert process.stdin is not None and process.stdout is not None

    def ask(number: int, method: str, params: dict[str, object]) -> dict[str, object]:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}).encode() + b"\n"
        )
        process.stdin.flush()
        while True:
            reply = json.loads(process.stdout.readline())
            if reply.get("id") == number:
                return reply  # type: ignore[no-any-return]

    try:
        ask(
            0,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
        process.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        # A question waits for the server's state to open (the runtime is down: a quick error).
        ask(1, "tools/call", {"name": "answer_sql_question", "arguments": {"question": "How many books?"}})
        for number in range(2, 6):
            ask(number, "tools/list", {})
        before = _voluntary_switches(process.pid)
        for number in range(6, 36):
            assert "result" in ask(number, "tools/list", {})
        per_request = (_voluntary_switches(process.pid) - before) / 30
    finally:
        process.stdin.close()
        process.wait(timeout=60)
        process.stdout.close()
    assert per_request < 4, per_request


def _voluntary_switches(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                total += int(line.split()[1])
    return total

"""Stopping `sqale-mcp` (the installed console script) with Ctrl-C or SIGTERM, in a terminal or not."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.console import console_script, default_sigint
from tests.support.mcp import server_env

pytestmark = pytest.mark.slow

STOP_WITHIN = 1.0  # seconds from the signal to the exit, as the issue asks
READY = b"every question will fail until this is fixed"  # logged once the server is serving
NOTICE = (
    "sqale-mcp: serving MCP on stdin/stdout and waiting for an MCP client to start it "
    "(see README: Claude Desktop, mcp dev); press Ctrl-C to stop."
)


def read_until(fd: int, marker: bytes, timeout: float = 30.0) -> bytes:
    """Bytes read from `fd` until `marker` appears; fail after `timeout` seconds or at EOF."""
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} within {timeout:g} s; got {seen.decode(errors='replace')}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, f"EOF before {marker!r}; got {seen.decode(errors='replace')}"
            seen += chunk
    return seen


def read_to_eof(fd: int, timeout: float) -> bytes:
    """Everything left on `fd` until EOF (a pty reports EOF as EIO)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    return seen


def test_ctrl_c_in_a_terminal_stops_the_stdio_server(tmp_path: Path, dead_url: str) -> None:
    """In a terminal: one line says it waits for a client; ^C exits 130 within 1 s, no traceback."""
    command = [console_script("sqale-mcp"), "--demo", "--ollama-host", dead_url]
    env = server_env(tmp_path)
    pid, terminal = pty.fork()
    if pid == 0:  # the child: stdin, stdout and stderr are the terminal, as in a shell
        os.chdir(tmp_path)
        default_sigint()
        os.execve(command[0], command, env)
    try:
        shown = read_until(terminal, READY)
        os.write(terminal, b"\x03")  # what Ctrl-C sends: the terminal turns it into SIGINT
        pressed = time.monotonic()
        shown += read_to_eof(terminal, timeout=10)
        _, status = os.waitpid(pid, 0)
        took = time.monotonic() - pressed
    finally:
        os.close(terminal)
    text = shown.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 130
    assert took < STOP_WITHIN, f"took {took:.2f} s"
    assert [line for line in text.splitlines() if line.startswith("sqale-mcp:")] == [NOTICE]
    assert "Traceback" not in text


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_ends_the_stdio_server(tmp_path: Path, dead_url: str, signum: int, code: int) -> None:
    """Under an MCP client (pipes, no terminal): SIGINT exits 130, SIGTERM 143, within 1 s, quietly."""
    server = subprocess.Popen(
        [console_script("sqale-mcp"), "--demo", "--ollama-host", dead_url],
        cwd=tmp_path,
        env=server_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
    )
    try:
        assert server.stderr is not None and server.stdout is not None
        log = read_until(server.stderr.fileno(), READY)
        server.send_signal(signum)
        sent = time.monotonic()
        returncode = server.wait(timeout=10)
        took = time.monotonic() - sent
        log += server.stderr.read()
        out = server.stdout.read()
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
        for pipe in (server.stdin, server.stdout, server.stderr):
            if pipe is not None:
                pipe.close()
    text = log.decode(errors="replace")
    assert (returncode, out) == (code, b"")
    assert took < STOP_WITHIN, f"took {took:.2f} s"
    assert "Traceback" not in text and NOTICE not in text

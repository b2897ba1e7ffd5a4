"""MCP over stdio with the pipes read and written on the event loop: no worker thread per line.

The SDK's `stdio_server()` wraps stdin and stdout in `anyio.wrap_file`, so every line read and
every write and flush of an answer is a hand-off to a worker thread and back (about 0.7 M
instructions and 20 context switches per tool call, bench/bench_server_cost.py). When fd 0 and
fd 1 are pipes or sockets, as an MCP client's are, this module claims them as the SDK does (the
wire moves to private descriptors; fd 0 then reads the null device and fd 1 writes to stderr, so
stray output from a handler or a child misses the wire), reads and writes the private
descriptors without blocking on the event loop, and gives them to the SDK's public
`stdio_server(stdin=..., stdout=...)`. A terminal or a regular file (someone typing JSON-RPC by
hand, a test feeding a file) keeps the SDK's own transport: neither can wait on the event loop.

What it relies on beyond the SDK's documented API, and tests/server/serving/test_stdio_shim.py
checks against the installed SDK (naming what changed when an upgrade breaks it):
- `MCPServer._lowlevel_server`: the low-level `Server` an `MCPServer` wraps, and its
  `run(read_stream, write_stream, initialization_options)` and `create_initialization_options()`,
  which `MCPServer.run_stdio_async` calls with the SDK's own streams;
- `mcp.server.stdio.stdio_server(stdin, stdout)`: iterates `stdin` for lines (`async for`) and
  awaits `stdout.write(text)` then `stdout.flush()` for each message;
- `MCPServer.__init__` calling `configure_logging` as a global of `mcp.server.mcpserver.server`
  (see `sdk_logging_skipped`).
pyproject.toml pins mcp to the range that test passed on.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.server.mcpserver.server as sdk_server_module
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

READ_CHUNK = 1 << 16  # bytes asked of the pipe per read: a large answer's request arrives in a few


class PipeLines:
    """The lines of a non-blocking pipe, read on the event loop (`async for line in ...`).

    Lines end at b"\\n" (a JSON-RPC message holds no raw newline); each is decoded as UTF-8
    with bad bytes replaced, as the SDK's transport does. A last line without its newline is
    given at the end of input.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending = bytearray()
        self._lines: list[bytes] = []
        self._ended = False

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._ended:
                raise StopAsyncIteration
            await self._read()
        return self._lines.pop(0).decode("utf-8", errors="replace")

    async def _read(self) -> None:
        try:
            chunk = os.read(self._fd, READ_CHUNK)
        except BlockingIOError:
            await anyio.wait_readable(self._fd)
            return
        if not chunk:
            self._ended = True
            if self._pending:
                self._lines.append(bytes(self._pending))
                self._pending.clear()
            return
        self._pending += chunk
        if b"\n" in chunk:
            *lines, rest = self._pending.split(b"\n")
            self._lines.extend(bytes(line) for line in lines)
            self._pending = bytearray(rest)


class PipeWriter:
    """Writes text to a non-blocking pipe on the event loop, waiting while the reader is behind;
    `written` is called once the first text is all written (the first reply is on the wire)."""

    def __init__(self, fd: int, written: Callable[[], object] | None = None) -> None:
        self._fd = fd
        self._written = written

    async def write(self, text: str) -> int:
        """Write all of `text` (as UTF-8); a reader that has gone raises BrokenPipeError."""
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                written = os.write(self._fd, data)
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
                continue
            data = data[written:]
        first, self._written = self._written, None
        if first is not None:
            first()
        return len(text)

    async def flush(self) -> None:
        """Nothing is buffered: each write went to the pipe."""


@dataclass(frozen=True)
class ClaimedPipes:
    """The wire's private descriptors while the standard ones are diverted."""

    stdin: PipeLines
    stdout: PipeWriter


def _waitable(fd: int) -> bool:
    """True for a pipe or a socket: what the event loop can wait on (a terminal or a file cannot)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextmanager
def claimed_pipes(replied: Callable[[], object] | None = None) -> Iterator[ClaimedPipes | None]:
    """The process's stdin and stdout as non-blocking private descriptors, with fd 0 reading the
    null device and fd 1 writing to stderr meanwhile; None (nothing changed) when they are not
    both pipes or sockets, or cannot be moved. Everything is put back on exit. `replied` is
    called once the first message is written."""
    if os.name != "posix" or not (_waitable(0) and _waitable(1)):
        yield None
        return
    moved: list[tuple[int, int, bool]] = []  # (standard fd, private fd, it was blocking)
    try:
        for fd, diversion in ((0, lambda: os.open(os.devnull, os.O_RDONLY)), (1, lambda: os.dup(2))):
            private = os_dup_above_std(fd)
            moved.append((fd, private, os.get_blocking(private)))
            divert = diversion()
            try:
                os.dup2(divert, fd)
            finally:
                os.close(divert)
            os.set_blocking(private, False)
    except OSError:
        _restore(moved)
        yield None
        return
    try:
        yield ClaimedPipes(PipeLines(moved[0][1]), PipeWriter(moved[1][1], replied))
    finally:
        _restore(moved)


def os_dup_above_std(fd: int) -> int:
    """A close-on-exec duplicate of `fd` numbered 3 or above (never a standard descriptor)."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def _restore(moved: list[tuple[int, int, bool]]) -> None:
    """Put each standard descriptor back on the wire, as blocking as it was."""
    for fd, private, blocking in reversed(moved):
        try:
            os.set_blocking(private, blocking)
            os.dup2(private, fd)
        except OSError as exc:  # the wire is gone: nothing is left to restore it to
            if exc.errno not in (errno.EBADF, errno.EPIPE):
                raise
        finally:
            os.close(private)


@contextmanager
def sdk_logging_skipped() -> Iterator[None]:
    """While an MCPServer is built, skip the SDK's `configure_logging` when the root logger already
    has handlers (ours, set before any server is built: serving/log_format.py).

    It imports rich and builds a console for a handler that `logging.basicConfig` then drops, as
    it does whenever the root logger has handlers: about 15 ms of the stdio server's time to its
    first reply (bench/bench_startup.py), for nothing. With no handler set it runs as before.
    """
    if not logging.getLogger().handlers:
        yield
        return
    sdk_configure = sdk_server_module.configure_logging
    sdk_server_module.configure_logging = _logging_already_configured
    try:
        yield
    finally:
        sdk_server_module.configure_logging = sdk_configure


def _logging_already_configured(level: str = "INFO") -> None:
    """The SDK's `configure_logging` when the root logger has handlers: `basicConfig` would do nothing."""


async def serve_stdio(server: MCPServer[Any], replied: Callable[[], object] | None = None) -> None:
    """Serve `server` over stdin and stdout until the client hangs up: on the event loop when both
    are pipes or sockets, else through the SDK's own transport (`run_stdio_async`). `replied` is
    called once the first reply is written (at once with the SDK's transport, which does not say)."""
    with claimed_pipes(replied) as pipes:
        if pipes is None:
            if replied is not None:
                replied()
            await server.run_stdio_async()
            return
        lowlevel = server._lowlevel_server  # the shim's one SDK internal (see above)
        # The SDK types its streams as anyio files; ours have the two methods it calls.
        async with stdio_server(stdin=pipes.stdin, stdout=pipes.stdout) as (  # type: ignore[arg-type]
            read_stream,
            write_stream,
        ):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

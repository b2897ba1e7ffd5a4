"""The stdio transport's pipes read and written by the event loop, not by a thread per line.

The SDK's stdio_server reads each line and writes (then flushes) each message through
anyio.wrap_file, that is in a worker thread: three thread hand-offs per tool call. When stdin
and stdout are pipes or sockets (as an MCP client starts us), they are served here by the event
loop instead. As the SDK does, fd 0 and fd 1 are diverted while serving (to the null device and
to stderr), so a stray read or print never touches the wire, and restored at the end.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

LINE_LIMIT = 1 << 30  # a JSON-RPC line may be long (the SDK's reader has no limit)


class LoopLines:
    """stdin's lines as the SDK's reader iterates them (str, newline kept)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> LoopLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class LoopWriter:
    """stdout as the SDK's writer uses it: write() then flush()."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        """Queue `text` on the pipe (the event loop writes it)."""
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        """Wait until the pipe has taken what was written (flow control)."""
        await self._writer.drain()


def _is_stream(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@asynccontextmanager
async def loop_stdio() -> AsyncIterator[tuple[LoopLines, LoopWriter] | None]:
    """(stdin, stdout) served by the event loop, or None when they are not pipes or sockets."""
    try:
        if not (_is_stream(0) and _is_stream(1)):
            yield None
            return
    except OSError:
        yield None
        return
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                     os.fdopen(wire_in, "rb", buffering=0))
    write_transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                              os.fdopen(wire_out, "wb", buffering=0))
    writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
    try:
        yield LoopLines(reader), LoopWriter(writer)
    finally:
        read_transport.close()
        write_transport.close()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)

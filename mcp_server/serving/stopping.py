"""Stopping the stdio server on Ctrl-C (SIGINT) or SIGTERM, promptly and without a traceback.

The MCP SDK reads stdin in a worker thread that no cancellation can interrupt, so a server
asked to stop would wait for the client's next line for ever. On a stop signal we cancel the
serving scope, give the runtime a moment to close its SQLite workers and model client, and
then end the process with 128 + the signal number, as a shell reports it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import anyio
from anyio import CancelScope

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
CLOSE_GRACE_SECONDS = 0.6  # time left to the runtime's clean-up before the process ends
TTY_NOTICE = (
    "sqale-mcp: serving MCP on stdin/stdout and waiting for an MCP client to start it "
    "(see README: Claude Desktop, mcp dev); press Ctrl-C to stop."
)


def print_tty_notice() -> None:
    """Tell a person who started the stdio server in a terminal what it is doing (one line)."""
    if sys.stdin is not None and sys.stdin.isatty():
        print(TTY_NOTICE, file=sys.stderr, flush=True)


async def exit_on_stop_signal(serving: CancelScope, state_closed: threading.Event) -> None:
    """Wait for SIGINT/SIGTERM, cancel `serving`, let the runtime close, then end the process."""
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        signum = await anext(aiter(signals))
    with anyio.CancelScope(shield=True):
        serving.cancel()
        with anyio.move_on_after(CLOSE_GRACE_SECONDS):
            while not state_closed.is_set():
                await anyio.sleep(0.01)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(128 + signum)  # the stdin thread cannot be joined; everything we own is closed

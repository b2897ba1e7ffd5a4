"""One SQLite worker process as the parent sees it: its limits, its start, a request's round trip
with its deadline, and its kill. The pool (`_pool.py`) keeps several and replaces the killed ones;
the process itself runs `_worker.py`.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import anyio

from ..errors import DatabaseWorkerError
from ._cancel import CancelCell, CancelToken
from ._opening import GuardSettings
from ._requests import QueryRequest, SchemaRequest


@dataclass(frozen=True)
class WorkerLimits:
    """Limits for the SQLite worker processes; parsed once from settings."""

    # Seconds a statement may run before it is interrupted: the model's own statements get as
    # long under `ask` and `eval` as under the server (--query-timeout takes its default here).
    query_timeout: float = 10.0
    kill_grace: float = 0.3  # extra seconds before a stuck worker is killed
    memory_mb: int = 1024  # address-space cap of each worker
    max_sql_length: int = 100_000
    # How long a statement waits for another program's write to end (SQLite's busy timeout): a
    # commit takes milliseconds, a batch job's transaction longer. At most half the query's time.
    busy_timeout_ms: int = 5_000
    count_cap: int = 100_000  # rows counted past the returned ones
    workers: int = 1
    schema_chars: int = 2_000_000  # names, types and defaults a schema keeps per database

    @property
    def busy_wait_ms(self) -> int:
        """The busy timeout the workers' connections get: busy_timeout_ms, within half a query's time
        (the progress handler that enforces a query's deadline does not run while SQLite waits)."""
        return max(1, min(self.busy_timeout_ms, int(self.query_timeout * 500)))

    def guard_settings(self) -> GuardSettings:
        """What every guarded connection of these limits is opened with."""
        return GuardSettings(
            max_sql_length=self.max_sql_length,
            busy_timeout_ms=self.busy_wait_ms,
            schema_chars=self.schema_chars,
        )


BOOT_SECONDS = 60.0  # a worker that has not started within this is killed

# Run with -P (the current folder is not put on sys.path) and our package root put first
# explicitly: a user's own `agent/` package in the working folder must not shadow ours.
_BOOT = (
    "import sys, pickle; sys.path.insert(0, sys.argv[1]); "
    "from agent.sqlite._worker import worker_main; "
    "worker_main(*pickle.loads(bytes.fromhex(sys.argv[2])))"
)
_STDERR_SHOWN = 2_000  # characters of a dead worker's stderr put in the error


class WorkerProcess:
    """One worker process and the pipes to it."""

    def __init__(self, limits: WorkerLimits) -> None:
        if os.name != "posix":
            # The worker is handed its pipes and the shared cancel page by fd (pass_fds).
            raise DatabaseWorkerError(
                "the SQLite worker needs a POSIX system: run sqale-mcp on Linux, "
                "macOS or WSL (native Windows is not supported yet)"
            )
        self.limits = limits
        # kill() runs from the pool's close and from a thread whose reply it stops, maybe at once:
        # the pipes are closed once, by one of them (a second os.close may hit a reused descriptor).
        self._kill_lock = threading.Lock()
        self._killed = False
        self._next_id = 0
        self.ready = False
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        cancel_file = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        cancel_file.write(b"\0" * 8)
        cancel_file.flush()
        self._cancel_file = cancel_file
        self.cancel = CancelCell(cancel_file.fileno())
        args = (to_child_r, from_child_w, cancel_file.fileno(), limits.memory_mb, limits.guard_settings())
        package_root = str(Path(__file__).resolve().parents[2])
        # Its stderr goes to a file: a worker that dies at start (a broken install) says why there.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-c", _BOOT, package_root, pickle.dumps(args).hex()],
                pass_fds=(to_child_r, from_child_w, cancel_file.fileno()),
                # stdout may be the MCP stdio protocol: the worker must never write to it.
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
            )
        except OSError as exc:
            raise DatabaseWorkerError(f"cannot start the SQLite worker process: {exc}") from exc
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.outbox = multiprocessing.connection.Connection(to_child_w, readable=False)
        self.inbox = multiprocessing.connection.Connection(from_child_r, writable=False)

    def _await_ready(self, cancel: CancelToken | None) -> bool:
        """Wait for a new worker to finish starting; False (worker killed) if it cannot."""
        deadline = time.monotonic() + BOOT_SECONDS
        try:
            while time.monotonic() < deadline:
                if cancel is not None and cancel.cancelled_at is not None:
                    break
                if self.inbox.poll(0.05):
                    self.ready = self.inbox.recv() == (0, "ready")
                    break
                if self.process.poll() is not None:
                    self._raise_not_started()
        except (EOFError, OSError):
            self._raise_not_started()
        if not self.ready:
            self.kill()
        return self.ready

    def _raise_not_started(self) -> NoReturn:
        """A worker that dies before it is ready is broken, not busy: raise with its stderr."""
        code = self.process.wait(timeout=5)
        self._stderr.seek(0)
        said = self._stderr.read().decode("utf-8", "replace").strip()[-_STDERR_SHOWN:]
        self.kill()
        raise DatabaseWorkerError(
            f"the SQLite worker process ({sys.executable}) exited with status {code} before answering; "
            f"its stderr: {said or '(empty)'}"
        )

    def call(self, request: QueryRequest | SchemaRequest, cancel: CancelToken | None) -> Any:
        """Send one request; kill the process if it overruns. Returns the reply or None if killed."""
        # Interpreter start-up (slow on a loaded machine) is not part of a query's time limit.
        if not self.ready and not self._await_ready(cancel):
            return None
        request_id, deadline = self.send(request)
        return self.reply(request_id, deadline, cancel)

    def send(self, request: QueryRequest | SchemaRequest) -> tuple[int, float]:
        """Send one request to a ready worker: (its id, the moment past which the worker is killed)."""
        self._next_id += 1
        self.outbox.send_bytes(pickle.dumps((self._next_id, request)))  # send() builds a ForkingPickler
        return self._next_id, time.monotonic() + request.timeout + self.limits.kill_grace

    def reply(self, request_id: int, deadline: float, cancel: CancelToken | None) -> Any:
        """Wait, blocking, for the reply to `request_id`; None (the worker killed) past the deadline,
        `kill_grace` after a cancel, or when the worker dies."""
        remove = cancel.on_cancel(lambda: self.cancel.request(request_id)) if cancel else None
        try:
            while True:
                end = deadline
                if cancel is not None and cancel.cancelled_at is not None:
                    end = min(end, cancel.cancelled_at + self.limits.kill_grace)
                remaining = end - time.monotonic()
                if remaining <= 0:
                    self.kill()
                    return None
                if self.inbox.poll(min(remaining, 0.05)):
                    reply_id, reply = self.inbox.recv()
                    if reply_id == request_id:
                        return reply
                elif self.process.poll() is not None:  # died, e.g. out of memory in C code
                    self.kill()
                    return None
        except (EOFError, OSError):
            self.kill()
            return None
        finally:
            if remove:
                remove()

    async def areply(self, request_id: int, deadline: float) -> Any:
        """`reply` waiting on the event loop: the pipe is watched by the loop, no thread waits.

        Cancelled, it asks the worker to stop the statement and leaves the rest of the wait (up to
        `kill_grace`, then a kill) to `finish`, in a thread, as an abandoned `reply` would.
        """
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.kill()
                    return None
                with anyio.move_on_after(remaining) as waited:
                    await anyio.wait_readable(self.inbox.fileno())
                if waited.cancelled_caught:
                    continue  # past the deadline: killed above
                # Readable: a reply, or the end of the pipe (the worker died: EOFError below).
                reply_id, reply = self.inbox.recv()
                if reply_id == request_id:
                    return reply
        except (EOFError, OSError):
            self.kill()
            return None

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """Stop the process at once, and close its pipes (once, whoever else kills it meanwhile)."""
        with self._kill_lock:
            if self._killed:
                return
            self._killed = True
            self._stop()

    def _stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        self.outbox.close()
        self.inbox.close()
        self._cancel_file.close()
        self._stderr.close()

"""The parent's side of the SQLite workers: starting each process, its deadline and kill, and the pool.

A request is sent to a worker process (`_worker.py`) over a pipe; the reply is awaited on the event
loop or in a thread, and a worker that overruns its deadline (or its memory cap, or is cancelled
past its grace) is killed and replaced.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, overload

import anyio

from ..errors import DatabaseBusyError, DatabasePathError, DatabaseWorkerError
from ._cancel import CancelCell, CancelToken
from ._opening import GuardSettings
from ._worker import QueryRequest, SchemaRequest, WorkerFailure
from .types import QueryResult, QueryStatus, Schema


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


BOOT_SECONDS = 60.0  # a worker that has not started within this is killed

# Run with -P (the current folder is not put on sys.path) and our package root put first
# explicitly: a user's own `agent/` package in the working folder must not shadow ours.
_BOOT = (
    "import sys, pickle; sys.path.insert(0, sys.argv[1]); "
    "from agent.sqlite._worker import worker_main; "
    "worker_main(*pickle.loads(bytes.fromhex(sys.argv[2])))"
)
_STDERR_SHOWN = 2_000  # characters of a dead worker's stderr put in the error


class _Worker:
    """One worker process and the pipes to it."""

    def __init__(self, limits: WorkerLimits) -> None:
        if os.name != "posix":
            # The worker is handed its pipes and the shared cancel page by fd (pass_fds).
            raise DatabaseWorkerError(
                "the SQLite worker needs a POSIX system: run sqale-mcp on Linux, "
                "macOS or WSL (native Windows is not supported yet)"
            )
        self.limits = limits
        self._next_id = 0
        self.ready = False
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        cancel_file = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        cancel_file.write(b"\0" * 8)
        cancel_file.flush()
        self._cancel_file = cancel_file
        self.cancel = CancelCell(cancel_file.fileno())
        settings = GuardSettings(
            max_sql_length=limits.max_sql_length,
            busy_timeout_ms=limits.busy_wait_ms,
            schema_chars=limits.schema_chars,
        )
        args = (to_child_r, from_child_w, cancel_file.fileno(), limits.memory_mb, settings)
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
        """Stop the process at once."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        self.outbox.close()
        self.inbox.close()
        self._cancel_file.close()
        self._stderr.close()


class WorkerPool:
    """A pool of SQLite worker processes; every SQLite statement runs through it."""

    def __init__(self, limits: WorkerLimits | None = None) -> None:
        self.limits = limits or WorkerLimits()
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._slots = threading.Semaphore(max(1, self.limits.workers))
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.kills = 0  # how many workers had to be killed (for tests, benchmarks and metrics)
        self.starts = 0  # how many worker processes were started (metrics)

    @overload
    def run(self, request: QueryRequest, cancel: CancelToken | None = None) -> QueryResult: ...

    @overload
    def run(self, request: SchemaRequest, cancel: CancelToken | None = None) -> Schema | QueryResult: ...

    def run(
        self, request: QueryRequest | SchemaRequest, cancel: CancelToken | None = None
    ) -> QueryResult | Schema:
        """Run a request on a free worker, blocking: the query's result, or the schema.

        A request that overruns or is cancelled comes back as a KILLED/CANCELLED QueryResult.
        Raises DatabasePathError when the file cannot be read as SQLite, DatabaseBusyError when
        another program holds it locked past the busy wait, DatabaseWorkerError when the worker
        itself fails.
        """
        with self._slots:
            worker = self._checkout()
            started = time.monotonic()
            try:
                reply = worker.call(request, cancel)
            except DatabaseWorkerError:  # it died before it was ready: broken, not busy
                self._retire(worker)
                raise
            reply = self._returned(worker, request, reply, cancel, started)
        return _answer(request, reply, self.limits.busy_wait_ms)

    @overload
    async def arun(self, request: QueryRequest, cancel: CancelToken) -> QueryResult: ...

    @overload
    async def arun(self, request: SchemaRequest, cancel: CancelToken) -> Schema | QueryResult: ...

    async def arun(self, request: QueryRequest | SchemaRequest, cancel: CancelToken) -> QueryResult | Schema:
        """`run` from the event loop. With a slot free and a worker idle and ready, the request is
        sent and its reply awaited on the loop (no thread to hand it to and back); otherwise `run`
        waits in a thread. Either way one worker runs it under the same deadline and kill.

        Cancelled, the worker is asked to stop (`cancel`) and the rest of the wait, up to
        `kill_grace` and then a kill, goes on in a thread, as an abandoned `run` does.
        """
        worker = self._idle_ready() if self._slots.acquire(blocking=False) else None
        if worker is None:
            try:
                return await anyio.to_thread.run_sync(lambda: self.run(request, cancel), abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                cancel.cancel()  # the abandoned thread's worker stops the statement
                raise
        held_here = True  # the slot and the worker are this call's until handed to a thread
        try:
            started = time.monotonic()
            request_id, deadline = worker.send(request)
            try:
                reply = await worker.areply(request_id, deadline)
            except anyio.get_cancelled_exc_class():
                cancel.cancel()
                threading.Thread(
                    target=self._finish,
                    args=(worker, request, request_id, deadline, cancel, started),
                    name="sqlite-cancel",
                    daemon=True,
                ).start()
                held_here = False
                raise
            reply = self._returned(worker, request, reply, cancel, started)
        except BaseException:
            if held_here:
                self._retire(worker)
            raise
        finally:
            if held_here:
                self._slots.release()
        return _answer(request, reply, self.limits.busy_wait_ms)

    def _finish(
        self,
        worker: _Worker,
        request: QueryRequest | SchemaRequest,
        request_id: int,
        deadline: float,
        cancel: CancelToken,
        started: float,
    ) -> None:
        """The rest of a cancelled `arun`'s wait, in a thread: the reply, or the kill."""
        try:
            self._returned(worker, request, worker.reply(request_id, deadline, cancel), cancel, started)
        finally:
            self._slots.release()

    def _returned(
        self,
        worker: _Worker,
        request: QueryRequest | SchemaRequest,
        reply: Any,
        cancel: CancelToken | None,
        started: float,
    ) -> Any:
        """The worker back to the idle ones with its reply; or, killed (None), retired, and the
        CANCELLED or KILLED result."""
        if reply is not None:
            self._idle.put(worker)
            return reply
        self._retire(worker)
        held = time.monotonic() - started
        if cancel is not None and cancel.cancelled_at is not None:
            return QueryResult(QueryStatus.CANCELLED, error="cancelled", seconds=held)
        return QueryResult(
            QueryStatus.KILLED,
            error=f"stopped: the query ran past its {request.timeout:g} s limit (or its "
            f"{self.limits.memory_mb} MB memory cap) and was killed",
            seconds=held,
        )

    def _idle_ready(self) -> _Worker | None:
        """An idle worker that is alive and has started, taken; None (its slot given back) without one."""
        try:
            worker = self._idle.get_nowait()
        except queue.Empty:
            worker = None
        if worker is not None and worker.ready and worker.alive:
            return worker
        if worker is not None:
            self._idle.put(worker)  # starting (or dead): `run` waits for it (or retires it) in a thread
        self._slots.release()
        return None

    def start_worker(self) -> None:
        """Start one worker now rather than at the first request, so that its interpreter starts
        while the caller does other work (the server imports the MCP SDK meanwhile)."""
        self._idle.put(self._started())

    def _checkout(self) -> _Worker:
        try:
            worker = self._idle.get_nowait()
            if worker.alive:
                return worker
            self._retire(worker)
        except queue.Empty:
            pass
        return self._started()

    def _started(self) -> _Worker:
        """A new worker of this pool (counted in `starts`); the pool refuses once it is closed."""
        with self._lock:
            if self._closed:
                raise DatabaseWorkerError("the worker pool is closed")
            worker = _Worker(self.limits)
            self._all.add(worker)
            self.starts += 1
        return worker

    def _retire(self, worker: _Worker) -> None:
        self.kills += 1
        worker.kill()
        with self._lock:
            self._all.discard(worker)

    def close(self) -> None:
        """Stop every worker."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
        for w in workers:
            w.kill()

    def __del__(self) -> None:  # a forgotten engine must not leave processes behind
        if not getattr(self, "_closed", True):  # False only once __init__ has run
            self.close()


def _answer(request: QueryRequest | SchemaRequest, reply: Any, busy_wait_ms: int) -> Any:
    """The worker's reply, or the error a failure it carried back stands for."""
    if isinstance(reply, WorkerFailure):
        if reply.kind == "path":
            raise DatabasePathError(reply.message)
        if reply.kind == "busy":
            raise DatabaseBusyError(
                f"{request.path}: busy: another program is writing to it and held it locked for more "
                f"than {busy_wait_ms / 1000:g} s (SQLite: {reply.message}); try again once it is done"
            )
        if reply.kind == "sqlite":
            raise DatabasePathError(
                f"{request.path}: cannot be read as an SQLite database "
                f"({reply.message}); check the file is not damaged"
            )
        raise DatabaseWorkerError(f"{reply.kind}: {reply.message}")
    return reply

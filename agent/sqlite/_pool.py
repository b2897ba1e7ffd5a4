"""The pool of SQLite workers: every statement runs through it, on a worker process of its own.

A request is sent to a worker process (`_process.py`, running `_worker.py`) over a pipe; the reply
is awaited on the event loop or in a thread, and a worker that overruns its deadline (or its memory
cap, or is cancelled past its grace) is killed and replaced.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, overload

import anyio

from ..errors import DatabaseBusyError, DatabasePathError, DatabaseWorkerError
from ._cancel import CancelToken
from ._process import WorkerLimits, WorkerProcess
from ._requests import QueryRequest, SchemaRequest, WorkerFailure
from .types import QueryResult, QueryStatus, Schema


class WorkerPool:
    """A pool of SQLite worker processes; every SQLite statement runs through it."""

    def __init__(self, limits: WorkerLimits | None = None) -> None:
        self.limits = limits or WorkerLimits()
        self._idle: queue.LifoQueue[WorkerProcess] = queue.LifoQueue()
        self._slots = threading.Semaphore(max(1, self.limits.workers))
        self._all: set[WorkerProcess] = set()
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
        worker: WorkerProcess,
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
        worker: WorkerProcess,
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

    def _idle_ready(self) -> WorkerProcess | None:
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

    def _checkout(self) -> WorkerProcess:
        try:
            worker = self._idle.get_nowait()
            if worker.alive:
                return worker
            self._retire(worker)
        except queue.Empty:
            pass
        return self._started()

    def _started(self) -> WorkerProcess:
        """A new worker of this pool (counted in `starts`); the pool refuses once it is closed."""
        with self._lock:
            if self._closed:
                raise DatabaseWorkerError("the worker pool is closed")
            worker = WorkerProcess(self.limits)
            self._all.add(worker)
            self.starts += 1
        return worker

    def _retire(self, worker: WorkerProcess) -> None:
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

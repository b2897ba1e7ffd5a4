"""The owner's statements, tried first in this process: a guarded connection of our own per rule set.

A verified library's same-question SQL is the owner's text with nothing of the asker's bound to it,
and most of it answers in well under a millisecond, where a worker's round trip costs half of one.
It runs here, on the caller's thread (the server's event loop), on the same `GuardedConnection` a
worker uses: the authorizer, the hide rules, the reads completed from its program, the fitting to
the byte budget. What a worker has that this process has not (its address-space cap, a kill for a
step SQLite cannot interrupt) is made up for by a bounded connection (GuardSettings.bounded: only
functions linear in their values, values of at most a megabyte, no virtual tables nor pragmas, so
every step of a program is short), a deadline of INLINE_SECONDS checked between steps, and no
wait for a writer's lock. A statement those limits stop, or that does not end OK for any reason,
runs again in a worker under the usual limits, and the worker's result is the one served; its text
is not tried here again (TO_WORKER_KEPT texts are remembered): at once when it was refused or
failed, after TIMEOUTS_SENT deadlines when it ran out of time (the first run of a text also reads
its program and the schema's b-trees, which a slow machine may not fit in the deadline), never
for a writer's lock.
So a result served from here is one the worker would have given.

Nothing the asker writes runs here: a statement with values bound (a template's) never does.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from ._paths import NotADatabaseFile, check_database_file
from ._process import WorkerLimits
from ._requests import QueryRequest
from .hiding import HideRules
from .types import QueryResult, QueryStatus

if TYPE_CHECKING:
    from ._guard import GuardedConnection

INLINE_SECONDS = 0.02  # the longest an owner's statement may hold the event loop
TO_WORKER_KEPT = 256  # texts that went to a worker, not tried here again
TIMEOUTS_SENT = 2  # deadlines in a row that send a text to a worker for good


class InlineConnections:
    """One database file's guarded connections in this process, one per rule set, opened on first use."""

    def __init__(self, path: Path, limits: WorkerLimits) -> None:
        self.path = path
        # A worker's settings, less its busy wait: a writer's lock is met at once, never waited for.
        # One connection per rule set, so each keeps its prepared statements (reuse_statements).
        self._settings = replace(
            limits.guard_settings(), busy_timeout_ms=0, bounded=True, reuse_statements=True
        )
        self._connections: dict[HideRules | None, GuardedConnection] = {}
        self._to_worker: OrderedDict[str, int] = OrderedDict()  # text: deadlines it met in a row
        # One statement at a time: a connection is not shared between threads mid-statement.
        self._lock = threading.Lock()
        self._never_cancelled = SimpleNamespace(value=False)  # the loop waits for nothing else meanwhile

    def run(self, request: QueryRequest) -> QueryResult | None:
        """The statement's result when it ended OK here within the inline limits; None: run it in a worker."""
        if request.params or not self._lock.acquire(blocking=False):
            return None
        try:
            if self._to_worker.get(request.sql, 0) >= TIMEOUTS_SENT:
                return None
            guarded = self._connection(request.hide or None)
            if guarded is None:
                return None
            result = guarded.run(
                request.sql,
                max_rows=request.max_rows,
                count_cap=request.count_cap,
                cell_limit=request.cell_limit,
                timeout=min(request.timeout, INLINE_SECONDS),
                byte_budget=request.byte_budget,
                hide=request.hide,
                reads=request.reads,
            )
            # A count the deadline stopped short of the cap would be lower than the worker's.
            stopped = result.total_is_lower_bound and result.total_rows < request.count_cap
            if result.ok and not stopped:
                self._to_worker.pop(request.sql, None)
                return result
            if result.status is not QueryStatus.BUSY:  # a writer's lock passes; the rest would recur
                timed_out = stopped or result.status is QueryStatus.TIMEOUT
                self._remember(request.sql, 1 if timed_out else TIMEOUTS_SENT)
            return None
        finally:
            self._lock.release()

    def _remember(self, sql: str, strikes: int) -> None:
        """Count `strikes` against `sql` (TIMEOUTS_SENT send it to a worker from now on); the oldest
        of TO_WORKER_KEPT texts is forgotten."""
        self._to_worker[sql] = self._to_worker.pop(sql, 0) + strikes
        if len(self._to_worker) > TO_WORKER_KEPT:
            self._to_worker.popitem(last=False)

    def _connection(self, hide: HideRules | None) -> GuardedConnection | None:
        """The open connection for `hide`, (re)opened when missing or the path names another file now;
        None when it cannot be opened (the worker opens it and says why)."""
        from ._guard import GuardedConnection  # the guard loads with the first owner's statement

        guarded = self._connections.get(hide)
        if guarded is not None and not guarded.replaced():
            return guarded
        if guarded is not None:  # the file was swapped for another: this one reads the old, unlinked file
            del self._connections[hide]
            guarded.close()
        try:
            check_database_file(self.path)
            guarded = GuardedConnection(self.path, self._settings, self._never_cancelled)
        except (sqlite3.Error, NotADatabaseFile):
            return None
        self._connections[hide] = guarded
        return guarded

    def close(self) -> None:
        """Close every connection opened here."""
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for guarded in connections:
            guarded.close()

    def __del__(self) -> None:  # a Database nobody closed must not leave open connections behind
        if getattr(self, "_connections", None):  # only once __init__ has run and something is open
            self.close()

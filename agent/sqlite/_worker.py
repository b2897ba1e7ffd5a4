"""The SQLite worker process: what it is asked (a query or the schema) and the loop that answers.

It runs in its own interpreter, started by the parent (`_process.py`), under an address-space cap, and
owns every SQLite connection: each on a guarded connection (`_guard.py`) for one file and rule set.
Our own failures come back as values (`WorkerFailure`), which the pool raises as our errors.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import pickle
import sqlite3
from pathlib import Path
from typing import Any

from ._cancel import CancelCell
from ._guard import GuardedConnection
from ._opening import GuardSettings, busy_error
from ._paths import NotADatabaseFile, check_database_file
from ._requests import SchemaRequest, WorkerFailure
from .hiding import HideRules


def worker_main(read_fd: int, write_fd: int, cancel_fd: int, memory_mb: int, settings: GuardSettings) -> None:
    """The worker process's loop: receive a request, answer it, forever."""
    try:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # not on this platform: the deadline kill remains
        pass
    inbox = multiprocessing.connection.Connection(read_fd, writable=False)
    outbox = multiprocessing.connection.Connection(write_fd, readable=False)
    cancel = CancelCell(cancel_fd)
    # One connection per file and rule set: a connection keeps state no authorizer sees again
    # (FTS5's prepared statements, sqlite_stmt), so two rule sets never share one.
    connections: dict[tuple[str, HideRules | None], GuardedConnection] = {}
    outbox.send((0, "ready"))  # the parent starts a query's deadline only after this
    while True:
        try:
            request_id, request = inbox.recv()
        except (EOFError, KeyboardInterrupt):
            return
        cancel.current = request_id
        key = (request.path, request.hide or None)
        try:
            guarded = connections.get(key)
            if guarded is not None and guarded.replaced():
                # The file was swapped for another one (same path, new inode): an open
                # connection would keep reading the old, unlinked file.
                guarded.close()
                guarded = None
            if guarded is None:
                # The file may have changed since start: (re)opening checks it again.
                check_database_file(Path(request.path))
                guarded = GuardedConnection(Path(request.path), settings, cancel)
                connections[key] = guarded
            if isinstance(request, SchemaRequest):
                reply: Any = guarded.hidden_schema(request.hide) if request.hide else guarded.read_schema()
            else:
                reply = guarded.run(
                    request.sql,
                    max_rows=request.max_rows,
                    count_cap=request.count_cap,
                    cell_limit=request.cell_limit,
                    timeout=request.timeout,
                    byte_budget=request.byte_budget,
                    hide=request.hide,
                    reads=request.reads,
                    params=dict(request.params),
                )
        except sqlite3.Error as exc:  # the file cannot be opened or its schema read
            _drop(connections, key)
            reply = WorkerFailure("busy" if busy_error(exc) else "sqlite", str(exc))
        except NotADatabaseFile as exc:
            _drop(connections, key)
            reply = WorkerFailure("path", str(exc))
        except Exception as exc:  # carried to the parent, which raises it as our error
            _drop(connections, key)
            reply = WorkerFailure(type(exc).__name__, str(exc))
        # As Connection.send, less the ForkingPickler (and its dispatch table) it builds per message.
        outbox.send_bytes(pickle.dumps((request_id, reply)))


def _drop(
    connections: dict[tuple[str, HideRules | None], GuardedConnection], key: tuple[str, HideRules | None]
) -> None:
    """Forget a connection that failed, closed (the next request opens and checks the file again)."""
    guarded = connections.pop(key, None)
    if guarded is not None:
        with contextlib.suppress(sqlite3.Error):  # closing what already failed: nothing to report
            guarded.close()

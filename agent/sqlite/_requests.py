"""What the parent asks of a SQLite worker process, and the failure a worker carries back.

They live apart from the worker's loop (`_worker.py`) so that the server, which sends them, does not
import the worker's own modules (the guard, the authorizer, the fitting of results) to start: they
load in the server's process only with the first of the owner's statements it runs itself (`_inline.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .hiding import HideRules
from .types import SqlValue


@dataclass(frozen=True)
class QueryRequest:
    """One statement for a worker to run, with its limits and its database's rules."""

    path: str
    sql: str
    max_rows: int
    count_cap: int
    cell_limit: int | None
    timeout: float
    byte_budget: int | None = None  # bytes the rows may weigh as JSON; cut in the worker
    hide: HideRules | None = None  # tables and columns the statement may not read
    reads: bool = True  # complete tables_read/columns_read from the statement's program
    # Values bound to the statement's named parameters (`:month`): bound by SQLite, never
    # spliced into the text. Empty: the statement is run without binding anything.
    params: tuple[tuple[str, SqlValue], ...] = ()


@dataclass(frozen=True)
class SchemaRequest:
    """A database's schema, read by a worker under its rules."""

    path: str
    timeout: float
    hide: HideRules | None = None  # tables and columns left out of the schema


@dataclass(frozen=True)
class WorkerFailure:
    """Raised-in-worker failure carried back as a value (our bug, re-raised in the parent)."""

    kind: str
    message: str

"""All SQLite access: validated paths, guarded read-only workers, cached schema facts.

Nothing outside this package opens a database. Statements run in killable worker
processes (`_worker`, each started and killed as a `_process`, kept by `_pool`, cancelled
through `_cancel`); the owner's own statements (a verified library's) are tried first in this
process under tighter limits (`_inline`). Both run on
connections guarded by an allow-list authorizer (`_guard` opens them, `_authorizer` decides,
`_schema_read` reads their schema).
`text_index` ranks similar questions with FTS5 in a private in-memory index (never a user's file).
The owner's hide rules (`hiding`) are resolved against the whole file (`_hiding_file`) and
enforced by the same authorizer; `_refusals` words what a refused statement is told, from the
names `_sql_names` finds in it. A `Database` states its rules when it is made (`hide=`: the
rules the configuration gives, empty when it gives none) and never drops them; a handle with
no rules on purpose is the named, operator-only `Database.unruled` (tests/project/test_code_rules.py
lists where product code may make one). What a statement read is the authorizer's reads completed from
its program (`_reads`). A worker keeps one connection per file and rule set. Each request to a
worker is a span, made here in the parent (agent/telemetry/steps.py): the worker has no telemetry.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ..errors import DatabasePathError
from ._cancel import CancelToken
from ._inline import InlineConnections
from ._paths import SQLITE_HEADER, stat_signature
from ._pool import WorkerPool
from ._process import WorkerLimits
from ._requests import QueryRequest, SchemaRequest
from ._sql_names import sql_names
from .hiding import HideRules, hiding_findings
from .sql_text import first_keyword
from .types import (
    BlobRef,
    ClippedText,
    Column,
    ForeignKey,
    HideReport,
    QueryResult,
    QueryStatus,
    ResultCut,
    Schema,
    SqlValue,
    Table,
)

if TYPE_CHECKING:
    from ..telemetry.gate import Untraced
    from ..telemetry.steps import StatementTrace

# Reading the schema is our own statement, not the model's: a large schema (or a loaded
# machine) must not make a database unusable because of a short query deadline.
SCHEMA_READ_MIN_SECONDS = 5.0


def validate_database_path(path: str | Path) -> Path:
    """Resolve `path` and check it is a regular SQLite file; raise DatabasePathError if not."""
    raw = Path(path).expanduser()
    try:
        resolved = raw.resolve(strict=True)
    except FileNotFoundError as exc:
        raise DatabasePathError(f"{raw}: no such file; check the path") from exc
    except OSError as exc:
        raise DatabasePathError(f"{raw}: cannot be resolved ({exc.strerror})") from exc
    if not resolved.is_file():
        raise DatabasePathError(f"{resolved}: not a regular file; give the path of a .sqlite file")
    try:
        with resolved.open("rb") as fh:
            header = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise DatabasePathError(f"{resolved}: cannot be read ({exc.strerror}); check its permissions") from exc
    if not header:
        raise DatabasePathError(f"{resolved}: empty file (0 bytes), not an SQLite database; check the path")
    if header != SQLITE_HEADER:
        raise DatabasePathError(
            f"{resolved}: not an SQLite 3 database (the file does not start with the SQLite header)"
        )
    return resolved


def create_database(target: Path, script: str) -> Path:
    """Build a new database file from an SQL script, atomically (our own data, never the model's)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build next to the target and rename: a concurrent reader never sees half a database.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp_name)
        try:
            conn.executescript(script)
            conn.commit()
        finally:
            conn.close()
        os.replace(tmp_name, target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


def _statement_span(
    operation: str | None, namespace: str, sql: str | None
) -> AbstractContextManager[StatementTrace | Untraced]:
    """The span of one worker request (None: the schema read), from agent/telemetry/gate.py,
    imported when first used: the worker processes import this package and need no telemetry."""
    from ..telemetry.gate import SCHEMA_READ, statement_span

    return statement_span(SCHEMA_READ if operation is None else operation, namespace, sql)


def _finished(traced: StatementTrace | Untraced, result: QueryResult) -> None:
    traced.finished(
        status=result.status.value,
        returned=len(result.rows),
        total=result.total_rows,
        cut=result.truncated or result.cut_to_fit,
        seconds=result.seconds,
    )


class Database:
    """One validated database file, queried read-only through a WorkerPool."""

    def __init__(self, path: str | Path, workers: WorkerPool | None = None, *, hide: HideRules) -> None:
        """`hide`: the database's rules as the configuration gives them (empty when it gives none).

        Every statement and schema fact of this handle is under them, and nothing drops them
        later (`hide` is read-only). A handle without rules on purpose is `Database.unruled`.
        """
        self.path = validate_database_path(path)
        self._hide = hide or None  # tables and columns no statement or schema fact may show
        self._owns_workers = workers is None
        self.workers = workers or WorkerPool()
        # The schema and the file signature it was read at, replaced together (read without the lock).
        self._schema: tuple[Schema, tuple[int, ...]] | None = None
        self._schema_lock = threading.Lock()
        self._inline = InlineConnections(self.path, self.workers.limits)  # the owner's statements

    @classmethod
    def unruled(cls, path: str | Path, workers: WorkerPool | None = None) -> Database:
        """The file with no hide rules at all: operator only.

        For files served without rules (eval's benchmarks) and the operator's own checks of
        SQL they wrote (`golden add`). SQL a client or the model wrote never runs on one where
        the configuration has rules: tests/project/test_code_rules.py fails when product code outside
        the operator modules it lists makes one.
        """
        return cls(path, workers, hide=HideRules())

    @property
    def hide(self) -> HideRules | None:
        """The rules every statement of this handle runs under; None when there are none."""
        return self._hide

    def hidden_names(self, sql: str) -> tuple[str, ...]:
        """The hidden tables and columns `sql` names (`table Invoice`, `column Customer.Email`).

        Found from the text and the rules' report alone, never by running anything, so the
        answer cannot depend on hidden data. For the operator's log only: whoever wrote the
        SQL is told what SQLite says of a missing name, never this.
        """
        report = self.schema().hiding if self._hide else None
        if report is None:
            return ()
        written = sql_names(sql)
        found = []
        for name in [n for _, names in report.matches for n in names] + list(report.derived):
            table, dot, column = name.partition(".")
            if table.casefold() in written and (not dot or column.casefold() in written):
                found.append(f"column {name}" if dot else f"table {name}")
        return tuple(dict.fromkeys(found))

    def all_hidden_names(self) -> tuple[str, ...]:
        """Every table and column the rules hide (`Table`, `Table.Column`), from their report.

        Operator only: what content capture takes out of spans (agent/telemetry/content.py).
        """
        report = self.schema().hiding if self._hide else None
        if report is None:
            return ()
        return tuple(dict.fromkeys([n for _, names in report.matches for n in names] + list(report.derived)))

    @property
    def limits(self) -> WorkerLimits:
        return self.workers.limits

    def file_signature(self) -> tuple[int, ...]:
        """What changes when the file (or its WAL) changes: mtime, size and inode of each."""
        return stat_signature(self.path)

    def schema(self) -> Schema:
        """Schema facts, cached and re-read when the file (or its WAL) changes.

        Raises DatabasePathError when the file cannot be read as SQLite or its schema read is
        stopped, DatabaseWorkerError when the worker fails.
        """
        sig = stat_signature(self.path)
        with self._schema_lock:
            if self._schema is None or sig != self._schema[1]:
                timeout = max(self.limits.query_timeout, SCHEMA_READ_MIN_SECONDS)
                with _statement_span(None, self.path.name, None) as traced:
                    result = self.workers.run(SchemaRequest(str(self.path), timeout, self._hide))
                    if isinstance(result, QueryResult):  # the schema read itself was killed
                        traced.finished(
                            status=result.status.value, returned=0, total=0, cut=False, seconds=result.seconds
                        )
                        raise DatabasePathError(f"{self.path}: reading the schema failed: {result.error}")
                    traced.finished(
                        status="ok",
                        returned=len(result.tables),
                        total=len(result.tables),
                        cut=False,
                        seconds=0.0,
                    )
                self._schema = (result, sig)
            return self._schema[0]

    def query(
        self,
        sql: str,
        *,
        max_rows: int,
        cell_limit: int | None = None,
        count_cap: int | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        byte_budget: int | None = None,
        reads: bool = True,
        params: Mapping[str, SqlValue] | None = None,
    ) -> QueryResult:
        """Run one read-only statement; every failure comes back as a QueryResult value.

        With `byte_budget`, the worker cuts cells, columns and rows so the rows weigh at most
        that many bytes as JSON before they leave it (see QueryResult.cut_to_fit). With `reads`
        (the default), tables_read and columns_read are completed from the statement's program
        (`_reads`); without, they are the authorizer's, which misses what USING and NATURAL
        joins read: pass False only for statements whose reads nobody looks at. `params` are
        bound to the statement's named parameters (`:month`) by SQLite in the worker, never
        spliced into its text.
        """
        request = self._request(
            sql,
            max_rows=max_rows,
            cell_limit=cell_limit,
            count_cap=count_cap,
            timeout=timeout,
            byte_budget=byte_budget,
            reads=reads,
            params=params,
        )
        with _statement_span(first_keyword(sql).upper(), self.path.name, sql) as traced:
            result = self.workers.run(request, cancel)
            _finished(traced, result)
        return result

    def _request(
        self,
        sql: str,
        *,
        max_rows: int,
        cell_limit: int | None,
        count_cap: int | None,
        timeout: float | None,
        byte_budget: int | None,
        reads: bool,
        params: Mapping[str, SqlValue] | None,
    ) -> QueryRequest:
        return QueryRequest(
            path=str(self.path),
            sql=sql,
            max_rows=max(0, max_rows),
            count_cap=self.limits.count_cap if count_cap is None else count_cap,
            cell_limit=cell_limit,
            timeout=self.limits.query_timeout if timeout is None else timeout,
            hide=self._hide,
            byte_budget=byte_budget,
            reads=reads,
            params=tuple((params or {}).items()),
        )

    async def aschema(self) -> Schema:
        """`schema()` without blocking the event loop: at once while the cached schema is current."""
        # Two stat() calls are cheap enough for the event loop (the verified library checks its
        # file the same way); only a schema that must be read again goes to a thread.
        cached = self._schema
        if cached is not None and stat_signature(self.path) == cached[1]:
            return cached[0]
        return await anyio.to_thread.run_sync(self.schema)

    async def aquery(
        self,
        sql: str,
        *,
        max_rows: int,
        cell_limit: int | None = None,
        count_cap: int | None = None,
        timeout: float | None = None,
        byte_budget: int | None = None,
        reads: bool = True,
        params: Mapping[str, SqlValue] | None = None,
        owner_sql: bool = False,
    ) -> QueryResult:
        """`query()` without blocking the event loop (the worker's reply is awaited on it when a
        worker is free: WorkerPool.arun); cancelling the caller interrupts the query.

        `owner_sql`: the text is the owner's (a verified library's), so without `params` it is tried
        first in this process under limits the event loop can bear (`_inline`); the worker runs
        what those limits stop.
        """
        request = self._request(
            sql,
            max_rows=max_rows,
            cell_limit=cell_limit,
            count_cap=count_cap,
            timeout=timeout,
            byte_budget=byte_budget,
            reads=reads,
            params=params,
        )
        with _statement_span(first_keyword(sql).upper(), self.path.name, sql) as traced:
            result = self._inline.run(request) if owner_sql else None
            if result is None:
                result = await self.workers.arun(request, CancelToken())
            _finished(traced, result)
        return result

    def close(self) -> None:
        """Close this handle's own connections; stop the worker processes if it started them."""
        self._inline.close()
        if self._owns_workers:
            self.workers.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "BlobRef",
    "CancelToken",
    "ClippedText",
    "Column",
    "Database",
    "ForeignKey",
    "HideReport",
    "HideRules",
    "QueryResult",
    "QueryStatus",
    "ResultCut",
    "Schema",
    "SqlValue",
    "Table",
    "WorkerLimits",
    "WorkerPool",
    "create_database",
    "hiding_findings",
    "validate_database_path",
]

"""Guarded read-only connections: opening one, running a statement, reading the schema through it.

Runs in the worker processes, and in the server's own for the owner's statements (`_inline`, on
bounded connections). What a statement may do is `_authorizer`'s; how the schema is read,
`_schema_read`'s.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import hiding
from ._authorizer import (
    BOUNDED_VALUE_BYTES,
    READING_KEYWORDS,
    STATEMENTS_KEPT,
    AuthorizedReads,
    StatementGuard,
    module_names,
    rtree_shadow_tables,
    unbounded_tables,
)
from ._btrees import BtreeCatalog
from ._fit import ResultFitter
from ._formats import TOO_BIG, CheckedFormats, names_formats, used_by_schema
from ._hiding_file import resolve_on
from ._opening import (
    IMMUTABLE_WARNING,
    GuardSettings,
    busy_error,
    busy_text,
    database_uri,
    file_identity,
    wal_files_note,
    wal_without_shm,
)
from ._reads import KnownPrograms, Read, counted_names, merged, program_key, statement_reads
from ._refusals import Refusal, statement_refusal
from ._schema_read import read_schema
from .sql_text import first_keyword
from .types import HideReport, QueryResult, QueryStatus, Schema, SqlValue


class GuardedConnection:
    """One read-only connection with every guard installed."""

    def __init__(self, path: Path, settings: GuardSettings, cancel_flag: Any) -> None:
        self.path = path
        self.identity = file_identity(path)
        self.guard = StatementGuard(cancel_flag)
        self.settings = settings
        self.immutable = False
        companions = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
        missing = [p for p in companions if not p.exists()]
        self._hiding: tuple[tuple[hiding.HideRules, int], tuple[hiding.Withheld, HideReport]] | None = None
        self.catalog = BtreeCatalog()
        # A statement run again (a verified answer, an answer the model tested first) skips its EXPLAIN.
        self._programs = KnownPrograms()
        self._formats: tuple[sqlite3.Connection, CheckedFormats] | None = None  # see _checked_connection
        self._bounded_at: int | None = None  # the schema version the unbounded tables were found at
        self._authorized = AuthorizedReads(keeps=settings.reuse_statements)  # what each statement read
        try:
            self.conn = self._connect(path, settings, immutable=False)
        except sqlite3.OperationalError:
            if not wal_without_shm(path):
                raise
            # A WAL database in a folder we cannot write has no -shm to map; immutable
            # mode reads the main file only (commits still in the -wal are not seen).
            self.conn = self._connect(path, settings, immutable=True)
            self.immutable = True
        # A WAL reader creates the -wal and -shm files when they are missing and the folder is
        # writable (SQLite's design; the database file is untouched): say so instead of hiding it.
        self.created_files = [p.name for p in missing if p.exists()]

    def _connect(self, path: Path, settings: GuardSettings, *, immutable: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(
            database_uri(path, immutable=immutable),
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=settings.busy_timeout_ms / 1000,
            # A kept statement is not authorized again: only where the rules never change (see
            # GuardSettings.reuse_statements).
            cached_statements=STATEMENTS_KEPT if settings.reuse_statements else 0,
        )
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.execute("PRAGMA trusted_schema = OFF")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute(f"PRAGMA busy_timeout = {int(settings.busy_timeout_ms)}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # fails now, not later
            self.guard.rtree_shadow_tables = rtree_shadow_tables(conn)
            self.guard.modules = module_names(conn)
            size = path.stat().st_size
            longest = BOUNDED_VALUE_BYTES if settings.bounded else max(settings.min_value_length, size)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, longest)
            conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, settings.max_sql_length)
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.set_authorizer(self.guard.authorize)
            conn.set_progress_handler(self.guard.progress, settings.progress_opcodes)
        except BaseException:
            conn.close()
            raise
        return conn

    def run(
        self,
        sql: str,
        *,
        max_rows: int,
        count_cap: int,
        cell_limit: int | None,
        timeout: float,
        byte_budget: int | None = None,
        hide: hiding.HideRules | None = None,
        reads: bool = True,
        params: Mapping[str, SqlValue] | None = None,
    ) -> QueryResult:
        """Run one statement; errors come back as values; rows are cut to `byte_budget` here.

        With `reads`, what it read is completed from its program (see `_reads`) before it runs;
        without, it is what the authorizer saw (complete except for USING and NATURAL joins).
        `params` are bound to its named parameters by SQLite (its program is read with them
        bound too); without them nothing is bound.
        """
        start = time.monotonic()
        self._authorized.serve(hide)
        schema_version = None  # read once per statement: the bounded check's serves its program too
        if self.settings.bounded:
            try:
                schema_version = self._find_unbounded(start + timeout)
            except sqlite3.Error as exc:  # a writer holds the file: said as for the statement
                return self._error_result(exc, start)
        withheld = self.resolved_hiding(hide)[0] if hide else hiding.NOTHING_WITHHELD
        if refusal := statement_refusal(withheld, sql):  # what SQLite resolves unauthorized
            return _refused(refusal, time.monotonic() - start)
        self.guard.reset(start + timeout, withheld, sql)
        keyword = first_keyword(sql)
        if keyword not in READING_KEYWORDS:
            return QueryResult(
                QueryStatus.DENIED,
                error=(
                    f"not allowed: {keyword.upper() or 'an empty statement'}; only reading "
                    "statements (SELECT / WITH) are allowed"
                ),
                seconds=time.monotonic() - start,
            )
        reads = reads and keyword in _PROGRAM_KEYWORDS
        limits = (max_rows, count_cap, cell_limit, byte_budget)
        bound = params or ()
        reading = (reads, schema_version)
        checked = self._checked_connection() if names_formats(sql) else None
        if checked is not None:
            result = self._execute(checked, sql, bound, withheld, start, limits, reading)
            if result is not None:
                return result
            # SQLite refused our printf where the schema calls it: run on its own functions.
            self.guard.reset(start + timeout, withheld, sql)
        result = self._execute(self.conn, sql, bound, withheld, start, limits, reading)
        assert result is not None  # only the twin's own functions are refused
        return result

    def _find_unbounded(self, deadline: float) -> int:
        """The tables a bounded statement may not read, found again whenever the schema changed
        (another program may add a virtual table to a file being served); the schema version."""
        self.guard.reset(deadline)
        version = self.conn.execute("PRAGMA schema_version").fetchone()[0]
        if version != self._bounded_at:
            self.guard.reset(deadline)  # a statement of its own (a pragma table's first SELECT)
            self.guard.unbounded_tables = unbounded_tables(self.conn, self.guard.modules)
            self._bounded_at = version
        return int(version)

    def _execute(
        self,
        conn: sqlite3.Connection,
        sql: str,
        bound: Mapping[str, SqlValue] | tuple[()],
        withheld: hiding.Withheld,
        start: float,
        limits: tuple[int, int, int | None, int | None],
        reading: tuple[bool, int | None],
    ) -> QueryResult | None:
        """Run `sql` on `conn` (this connection, or its twin with checked formats; None when SQLite
        refused the twin's functions where the schema calls them). `reading`: whether to read its
        program, and the schema version already read for this statement (None: not yet)."""
        max_rows, count_cap, cell_limit, byte_budget = limits
        program = self._program_reads(conn, sql, withheld, bound, reading[1]) if reading[0] else None
        tables, columns = program or (set(), set())
        if self._formats is not None:
            self._formats[1].overflowed = None
        try:
            cursor = conn.execute(sql, bound)
            fitter = ResultFitter(tuple(d[0] for d in cursor.description or ()), cell_limit, byte_budget)
            total, lower_bound = self._collect(cursor, fitter, max_rows, count_cap)
            cursor.close()
        except sqlite3.Error as exc:
            if conn is not self.conn and used_by_schema(exc):
                return None
            return self._error_result(exc, start)
        except UnicodeEncodeError as exc:  # a lone surrogate: not text SQLite can be given
            return QueryResult(
                QueryStatus.SQL_ERROR,
                error=(
                    f"the SQL has an invalid character ({exc.object[exc.start]!r} at position "
                    f"{exc.start}); remove it"
                ),
                seconds=time.monotonic() - start,
            )
        except MemoryError:
            return QueryResult(
                QueryStatus.SQL_ERROR,
                error="out of memory: the query needs "
                "more memory than the worker may use; aggregate or add LIMIT",
                seconds=time.monotonic() - start,
            )
        kept = fitter.kept_columns if fitter.kept_columns >= 0 else len(fitter.columns)
        seen = self._authorized.of(self.guard, (sql, conn is self.conn))
        if seen is None:  # a kept statement whose reads are forgotten: prepared again, it says them
            conn.set_authorizer(self.guard.authorize)  # SQLite drops every statement it kept
            self.guard.reset(self.guard.deadline, withheld, sql)
            return self._execute(conn, sql, bound, withheld, start, limits, reading)
        authorizer_tables = set(seen[0])
        counted = counted_names(seen[0], seen[1])
        if program is not None and counted:  # a CTE only counted is no table read
            authorizer_tables -= self.catalog.unread_counts(counted, tables)
        storage = self.catalog.virtual_storage(authorizer_tables, tables) if program is not None else set()
        authorizer_tables -= storage
        authorizer_columns = {(t, c) for t, c in seen[1] if t not in storage}
        return QueryResult(
            QueryStatus.OK,
            fitter.columns[:kept],
            tuple(fitter.rows),
            total,
            lower_bound,
            tables_read=merged(tables, authorizer_tables),
            columns_read=merged(columns, authorizer_columns),
            seconds=time.monotonic() - start,
            columns_cut=fitter.columns_cut,
            cells_cut_to=fitter.cells_cut_to,
            rows_cut=fitter.rows_cut,
            byte_budget=byte_budget,
        )

    def _program_reads(
        self,
        conn: sqlite3.Connection,
        sql: str,
        withheld: hiding.Withheld,
        bound: Mapping[str, SqlValue] | tuple[()],
        schema_version: int | None,
    ) -> tuple[set[str], set[Read]] | None:
        """The tables and columns `sql`'s program reads, less anything `withheld` hides (None: not known).

        The program is prepared under the same authorizer and rules as the statement itself, so
        it opens nothing the statement could not; the schema reads that name its b-trees are ours
        (run with nothing withheld), and no hidden name is kept. Runs within the statement's own
        deadline.
        """
        deadline = self.guard.deadline

        def explain() -> list[Any]:
            self.guard.reset(deadline, withheld, sql)
            return conn.execute("EXPLAIN " + sql, bound).fetchall()

        def fetch(schema_sql: str, params: tuple[Any, ...]) -> list[Any]:
            self.guard.reset(deadline)
            return self.conn.execute(schema_sql, params).fetchall()

        try:
            version = fetch("PRAGMA schema_version", ())[0][0] if schema_version is None else schema_version
            key = program_key(
                sql, bound, conn is self.conn, version, fetch("PRAGMA data_version", ())[0][0], withheld
            )
            if self.catalog.version == version and (known := self._programs.get(key)) is not None:
                return known
            program = statement_reads(explain, fetch, self.catalog)
        except (sqlite3.Error, UnicodeEncodeError, MemoryError):
            return None  # it cannot be prepared or ran out of time: running it says so
        finally:
            self.guard.reset(deadline, withheld, sql)
        if program is None:
            return None
        tables, columns = program
        if withheld:
            tables = {t for t in tables if not withheld.hides_table(t)}
            columns = {(t, c) for t, c in columns if not withheld.hides_column(t, c)}
        if self.catalog.version == version:
            self._programs.keep(key, tables, columns)
        return tables, columns

    def _collect(
        self, cursor: sqlite3.Cursor, fitter: ResultFitter, max_rows: int, count_cap: int
    ) -> tuple[int, bool]:
        """Rows into `fitter` while they fit, then a count of the rest; (total, lower bound).

        One row at a time: a count over rows of megabytes holds one of them, not a thousand.
        """
        total = 0
        collecting = max_rows > 0
        try:
            for raw in cursor:
                total += 1
                if collecting:
                    if fitter.add(raw) and len(fitter.rows) < max_rows:
                        continue
                    collecting = False
                    continue
                if total >= count_cap:
                    return total, cursor.fetchone() is not None
        except (sqlite3.OperationalError, MemoryError) as exc:
            out_of_memory = isinstance(exc, MemoryError) or "out of memory" in str(exc)
            if collecting or not (out_of_memory or self._interrupted()):
                raise
            return total, True  # the deadline or the memory cap stopped the count, not the answer
        return total, False

    def _interrupted(self) -> bool:
        return bool(self.guard.cancel_flag.value) or time.monotonic() > self.guard.deadline

    def _error_result(self, exc: sqlite3.Error, start: float) -> QueryResult:
        elapsed = time.monotonic() - start
        message = str(exc)
        if self._formats is not None and self._formats[1].overflowed is not None:
            message = TOO_BIG  # our printf raised where SQLite's would have returned NULL
        if self.guard.denied is not None and self.guard.hidden:
            return _refused(Refusal(self.guard.denied, self.guard.missing), elapsed)
        if self.guard.denied is not None:
            return QueryResult(QueryStatus.DENIED, error=f"not allowed: {self.guard.denied}", seconds=elapsed)
        if message == "interrupted":
            if self.guard.cancel_flag.value:
                return QueryResult(QueryStatus.CANCELLED, error="cancelled", seconds=elapsed)
            return QueryResult(
                QueryStatus.TIMEOUT, error="interrupted: the query ran past its time limit", seconds=elapsed
            )
        if isinstance(exc, sqlite3.ProgrammingError) and "one statement" in message:
            message = "only one statement per call is allowed"
        if busy_error(exc):
            return QueryResult(
                QueryStatus.BUSY, error=busy_text(message, self.settings.busy_timeout_ms), seconds=elapsed
            )
        return QueryResult(QueryStatus.SQL_ERROR, error=message, seconds=elapsed)

    def read_schema(self) -> Schema:
        """Tables and views with their columns and foreign keys (see `_schema_read.read_schema`).

        The warnings about how the file was opened (an immutable snapshot, -wal/-shm files
        created) come first.
        """
        self.guard.reset(float("inf"))
        warnings = [IMMUTABLE_WARNING] if self.immutable else []
        if self.created_files:
            warnings.append(wal_files_note(self.created_files))
        return read_schema(self.conn, self.settings.schema_chars, warnings)

    def hidden_schema(self, hide: hiding.HideRules) -> Schema:
        """The schema without what `hide` hides, with the report of what each rule hid."""
        withheld, report = self.resolved_hiding(hide)
        return hiding.filter_schema(self.read_schema(), withheld, report)

    def resolved_hiding(self, hide: hiding.HideRules) -> tuple[hiding.Withheld, HideReport]:
        """`hide` resolved against the current schema (cached until the schema changes)."""
        self.guard.reset(float("inf"))
        version = self.conn.execute("PRAGMA schema_version").fetchone()[0]
        if self._hiding is None or self._hiding[0] != (hide, version):
            resolved = resolve_on(self.conn, self.guard, hide)
            self._hiding = ((hide, version), resolved)
        return self._hiding[1]

    def _checked_connection(self) -> sqlite3.Connection:
        """A twin of this connection whose printf and format fail past the value cap (`_formats`),
        opened on first use: Python can add a function to a connection but never remove it."""
        if self._formats is None:
            conn = self._connect(self.path, self.settings, immutable=self.immutable)
            formats = CheckedFormats(conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH))
            formats.install(conn)
            self._formats = (conn, formats)
        return self._formats[0]

    def replaced(self) -> bool:
        """True when the path now names another file than the one this connection opened."""
        return file_identity(self.path) != self.identity

    def close(self) -> None:
        if self._formats is not None:
            self._formats[0].close()
            self._formats[1].close()
        self.conn.close()


_PROGRAM_KEYWORDS = frozenset({"select", "with"})  # statements whose program reads tables


def _refused(refusal: Refusal, seconds: float) -> QueryResult:
    """A refusal under hide rules: a hidden name fails as SQLite fails a missing one."""
    if refusal.missing:
        return QueryResult(QueryStatus.SQL_ERROR, error=refusal.text, seconds=seconds)
    return QueryResult(QueryStatus.HIDDEN, error=f"not available: {refusal.text}", seconds=seconds)

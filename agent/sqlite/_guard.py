"""Guarded read-only connections. Runs inside the worker process only."""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from . import hiding
from ._fit import ResultFitter
from .types import Column, ForeignKey, HideReport, QueryResult, QueryStatus, Schema, Table

# Pragmas that only report. Those in _PRAGMAS_WITH_NAME_ARG take a table or index name as
# their argument; every other pragma is allowed only without an argument, because an
# argument to e.g. `user_version` or `journal_mode` would set it.
_PRAGMAS_WITH_NAME_ARG = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
     "foreign_key_list", "foreign_key_check", "table_list"}
)
_PRAGMAS_NO_ARG = frozenset(
    {"collation_list", "function_list", "module_list", "pragma_list", "compile_options",
     "page_count", "page_size", "freelist_count", "user_version", "schema_version",
     "application_id", "encoding", "data_version", "table_list", "foreign_key_check",
     "integrity_check", "quick_check"}
)
# Functions that reach outside the database or change how SQLite parses input.
_DENIED_FUNCTIONS = frozenset(
    {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit", "fts5",
     "sqlite_dbpage", "zipfile", "sqlar_compress", "sqlar_uncompress"}
)
# Statements that can only read. Checked before preparing, because a few statements
# (REINDEX without arguments, for one) never consult the authorizer.
_READING_KEYWORDS = frozenset({"select", "with", "values", "pragma", "explain"})
_ALWAYS_ALLOWED = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}
)


IMMUTABLE_WARNING = (
    "opened as an immutable snapshot: the database is in WAL mode and its folder is read-only "
    "with no -shm file, so commits still in the -wal file are not visible; checkpoint the database "
    "(PRAGMA wal_checkpoint) or make its folder writable to see them"
)


def wal_files_note(names: list[str]) -> str:
    """The warning for -wal/-shm files SQLite created beside a WAL-mode database."""
    return (f"the database is in WAL mode and opening it created {' and '.join(names)} beside it: "
            "SQLite's readers need them (they hold no data of ours, the database file itself is "
            "never written) and may leave them there; to avoid them, switch the database to "
            "rollback mode once with `PRAGMA journal_mode=DELETE` or serve it from a read-only folder")


@dataclass(frozen=True)
class GuardSettings:
    """Limits applied to every guarded connection."""

    max_sql_length: int = 100_000
    min_value_length: int = 16 * 1024 * 1024
    busy_timeout_ms: int = 500
    progress_opcodes: int = 1000
    schema_chars: int = 2_000_000  # names, types and defaults kept per database schema


# The R*Tree module prepares (never runs) writes to its shadow tables when it connects.
_RTREE_MODULE = re.compile(r"\bUSING\s+(?:rtree|rtree_i32)\b", re.IGNORECASE)
_RTREE_SHADOWS = ("_node", "_rowid", "_parent")
_SHADOW_WRITES = frozenset({sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE})
SCHEMA_NOTE_CHARS = 200  # how much of SQLite's reason an unreadable object's note keeps
# A view that expands to more table references than this is not described: SQLite would
# spend seconds expanding it (a chain of views each joining the previous one twice doubles
# at every step) before failing at its own limit of 65,535.
MAX_VIEW_REFERENCES = 10_000
_SQL_NOISE = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?(?:\*/|\Z)", re.DOTALL)
_SQL_NAME = re.compile(r'"((?:[^"]|"")*)"|`([^`]*)`|\[([^\]]*)\]|([A-Za-z_][A-Za-z0-9_$]*)')


class _StatementGuard:
    """Authorizer and progress handler for one connection; state is per statement."""

    def __init__(self, cancel_flag: Any) -> None:
        self.cancel_flag = cancel_flag
        self.rtree_shadow_tables: frozenset[str] = frozenset()
        self.deadline = float("inf")
        self.first_action: int | None = None
        self.tables_read: set[str] = set()
        self.columns_read: set[tuple[str, str]] = set()
        self.denied: str | None = None
        self.hidden = False  # the denial is a hide rule's, not the read-only guard's
        self.withheld = hiding.Withheld()
        self.named: frozenset[str] = frozenset()  # names the statement itself writes
        self.pragma_table = False

    def reset(self, deadline: float, withheld: hiding.Withheld | None = None, sql: str = "") -> None:
        self.deadline = deadline
        self.first_action = None
        self.tables_read = set()
        self.columns_read = set()
        self.denied = None
        self.hidden = False
        self.withheld = withheld or hiding.Withheld()
        self.named = hiding.sql_names(sql) if self.withheld else frozenset()
        self.pragma_table = False

    def authorize(self, action: int, arg1: str | None, arg2: str | None,
                  db_name: str | None, source: str | None) -> int:
        if self.first_action is None:
            self.first_action = action
        if self.withheld and action == sqlite3.SQLITE_READ and arg1:
            # The schema read a pragma_* table makes when it is first prepared is not the model's.
            implicit = self.pragma_table and arg1 == "sqlite_master" and arg2 == "ROWID"
            reason = None if implicit else hiding.hidden_read_reason(self.withheld, arg1, arg2, source,
                                                              self.named)
            if reason is not None:
                return self._hide(reason)
        if action in _ALWAYS_ALLOWED:
            if action == sqlite3.SQLITE_READ and arg1:
                self.tables_read.add(arg1)
                if arg2:  # "" when a table is read without a column, as for count(*)
                    self.columns_read.add((arg1, arg2))
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in _DENIED_FUNCTIONS:
                return self._deny(f"function {arg2}() is not allowed")
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if self.withheld and name in hiding.DESCRIBING_PRAGMAS:
                return self._hide(f"PRAGMA {arg1} is not available on this database; {hiding.SCHEMA_HINT}")
            if name in _PRAGMAS_WITH_NAME_ARG or (name in _PRAGMAS_NO_ARG and arg2 is None):
                return sqlite3.SQLITE_OK
            return self._deny(f"PRAGMA {arg1} is not allowed (read-only pragmas only)")
        # Preparing the first SELECT over an eponymous virtual table (pragma_table_info)
        # makes SQLite report an UPDATE of sqlite_master with no trigger or view source.
        if (action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and source is None
                and self.first_action == sqlite3.SQLITE_SELECT):
            self.pragma_table = True
            return sqlite3.SQLITE_OK
        # Inside a SELECT, an R*Tree being connected prepares its shadow-table statements;
        # they only run for writes to the R*Tree, which no reading statement can make (and
        # query_only plus the read-only open still refuse any write).
        if (action in _SHADOW_WRITES and source is None and arg1 in self.rtree_shadow_tables
                and self.first_action == sqlite3.SQLITE_SELECT):
            return sqlite3.SQLITE_OK
        return self._deny("only reading statements (SELECT / WITH) are allowed")

    def _hide(self, reason: str) -> int:
        if self.denied is None:
            self.denied, self.hidden = reason, True
        return sqlite3.SQLITE_DENY

    def _deny(self, reason: str) -> int:
        if self.denied is None:
            self.denied = reason
        return sqlite3.SQLITE_DENY

    def progress(self) -> int:
        if self.cancel_flag.value or time.monotonic() > self.deadline:
            return 1
        return 0


def database_uri(path: Path, *, immutable: bool = False) -> str:
    """The read-only URI for a database file."""
    params = {"mode": "ro"}
    if immutable:
        params["immutable"] = "1"
    return path.as_uri() + "?" + urlencode(params)


class GuardedConnection:
    """One read-only connection with every guard installed."""

    def __init__(self, path: Path, settings: GuardSettings, cancel_flag: Any) -> None:
        self.path = path
        self.identity = _file_identity(path)
        self.guard = _StatementGuard(cancel_flag)
        self.settings = settings
        self.immutable = False
        companions = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
        missing = [p for p in companions if not p.exists()]
        self._hiding: tuple[tuple[hiding.HideRules, int], tuple[hiding.Withheld, HideReport]] | None = None
        try:
            self.conn = self._connect(path, settings, immutable=False)
        except sqlite3.OperationalError:
            if not _wal_without_shm(path):
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
            database_uri(path, immutable=immutable), uri=True, isolation_level=None,
            check_same_thread=False, timeout=settings.busy_timeout_ms / 1000,
            # A cached statement is not authorized again, so its reads would go unrecorded
            # (tables_read) and it would skip the per-statement guard state.
            cached_statements=0,
        )
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.execute("PRAGMA trusted_schema = OFF")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute(f"PRAGMA busy_timeout = {int(settings.busy_timeout_ms)}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # fails now, not later
            self.guard.rtree_shadow_tables = _rtree_shadow_tables(conn)
            size = path.stat().st_size
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(settings.min_value_length, size))
            conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, settings.max_sql_length)
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.set_authorizer(self.guard.authorize)
            conn.set_progress_handler(self.guard.progress, settings.progress_opcodes)
        except BaseException:
            conn.close()
            raise
        return conn

    def run(self, sql: str, *, max_rows: int, count_cap: int, cell_limit: int | None,
            timeout: float, byte_budget: int | None = None,
            hide: hiding.HideRules | None = None) -> QueryResult:
        """Run one statement; errors come back as values; rows are cut to `byte_budget` here."""
        start = time.monotonic()
        withheld = self.resolved_hiding(hide)[0] if hide else hiding.Withheld()
        if withheld and hiding.uses_unchecked_join(sql) and hiding.sql_names(sql) & withheld.risky:
            # SQLite resolves USING/NATURAL join columns without asking the authorizer.
            return QueryResult(QueryStatus.HIDDEN, error=f"not available: {hiding.JOIN_HINT}",
                               seconds=time.monotonic() - start)
        self.guard.reset(start + timeout, withheld, sql)
        keyword = first_keyword(sql)
        if keyword not in _READING_KEYWORDS:
            return QueryResult(QueryStatus.DENIED, error=(
                f"not allowed: {keyword.upper() or 'an empty statement'}; only reading "
                "statements (SELECT / WITH) are allowed"), seconds=time.monotonic() - start)
        try:
            cursor = self.conn.execute(sql)
            fitter = ResultFitter(tuple(d[0] for d in cursor.description or ()), cell_limit,
                                  byte_budget)
            total, lower_bound = self._collect(cursor, fitter, max_rows, count_cap)
            cursor.close()
        except sqlite3.Error as exc:
            return self._error_result(exc, start)
        except UnicodeEncodeError as exc:  # a lone surrogate: not text SQLite can be given
            return QueryResult(QueryStatus.SQL_ERROR, error=(
                f"the SQL has an invalid character ({exc.object[exc.start]!r} at position "
                f"{exc.start}); remove it"), seconds=time.monotonic() - start)
        except MemoryError:
            return QueryResult(QueryStatus.SQL_ERROR, error="out of memory: the query needs "
                               "more memory than the worker may use; aggregate or add LIMIT",
                               seconds=time.monotonic() - start)
        kept = fitter.kept_columns if fitter.kept_columns >= 0 else len(fitter.columns)
        return QueryResult(QueryStatus.OK, fitter.columns[:kept], tuple(fitter.rows), total,
                           lower_bound, tables_read=frozenset(self.guard.tables_read),
                           columns_read=frozenset(self.guard.columns_read),
                           seconds=time.monotonic() - start, columns_cut=fitter.columns_cut,
                           cells_cut_to=fitter.cells_cut_to, rows_cut=fitter.rows_cut,
                           byte_budget=byte_budget)

    def _collect(self, cursor: sqlite3.Cursor, fitter: ResultFitter, max_rows: int,
                 count_cap: int) -> tuple[int, bool]:
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
        if self.guard.denied is not None and self.guard.hidden:
            return QueryResult(QueryStatus.HIDDEN, error=f"not available: {self.guard.denied}",
                               seconds=elapsed)
        if self.guard.denied is not None:
            return QueryResult(QueryStatus.DENIED, error=f"not allowed: {self.guard.denied}",
                               seconds=elapsed)
        if message == "interrupted":
            if self.guard.cancel_flag.value:
                return QueryResult(QueryStatus.CANCELLED, error="cancelled", seconds=elapsed)
            return QueryResult(QueryStatus.TIMEOUT, error="interrupted: the query ran past its "
                               "time limit", seconds=elapsed)
        if isinstance(exc, sqlite3.ProgrammingError) and "one statement" in message:
            message = "only one statement per call is allowed"
        return QueryResult(QueryStatus.SQL_ERROR, error=message, seconds=elapsed)

    def read_schema(self) -> Schema:
        """Tables and views with their columns and foreign keys, degrading per object.

        An object SQLite cannot describe (a view over a virtual table that is unsafe with
        trusted_schema=OFF, a view chain with too many references, a missing module) is kept
        with a note and no columns; every other object reads as usual. What is kept is bounded
        by settings.schema_chars, so a schema of huge names cannot fill the server's memory.
        """
        self.guard.reset(float("inf"))
        listing = self.conn.execute(
            "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        ).fetchall()
        budget = self.settings.schema_chars
        too_wide = _oversized_views(self.conn)
        raw: dict[str, tuple[str, list[Column], list[tuple[Any, ...]], str | None]] = {}
        dropped_tables = dropped_columns = 0
        for name, kind in listing:
            if len(name) > budget:
                dropped_tables += 1
                continue
            budget -= len(name)
            if name in too_wide:
                raw[name] = (kind, [], [], f"cannot be read: the view expands to more than "
                                           f"{MAX_VIEW_REFERENCES:,} table references")
                continue
            try:
                cols, total = self._read_columns(name, budget)
                fks = self.conn.execute(
                    "SELECT id, seq, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list(?) "
                    "ORDER BY id, seq", (name,)
                ).fetchall()
            except sqlite3.Error as exc:
                reason = " ".join(str(exc).split())[:SCHEMA_NOTE_CHARS]
                raw[name] = (kind, [], [], f"cannot be read: {reason}")
                continue
            budget -= sum(_column_chars(c) for c in cols)
            note = None
            if len(cols) < total:
                dropped_columns += total - len(cols)
                note = (f"only the first {len(cols):,} of {total:,} columns are listed: the schema is "
                        "larger than the server keeps")
            raw[name] = (kind, cols, fks if note is None else [], note)
        tables = [
            Table(name, kind, tuple(cols), _foreign_keys(name, fks, raw), note,
                  unreadable=note is not None and not cols and note.startswith("cannot be read"))
            for name, (kind, cols, fks, note) in raw.items()
        ]
        tables.sort(key=lambda t: (t.name.casefold(), t.name))
        warnings = [IMMUTABLE_WARNING] if self.immutable else []
        if self.created_files:
            warnings.append(wal_files_note(self.created_files))
        if dropped_tables or dropped_columns:
            warnings.append(
                f"the schema is larger than the {self.settings.schema_chars:,} characters of names "
                f"kept per database: {dropped_tables:,} tables and {dropped_columns:,} columns are "
                "not listed (queries can still use them)")
        return Schema(tuple(tables), tuple(warnings))

    def _read_columns(self, name: str, budget: int) -> tuple[list[Column], int]:
        """The columns of one object that fit in `budget` characters, and how many it has."""
        cursor = self.conn.execute("SELECT * FROM pragma_table_xinfo(?)", (name,))
        cols: list[Column] = []
        total = 0
        for r in cursor:
            total += 1
            column = Column(name=r[1], type=r[2] or "", not_null=bool(r[3]), default=r[4],
                            primary_key=int(r[5]), hidden=bool(r[6]))
            size = _column_chars(column)
            if size <= budget and len(cols) == total - 1:
                cols.append(column)
                budget -= size
        return cols, total

    def hidden_schema(self, hide: hiding.HideRules) -> Schema:
        """The schema without what `hide` hides, with the report of what each rule hid."""
        withheld, report = self.resolved_hiding(hide)
        return hiding.filter_schema(self.read_schema(), withheld, report)

    def resolved_hiding(self, hide: hiding.HideRules) -> tuple[hiding.Withheld, HideReport]:
        """`hide` resolved against the current schema (cached until the schema changes)."""
        self.guard.reset(float("inf"))
        version = self.conn.execute("PRAGMA schema_version").fetchone()[0]
        if self._hiding is None or self._hiding[0] != (hide, version):
            resolved = hiding.resolve_on(self.conn, self.guard, hide, self.read_schema())
            self._hiding = ((hide, version), resolved)
        return self._hiding[1]

    def replaced(self) -> bool:
        """True when the path now names another file than the one this connection opened."""
        return _file_identity(self.path) != self.identity

    def close(self) -> None:
        self.conn.close()


def _file_identity(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, 0)
    return (st.st_dev, st.st_ino)


def first_keyword(sql: str) -> str:
    """The statement's first keyword, lower-cased, after whitespace, comments and '('."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace() or sql[i] == "(":
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            break
    j = i
    while j < n and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    return sql[i:j].lower()


def _rtree_shadow_tables(conn: sqlite3.Connection) -> frozenset[str]:
    """Shadow-table names of the R*Tree virtual tables in the schema."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                        "AND sql LIKE 'CREATE VIRTUAL TABLE%'").fetchall()
    return frozenset(name + suffix for name, sql in rows if _RTREE_MODULE.search(sql or "")
                     for suffix in _RTREE_SHADOWS)


def _oversized_views(conn: sqlite3.Connection) -> frozenset[str]:
    """Views whose expansion references more than MAX_VIEW_REFERENCES tables and views."""
    sql_of = {name: sql or "" for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'view'")}
    by_folded = {name.casefold(): name for name in sql_of}
    uses: dict[str, list[str]] = {}
    for name, sql in sql_of.items():
        words = (next(g for g in m.groups() if g is not None)
                 for m in _SQL_NAME.finditer(_SQL_NOISE.sub(" ", sql)))
        uses[name] = [by_folded[w.casefold()] for w in words if w.casefold() in by_folded]
    weight: dict[str, int] = {}
    for root in sql_of:  # depth-first without recursion: chains may be thousands long
        stack = [(root, False)]
        while stack:
            name, expanded = stack.pop()
            if name in weight:
                continue
            if expanded:
                total = sum(weight.get(u, 1) for u in uses[name] if u != name) + 1
                weight[name] = min(total, MAX_VIEW_REFERENCES + 1)
                continue
            stack.append((name, True))
            stack += [(u, False) for u in uses[name] if u not in weight and u != name]
    return frozenset(n for n, w in weight.items() if w > MAX_VIEW_REFERENCES)


def _column_chars(column: Column) -> int:
    return len(column.name) + len(column.type) + len(column.default or "")


def _wal_without_shm(path: Path) -> bool:
    """True for a WAL-mode file whose -shm is missing and cannot be created."""
    with path.open("rb") as fh:
        header = fh.read(20)
    wal_mode = len(header) == 20 and header[18] == 2 and header[19] == 2
    shm = path.with_name(path.name + "-shm")
    return wal_mode and not shm.exists()


def _foreign_keys(table: str, rows: list[tuple[Any, ...]],
                  raw: dict[str, tuple[Any, ...]]) -> tuple[ForeignKey, ...]:
    grouped: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row)
    keys = []
    for parts in grouped.values():
        ref_table = parts[0][2]
        ref_cols = [p[4] for p in parts]
        if any(c is None for c in ref_cols):
            # `REFERENCES t` without columns means t's primary key.
            target = raw.get(ref_table) or next(
                (v for k, v in raw.items() if k.casefold() == ref_table.casefold()), None)
            pk = sorted((c for c in target[1] if c.primary_key), key=lambda c: c.primary_key) if target else []
            ref_cols = [c.name for c in pk] or ["rowid"] * len(parts)
        keys.append(ForeignKey(table, tuple(p[3] for p in parts), ref_table, tuple(ref_cols)))
    return tuple(keys)

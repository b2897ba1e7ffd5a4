"""The authorizer and progress handler of a guarded connection: what a statement may do."""

from __future__ import annotations

import re
import sqlite3
import time
from collections import OrderedDict
from typing import Any

from . import hiding
from ._refusals import Refusal, read_refusal
from ._sql_names import cte_names

# Pragmas that only report. Those in _PRAGMAS_WITH_NAME_ARG take a table or index name as
# their argument; every other pragma is allowed only without an argument, because an
# argument to e.g. `user_version` or `journal_mode` would set it.
_PRAGMAS_WITH_NAME_ARG = frozenset(
    {
        "table_info",
        "table_xinfo",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "foreign_key_check",
        "table_list",
    }
)
_PRAGMAS_NO_ARG = frozenset(
    {
        "collation_list",
        "function_list",
        "module_list",
        "pragma_list",
        "compile_options",
        "page_count",
        "page_size",
        "freelist_count",
        "user_version",
        "schema_version",
        "application_id",
        "encoding",
        "data_version",
        "table_list",
        "foreign_key_check",
        "integrity_check",
        "quick_check",
    }
)
# Functions that reach outside the database or change how SQLite parses input.
_DENIED_FUNCTIONS = frozenset(
    {
        "load_extension",
        "fts3_tokenizer",
        "readfile",
        "writefile",
        "edit",
        "fts5",
        "sqlite_dbpage",
        "zipfile",
        "sqlar_compress",
        "sqlar_uncompress",
    }
)
# Functions that show where a value is stored: the gap between two columns' offsets is the
# size of a hidden column between them (sqlite_offset exists in builds with OFFSET_SQL_FUNC).
_LAYOUT_FUNCTIONS = frozenset({"sqlite_offset"})
# The functions a statement on a bounded connection (`_inline`) may call: each does work at most
# linear in the length of its values, which such a connection caps (BOUNDED_VALUE_BYTES), so one
# step of a program stays short and the deadline, checked between steps, bounds the statement.
# The rest (instr, replace, LIKE, printf, trim with a set ...: quadratic or unbounded within one
# step, which no deadline interrupts) run in a worker, which can be killed.
BOUNDED_FUNCTIONS = frozenset(
    {
        *("count", "sum", "total", "avg", "min", "max", "group_concat", "string_agg"),
        *("coalesce", "ifnull", "nullif", "iif", "typeof", "likely", "unlikely", "likelihood"),
        *("abs", "round", "sign", "ceil", "ceiling", "floor", "trunc", "mod", "random"),
        *("length", "octet_length", "lower", "upper", "substr", "substring", "quote", "hex"),
        *("date", "time", "datetime", "julianday", "unixepoch", "strftime"),
        *("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile"),
        *("lag", "lead", "first_value", "last_value", "nth_value"),
    }
)
BOUNDED_VALUE_BYTES = 1 << 20  # the longest value on a bounded connection; a longer one runs in a worker
# Statements that can only read. Checked before preparing, because a few statements
# (REINDEX without arguments, for one) never consult the authorizer.
READING_KEYWORDS = frozenset({"select", "with", "values", "pragma", "explain"})
_ALWAYS_ALLOWED = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})

# The R*Tree module prepares (never runs) writes to its shadow tables when it connects.
_RTREE_MODULE = re.compile(r"\bUSING\s+(?:rtree|rtree_i32)\b", re.IGNORECASE)
_RTREE_SHADOWS = ("_node", "_rowid", "_parent")
_SHADOW_WRITES = frozenset({sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE})


class StatementGuard:
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
        self.missing = False  # ... worded as SQLite's error for a missing name
        self.withheld = hiding.NOTHING_WITHHELD
        # bool(withheld), kept as a plain attribute: the authorizer runs for every name of
        # every statement, and Withheld.__bool__ is a Python call.
        self.withholding = False
        self.sql = ""  # the statement, for refusals that quote its names
        self.pragma_table = False
        self.modules: frozenset[str] | None = None  # virtual table modules (eponymous tables' names)
        self._cte_names: frozenset[str] | None = None  # the statement's CTEs, found when needed
        # On a bounded connection: the casefolded tables whose reads may take unbounded work in one
        # step (virtual tables, tables with virtual generated columns); None: not bounded.
        self.unbounded_tables: frozenset[str] | None = None
        self.bounding = False  # this statement is held to BOUNDED_FUNCTIONS and bounded tables

    def reset(self, deadline: float, withheld: hiding.Withheld | None = None, sql: str = "") -> None:
        """Start a statement `sql` that must end by `deadline` and may not read what `withheld` hides."""
        self.deadline = deadline
        self.first_action = None
        self.tables_read = set()
        self.columns_read = set()
        self.denied = None
        self.hidden = False
        self.missing = False
        self.withheld = withheld or hiding.NOTHING_WITHHELD
        self.withholding = self.withheld is not hiding.NOTHING_WITHHELD
        self.sql = sql
        self.pragma_table = False
        self._cte_names = None
        # Our own schema reads (no `sql`) are not the statement's: they are never bounded.
        self.bounding = self.unbounded_tables is not None and bool(sql)

    def authorize(
        self, action: int, arg1: str | None, arg2: str | None, db_name: str | None, source: str | None
    ) -> int:
        """SQLite's authorizer callback: SQLITE_OK for what a reading statement may do, else SQLITE_DENY."""
        if self.first_action is None:
            self.first_action = action
        if self.bounding and not self._bounded(action, arg1, arg2):
            return self._deny("not bounded here: a worker runs it")
        if self.withholding and action == sqlite3.SQLITE_READ and arg1:
            # The schema read a pragma_* table makes when it is first prepared is not the model's.
            implicit = self.pragma_table and arg1 == "sqlite_master" and arg2 == "ROWID"
            refusal = (
                None if implicit else read_refusal(self.withheld, arg1, arg2, source, self.sql, self._ctes)
            )
            if refusal is not None:
                return self._hide(refusal)
        if action in _ALWAYS_ALLOWED:
            if action == sqlite3.SQLITE_READ and arg1:
                self.tables_read.add(arg1)
                if arg2:  # "" when a table is read without a column, as for count(*)
                    self.columns_read.add((arg1, arg2))
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in _DENIED_FUNCTIONS:
                return self._deny(f"function {arg2}() is not allowed")
            if self.withholding and (arg2 or "").lower() in _LAYOUT_FUNCTIONS:
                return self._hide(Refusal(f"function {arg2}() is not available on this database"))
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if self.withholding and name in hiding.DESCRIBING_PRAGMAS:
                return self._hide(
                    Refusal(f"PRAGMA {arg1} is not available on this database; {hiding.SCHEMA_HINT}")
                )
            if name in _PRAGMAS_WITH_NAME_ARG or (name in _PRAGMAS_NO_ARG and arg2 is None):
                return sqlite3.SQLITE_OK
            return self._deny(f"PRAGMA {arg1} is not allowed (read-only pragmas only)")
        # Preparing the first SELECT over an eponymous virtual table (pragma_table_info)
        # makes SQLite report an UPDATE of sqlite_master with no trigger or view source.
        if (
            action == sqlite3.SQLITE_UPDATE
            and arg1 == "sqlite_master"
            and source is None
            and self.first_action == sqlite3.SQLITE_SELECT
        ):
            self.pragma_table = True
            return sqlite3.SQLITE_OK
        # Inside a SELECT, an R*Tree being connected prepares its shadow-table statements;
        # they only run for writes to the R*Tree, which no reading statement can make (and
        # query_only plus the read-only open still refuse any write).
        if (
            action in _SHADOW_WRITES
            and source is None
            and arg1 in self.rtree_shadow_tables
            and self.first_action == sqlite3.SQLITE_SELECT
        ):
            return sqlite3.SQLITE_OK
        return self._deny("only reading statements (SELECT / WITH) are allowed")

    def _bounded(self, action: int, arg1: str | None, arg2: str | None) -> bool:
        """Whether one action of a bounded statement keeps each step of its program short."""
        if action == sqlite3.SQLITE_FUNCTION:
            return (arg2 or "").lower() in BOUNDED_FUNCTIONS
        if action == sqlite3.SQLITE_READ:
            return (arg1 or "").casefold() not in (self.unbounded_tables or ())
        return action != sqlite3.SQLITE_PRAGMA  # a pragma's one step may read the whole file

    def _ctes(self) -> frozenset[str]:
        """The names the statement's WITH clauses define, less any eponymous virtual table's
        (none when the modules are unknown)."""
        if self._cte_names is None:
            self._cte_names = frozenset() if self.modules is None else cte_names(self.sql) - self.modules
        return self._cte_names

    def _hide(self, refusal: Refusal) -> int:
        if self.denied is None:
            self.denied, self.hidden, self.missing = refusal.text, True, refusal.missing
        return sqlite3.SQLITE_DENY

    def _deny(self, reason: str) -> int:
        if self.denied is None:
            self.denied = reason
        return sqlite3.SQLITE_DENY

    def progress(self) -> int:
        """SQLite's progress handler: non-zero (interrupt) once cancelled or past the deadline."""
        if self.cancel_flag.value or time.monotonic() > self.deadline:
            return 1
        return 0


STATEMENTS_KEPT = 64  # prepared statements a connection with GuardSettings.reuse_statements keeps
# What the authorizer saw of each statement, remembered for more texts than SQLite keeps prepared
# (schema reads and EXPLAINs take places there too): a kept statement's reads are never forgotten.
_READS_KEPT = 4 * STATEMENTS_KEPT

_Reads = tuple[frozenset[str], frozenset[tuple[str, str]]]


class AuthorizedReads:
    """The tables and columns the authorizer saw a statement read. SQLite asks it only while it
    prepares a statement, so on a connection that `keeps` its prepared statements
    (GuardSettings.reuse_statements) a statement run again as it was kept is said to read what it
    read when it was prepared; such a connection serves one rule set only."""

    def __init__(self, *, keeps: bool) -> None:
        self.keeps = keeps
        self._seen: OrderedDict[tuple[str, bool], _Reads] = OrderedDict()
        self._rules: list[hiding.HideRules | None] = []  # the one rule set served, once known

    def serve(self, hide: hiding.HideRules | None) -> None:
        """Check a statement may run under `hide`: where statements are kept, one authorized under
        one rule set must never run under another (our bug if asked to)."""
        rules = hide or None  # no rules, however given
        if not self.keeps:
            return
        if not self._rules:
            self._rules.append(rules)
        elif self._rules[0] != rules:
            raise RuntimeError("a connection that keeps its statements serves one rule set")

    def of(self, guard: StatementGuard, key: tuple[str, bool]) -> _Reads | None:
        """What `guard` saw of the statement `key` (its text; on which connection): this run's when it
        was prepared for it; None when it was kept and what it read is no longer known."""
        if not self.keeps:
            return frozenset(guard.tables_read), frozenset(guard.columns_read)
        if guard.first_action is not None:  # prepared on this run: the authorizer saw it whole
            self._seen[key] = (frozenset(guard.tables_read), frozenset(guard.columns_read))
        elif key not in self._seen:
            return None
        self._seen.move_to_end(key)
        if len(self._seen) > _READS_KEPT:
            self._seen.popitem(last=False)
        return self._seen[key]


def module_names(conn: sqlite3.Connection) -> frozenset[str] | None:
    """The casefolded names of the virtual table modules (an eponymous table has its module's
    name); None where this build cannot list them."""
    try:
        rows = conn.execute("SELECT name FROM pragma_module_list").fetchall()
    except sqlite3.Error:
        return None
    return frozenset(str(name).casefold() for (name,) in rows)


def unbounded_tables(conn: sqlite3.Connection, modules: frozenset[str] | None) -> frozenset[str]:
    """The casefolded tables a bounded statement may not read: the virtual ones (a module's one
    step may do any work), eponymous ones included, and those with virtual generated columns
    (computed on read, by functions no authorizer is asked about)."""
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%' "
        "UNION SELECT m.name FROM sqlite_master m, pragma_table_xinfo(m.name) x "
        "WHERE m.type = 'table' AND x.hidden = 2"
    ).fetchall()
    return frozenset(str(name).casefold() for (name,) in rows) | (modules or frozenset())


def rtree_shadow_tables(conn: sqlite3.Connection) -> frozenset[str]:
    """Shadow-table names of the R*Tree virtual tables in the schema."""
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'"
    ).fetchall()
    return frozenset(
        name + suffix for name, sql in rows if _RTREE_MODULE.search(sql or "") for suffix in _RTREE_SHADOWS
    )

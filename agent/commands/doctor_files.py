"""Doctor's checks of the local files: each --db database opens (and what --hide hid on it), each
--notes file reads within its size limit."""

from __future__ import annotations

from ..errors import DatabaseBusyError, SqaleError
from ..notes import read_notes
from ..sqlite import Database, HideRules, Schema, hiding_findings
from ..text import plural


def check_databases(paths: list[str], hide: HideRules) -> list[str]:
    """Open each --db with the --hide rules and print what it holds; the paths that failed to open."""
    problems = []
    for path in paths:
        try:
            with Database(path, hide=hide) as db:
                schema = db.schema()
        except DatabaseBusyError as exc:  # a writer, not a damaged file: sqale-mcp serves it
            print(f"[warn] database {exc}; sqale-mcp serves it anyway and reads it at its first question")
            continue
        except SqaleError as exc:
            print(f"[fail] database {path}: {exc}")
            problems.append(path)
            continue
        views = sum(1 for t in schema.tables if t.kind == "view")
        snapshot = any("immutable snapshot" in w for w in schema.warnings)  # may miss recent commits
        empty = schema.no_readable_tables()
        if empty is not None:
            print(
                f"[warn] database {db.path}: {empty}; every question on it is answered at once that it has none"
            )
        else:
            mark = "[warn]" if snapshot else "[ok]  "
            print(
                f"{mark} database {db.path}: {plural(len(schema.tables) - views, 'table')}, "
                f"{plural(views, 'view')}"
            )
        for warning in schema.warnings:
            print(f"       note: {warning}")
        _print_hiding(schema)
    return problems


def check_notes(paths: list[str], max_chars: int) -> list[str]:
    """Read each --notes file within the size limit and print its share of the prompt; the paths that failed."""
    problems = []
    for path in paths:
        try:
            notes = read_notes(path, max_chars=max_chars, where="notes")
        except SqaleError as exc:
            print(f"[fail] {exc}")
            problems.append(path)
            continue
        print(
            f"[ok]   notes {notes.path}: {notes.facts} facts, {notes.chars:,} characters in the "
            f"prompt (limit {max_chars:,}, about {notes.chars // 4:,} tokens)"
        )
    return problems


def _print_hiding(schema: Schema) -> None:
    """What each --hide rule hid on this database; a rule that hid nothing is a warning."""
    if schema.hiding is not None:
        for warning, text in hiding_findings(schema.hiding):
            print(f"{'[warn]' if warning else '      '} {text}")

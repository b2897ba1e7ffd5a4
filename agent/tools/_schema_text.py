"""Pure text of the schema tools: list_tables, describe_table, foreign_keys, join_path."""

from __future__ import annotations

from collections.abc import Sequence

from ..sqlite.types import Column, ForeignKey, Schema, Table
from ..text import NAME_CHARS, echo_value, escape_unsafe, format_count, plural, quoted_name
from ._joins import JoinStep, Link, neighbours, self_links
from .result_text import format_total, show_columns, show_ident

_NOTE_ROOM = 200  # characters kept free for the closing note when a listing is cut


def _cut_lines(head: Sequence[str], lines: Sequence[str], max_chars: int) -> list[str]:
    """`head` plus as many of `lines` as fit in max_chars - _NOTE_ROOM (at least one)."""
    kept = list(head)
    size = sum(len(x) + 1 for x in kept)
    for i, line in enumerate(lines):
        size += len(line) + 1
        if i > 0 and size > max_chars - _NOTE_ROOM:
            break
        kept.append(line)
    return kept


def render_table_list(schema: Schema, pattern: str | None, max_chars: int) -> str:
    """Every table and view name (SQL-ready), tables first; cut with a note past max_chars.

    No row counts: counting every table costs a full scan each, on every call; describe_table
    and sample_rows report the row count of the one table asked about.
    """
    tables = [t for t in schema.tables if pattern is None or pattern.casefold() in t.name.casefold()]
    shown_pattern = None if pattern is None else echo_value(pattern)
    if not tables:
        if pattern is None:
            return "the database has no tables or views"
        return (
            f"no table or view name contains '{shown_pattern}'; call list_tables without "
            '"pattern" to see every name'
        )
    lines: list[str] = []
    plain = [t for t in tables if t.kind != "view"]
    views = [t for t in tables if t.kind == "view"]
    where = "" if pattern is None else f" whose names contain '{shown_pattern}'"
    for group, word in ((plain, "table"), (views, "view")):
        if group:
            lines.append(f"{plural(len(group), word)}{where}:")
            lines += [_listed(t) for t in group]
    kept = _cut_lines([], lines, max_chars)
    if len(kept) == len(lines):
        return "\n".join(lines)
    shown = sum(1 for line in kept if not line.endswith(":"))
    kept.append(
        f"[showing {format_count(shown)} of {format_count(len(tables))} names; call "
        'list_tables with {"pattern": "word"} to list only the names containing a word]'
    )
    return "\n".join(kept)


def _listed(table: Table) -> str:
    """A name in list_tables, with its note when the object cannot be read in full."""
    return show_ident(table.name) if table.note is None else f"{show_ident(table.name)} [{table.note}]"


def render_unreadable(table: Table) -> str:
    """describe_table of an object SQLite cannot describe: why, and what still works."""
    return (
        f"{table.kind} {show_ident(table.name)} {table.note}; queries on it fail the same way, "
        "use the other tables"
    )


def _ordered_keys(table: Table) -> list[ForeignKey]:
    """Foreign keys in the order of their columns (SQLite lists them last-declared first)."""
    position = {c.name: i for i, c in enumerate(table.columns)}
    return sorted(table.foreign_keys, key=lambda fk: [position.get(c, -1) for c in fk.columns])


def _key_target(fk: ForeignKey, schema: Schema) -> str:
    target = schema.find(fk.ref_table)
    if target is None:
        return f"{show_columns(fk.ref_table, fk.ref_columns)} (no such table)"
    return show_columns(target.name, fk.ref_columns)


def _column_flags(column: Column, table: Table, schema: Schema, pk_size: int) -> str:
    flags = []
    if column.primary_key and pk_size == 1:
        flags.append("PK")
    if column.not_null:
        flags.append("NOT NULL")
    if column.default is not None:
        flags.append(f"DEFAULT {echo_value(column.default)}")
    if column.hidden:
        flags.append("HIDDEN")
    for fk in table.foreign_keys:
        if fk.columns == (column.name,):
            flags.append(f"-> {_key_target(fk, schema)}")
    return " ".join(flags)


def render_description(table: Table, schema: Schema, rows: tuple[int, bool] | None, max_chars: int) -> str:
    """Every column with type, PK, NOT NULL, default and FK target; `rows` is (count, exact)."""
    facts = []
    if rows is not None:
        facts.append(plural(rows[0], "row") if rows[1] else f"{format_total(*rows)} rows")
    facts.append(plural(len(table.columns), "column"))
    head = [f"{table.kind} {show_ident(table.name)}: {', '.join(facts)}"]
    if table.note is not None:
        head.append(f"[{table.note}]")
    pk = sorted((c for c in table.columns if c.primary_key), key=lambda c: c.primary_key)
    names = [show_ident(c.name) for c in table.columns]
    name_width = max((len(n) for n in names), default=0)
    types = [echo_value(c.type) for c in table.columns]
    type_width = max((len(t) for t in types), default=0)
    lines = []
    for name, type_, column in zip(names, types, table.columns, strict=True):
        flags = _column_flags(column, table, schema, len(pk))
        lines.append(f"{name.ljust(name_width)}  {type_.ljust(type_width)}  {flags}".rstrip())
    tail = []
    if len(pk) > 1:
        tail.append(f"primary key ({', '.join(show_ident(c.name) for c in pk)})")
    tail += [
        f"foreign key {show_columns(table.name, fk.columns)} -> {_key_target(fk, schema)}"
        for fk in _ordered_keys(table)
        if len(fk.columns) > 1
    ]
    text = "\n".join(head + lines + tail)
    if len(text) <= max_chars:
        return text
    kept = _cut_lines(head, lines, max_chars)
    shown = len(kept) - len(head)
    literal = (
        "'" + escape_unsafe(table.name.replace("'", "''")) + "'"
        if len(table.name) <= NAME_CHARS
        else "'<the table name>'"
    )
    return "\n".join(
        [
            *kept,
            *tail,
            f'[showing {shown} of {len(lines)} columns; run_query "SELECT name, type '
            f'FROM pragma_table_info({literal}) LIMIT 100 OFFSET {shown}" lists the rest]',
        ]
    )


def _link_line(fk: ForeignKey, target: str) -> str:
    return f"{show_columns(fk.table, fk.columns)} -> {show_columns(target, fk.ref_columns)}"


def render_links(table: Table, schema: Schema, max_chars: int) -> str:
    """Outgoing and incoming foreign keys of `table`, one link per line."""
    outgoing = [_link_line(fk, _key_target_name(fk, schema)) for fk in _ordered_keys(table)]
    incoming = [
        _link_line(fk, table.name)
        for other in schema.tables
        if other.name != table.name
        for fk in _ordered_keys(other)
        if _key_target_name(fk, schema) == table.name
    ]
    name = show_ident(table.name)
    lines = [
        f"outgoing ({name} -> other tables):",
        *(outgoing or ["none"]),
        f"incoming (other tables -> {name}):",
        *(incoming or ["none"]),
    ]
    kept = _cut_lines([], lines, max_chars)
    if len(kept) == len(lines):
        return "\n".join(lines)
    return "\n".join(
        [
            *kept,
            f"[showing {len(kept)} of {len(lines)} lines; ask join_path for "
            "the link between two particular tables]",
        ]
    )


def _key_target_name(fk: ForeignKey, schema: Schema) -> str:
    target = schema.find(fk.ref_table)
    return fk.ref_table if target is None else target.name


def _on_clause(link: Link, left_alias: str | None = None, right_alias: str | None = None) -> str:
    left = quoted_name(left_alias or link.left)
    right = quoted_name(right_alias or link.right)
    return " AND ".join(
        f"{left}.{quoted_name(a)} = {right}.{quoted_name(b)}"
        for a, b in zip(link.left_columns, link.right_columns, strict=True)
    )


def render_join_path(start: str, steps: Sequence[JoinStep]) -> str:
    """The path as ready-to-use FROM/JOIN lines; other links between the same tables as comments."""
    lines = [f"FROM {quoted_name(start)}"]
    for step in steps:
        first, *others = step.links
        lines.append(f"JOIN {quoted_name(step.table)} ON {_on_clause(first)}")
        lines += [f"-- or: JOIN {quoted_name(step.table)} ON {_on_clause(o)}" for o in others]
    return "\n".join(lines)


def render_same_table(table: str, schema: Schema) -> str:
    """join_path of a table with itself: no join needed, and its self links if any."""
    text = f"table_a and table_b are both {show_ident(table)}; no join is needed"
    links = self_links(schema, table)
    if not links:
        return text
    joins = [
        f'FROM {quoted_name(table)} AS "a" JOIN {quoted_name(table)} AS "b" ON {_on_clause(link, "a", "b")}'
        for link in links
    ]
    return "\n".join([f"{text}; to pair its rows with each other use its self link:", *joins])


def render_no_path(table_a: str, table_b: str, schema: Schema) -> str:
    """No chain of foreign keys links the two tables: say so and list their neighbours."""

    def linked(table: str) -> str:
        found = neighbours(schema, table)
        return ", ".join(show_ident(n) for n in found) if found else "no other table"

    return "\n".join(
        [
            f"no chain of foreign keys links {show_ident(table_a)} and {show_ident(table_b)}",
            f"{show_ident(table_a)} is linked to: {linked(table_a)}",
            f"{show_ident(table_b)} is linked to: {linked(table_b)}",
            "if two columns hold the same values, join on them directly",
        ]
    )


def join_tables(start: str, steps: Sequence[JoinStep]) -> frozenset[str]:
    """The tables a join path passes through."""
    return frozenset([start, *(s.table for s in steps)])


__all__ = [
    "join_tables",
    "render_description",
    "render_join_path",
    "render_links",
    "render_no_path",
    "render_same_table",
    "render_table_list",
    "render_unreadable",
]

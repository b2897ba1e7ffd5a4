"""The foreign-key graph of a schema, taken undirected, and shortest join paths through it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import pairwise

from ..sqlite.types import ForeignKey, Schema


@dataclass(frozen=True)
class Link:
    """One foreign key read from `left` to `right`; either side may hold the key."""

    left: str
    left_columns: tuple[str, ...]
    right: str
    right_columns: tuple[str, ...]


@dataclass(frozen=True)
class JoinStep:
    """One hop of a path: the link used, then any other links between the same two tables."""

    links: tuple[Link, ...]

    @property
    def table(self) -> str:
        """The table this hop joins in."""
        return self.links[0].right


def _name_key(name: str) -> tuple[str, str]:
    return (name.casefold(), name)


def resolved_foreign_keys(schema: Schema) -> tuple[tuple[ForeignKey, str], ...]:
    """Every foreign key with the real name of the table it references (dangling ones dropped)."""
    resolved = []
    for table in schema.tables:
        for fk in table.foreign_keys:
            target = schema.find(fk.ref_table)
            if target is not None:
                resolved.append((fk, target.name))
    return tuple(resolved)


def _adjacency(schema: Schema) -> dict[str, dict[str, list[Link]]]:
    graph: dict[str, dict[str, list[Link]]] = {t.name: {} for t in schema.tables}
    for fk, target in resolved_foreign_keys(schema):
        if target == fk.table:
            continue  # a self link never shortens a path between two tables
        graph[fk.table].setdefault(target, []).append(Link(fk.table, fk.columns, target, fk.ref_columns))
        graph[target].setdefault(fk.table, []).append(Link(target, fk.ref_columns, fk.table, fk.columns))
    return graph


def _sorted_links(links: list[Link]) -> tuple[Link, ...]:
    return tuple(
        sorted(
            links,
            key=lambda k: ([c.casefold() for c in k.left_columns], [c.casefold() for c in k.right_columns]),
        )
    )


def neighbours(schema: Schema, table: str) -> tuple[str, ...]:
    """Tables linked to `table` by a foreign key in either direction, in name order."""
    return tuple(sorted(_adjacency(schema).get(table, {}), key=_name_key))


def self_links(schema: Schema, table: str) -> tuple[Link, ...]:
    """Foreign keys of `table` that reference `table` itself."""
    return _sorted_links(
        [
            Link(fk.table, fk.columns, target, fk.ref_columns)
            for fk, target in resolved_foreign_keys(schema)
            if fk.table == table and target == table
        ]
    )


def shortest_join_path(schema: Schema, start: str, goal: str) -> tuple[JoinStep, ...] | None:
    """Fewest foreign-key hops from `start` to `goal` (real names), or None if unconnected.

    Breadth-first over neighbours in name order, so among equally short paths the one
    through alphabetically earlier tables wins, and the same schema always gives the same path.
    """
    graph = _adjacency(schema)
    if start not in graph or goal not in graph:
        return None
    previous: dict[str, str | None] = {start: None}
    frontier = deque([start])
    while frontier and goal not in previous:
        current = frontier.popleft()
        for neighbour in sorted(graph[current], key=_name_key):
            if neighbour not in previous:
                previous[neighbour] = current
                frontier.append(neighbour)
    if goal not in previous:
        return None
    chain = [goal]
    while (before := previous[chain[-1]]) is not None:
        chain.append(before)
    chain.reverse()
    return tuple(JoinStep(_sorted_links(graph[a][b])) for a, b in pairwise(chain))

"""The undirected foreign-key graph: shortest paths, tie-breaks, composite keys, self links."""

from __future__ import annotations

from agent.sqlite.types import Column, ForeignKey, Schema, Table
from agent.tools._joins import JoinStep, Link, neighbours, self_links, shortest_join_path


def table(name: str, *fks: tuple[tuple[str, ...], str, tuple[str, ...]]) -> Table:
    columns = tuple(Column(c, "INTEGER", False, None, 0) for fk in fks for c in fk[0])
    return Table(
        name,
        "table",
        (Column("id", "INTEGER", False, None, 1), *columns),
        tuple(ForeignKey(name, cols, ref, ref_cols) for cols, ref, ref_cols in fks),
    )


SCHEMA = Schema(
    (
        table("a", (("b_id",), "b", ("id",)), (("c_id",), "c", ("id",))),
        table("b", (("d_id",), "d", ("id",))),
        table("c", (("d_id",), "d", ("id",))),
        table("d"),
        table("e", (("x", "y"), "D", ("id", "id2")), (("boss",), "e", ("id",))),
        table("f", (("g",), "missing", ("id",))),
        table("flights", (("dest",), "d", ("id",)), (("src",), "d", ("id",))),
    )
)


def test_shortest_path_prefers_alphabetically_earlier_tables() -> None:
    """Of two equally short paths a->b->d and a->c->d, the one through b is chosen, every time."""
    path = shortest_join_path(SCHEMA, "a", "d")
    assert path == (
        JoinStep((Link("a", ("b_id",), "b", ("id",)),)),
        JoinStep((Link("b", ("d_id",), "d", ("id",)),)),
    )


def test_path_follows_keys_against_their_direction() -> None:
    """The graph is undirected: d reaches a by walking b's key and a's key backwards."""
    path = shortest_join_path(SCHEMA, "d", "a")
    assert path == (
        JoinStep((Link("d", ("id",), "b", ("d_id",)),)),
        JoinStep((Link("b", ("id",), "a", ("b_id",)),)),
    )


def test_composite_key_and_case_insensitive_reference() -> None:
    """A composite key is one link with both column pairs; `REFERENCES D` resolves to d."""
    assert shortest_join_path(SCHEMA, "e", "d") == (JoinStep((Link("e", ("x", "y"), "d", ("id", "id2")),)),)


def test_parallel_links_are_all_kept_in_column_order() -> None:
    """Two keys between the same tables: the first by column name is used, the other kept."""
    assert shortest_join_path(SCHEMA, "flights", "d") == (
        JoinStep((Link("flights", ("dest",), "d", ("id",)), Link("flights", ("src",), "d", ("id",)))),
    )


def test_no_path_and_dangling_keys() -> None:
    """Unconnected tables give None; a key to a missing table is not an edge."""
    assert shortest_join_path(SCHEMA, "f", "a") is None
    assert neighbours(SCHEMA, "f") == ()
    assert shortest_join_path(SCHEMA, "nope", "a") is None


def test_neighbours_and_self_links() -> None:
    """Neighbours come in name order without self links; self links are listed separately."""
    assert neighbours(SCHEMA, "d") == ("b", "c", "e", "flights")
    assert self_links(SCHEMA, "e") == (Link("e", ("boss",), "e", ("id",)),)
    assert self_links(SCHEMA, "a") == ()

"""Golden texts of list_tables, describe_table, foreign_keys and join_path on hand-built schemas."""

from __future__ import annotations

from agent.sqlite.types import Column, ForeignKey, Schema, Table
from agent.tools._joins import shortest_join_path
from agent.tools._schema_text import (
    render_description,
    render_join_path,
    render_links,
    render_no_path,
    render_same_table,
    render_table_list,
)

ORDERS = Table(
    "order",
    "table",
    (
        Column("id", "INTEGER", False, None, 1),
        Column("customer id", "INTEGER", True, None, 0),
        Column("status", "TEXT", True, "'new'", 0),
        Column("total", "", False, None, 0),
        Column("shadow", "TEXT", False, None, 0, hidden=True),
    ),
    (
        ForeignKey("order", ("customer id",), "Customers", ("id",)),
        ForeignKey("order", ("total",), "gone", ("id",)),
    ),
)
DETAILS = Table(
    "Order Details",
    "table",
    (
        Column("OrderID", "INTEGER", True, None, 1),
        Column("ProductID", "INTEGER", True, None, 2),
    ),
    (ForeignKey("Order Details", ("OrderID",), "order", ("id",)),),
)
SHIPMENTS = Table(
    "shipments",
    "table",
    (
        Column("id", "INTEGER", False, None, 1),
        Column("o", "INTEGER", False, None, 0),
        Column("p", "INTEGER", False, None, 0),
    ),
    (ForeignKey("shipments", ("o", "p"), "Order Details", ("OrderID", "ProductID")),),
)
CUSTOMERS = Table(
    "Customers",
    "table",
    (Column("id", "INTEGER", False, None, 1), Column("boss", "INTEGER", False, None, 0)),
    (ForeignKey("Customers", ("boss",), "Customers", ("id",)),),
)
BIG = Table("big orders", "view", (Column("id", "INTEGER", False, None, 0),), ())
LONELY = Table("lonely", "table", (Column("x", "", False, None, 0),), ())
SCHEMA = Schema((BIG, CUSTOMERS, LONELY, ORDERS, DETAILS, SHIPMENTS))


def test_table_list_tables_then_views() -> None:
    """Tables then views, names SQL-ready, counts in the section heads."""
    assert render_table_list(SCHEMA, None, 4000) == (
        '5 tables:\nCustomers\nlonely\n"order"\n"Order Details"\nshipments\n1 view:\n"big orders"'
    )


def test_table_list_pattern_and_no_match() -> None:
    """A pattern keeps names containing it (any case); no match says how to list everything."""
    assert render_table_list(SCHEMA, "ORDER", 4000) == (
        '2 tables whose names contain \'ORDER\':\n"order"\n"Order Details"\n'
        "1 view whose names contain 'ORDER':\n\"big orders\""
    )
    assert render_table_list(SCHEMA, "zzz", 4000) == (
        "no table or view name contains 'zzz'; call list_tables without \"pattern\" to see every name"
    )
    assert render_table_list(Schema(()), None, 4000) == "the database has no tables or views"


def test_table_list_cut_for_many_tables() -> None:
    """A thousand tables are cut to the size cap with a note on how to filter by pattern."""
    many = Schema(tuple(Table(f"table_{i:04d}", "table", (), ()) for i in range(1000)))
    text = render_table_list(many, None, 400)
    assert len(text) <= 400
    assert text == "\n".join(
        [
            "1,000 tables:",
            *(f"table_{i:04d}" for i in range(16)),
            '[showing 16 of 1,000 names; call list_tables with {"pattern": "word"} '
            "to list only the names containing a word]",
        ]
    )


def test_description_flags_and_keys() -> None:
    """Columns aligned with type, PK, NOT NULL, DEFAULT, HIDDEN and FK targets (dangling marked)."""
    assert render_description(ORDERS, SCHEMA, (3, True), 4000) == "\n".join(
        [
            'table "order": 3 rows, 5 columns',
            "id             INTEGER  PK",
            '"customer id"  INTEGER  NOT NULL -> Customers.id',
            "status         TEXT     NOT NULL DEFAULT 'new'",
            "total                   -> gone.id (no such table)",
            "shadow         TEXT     HIDDEN",
        ]
    )


def test_description_composite_keys_and_views() -> None:
    """A composite primary key and a composite foreign key get their own lines; views have no count."""
    assert render_description(DETAILS, SCHEMA, (100_000, False), 4000) == "\n".join(
        [
            'table "Order Details": at least 100,000 rows, 2 columns',
            'OrderID    INTEGER  NOT NULL -> "order".id',
            "ProductID  INTEGER  NOT NULL",
            "primary key (OrderID, ProductID)",
        ]
    )
    assert render_description(SHIPMENTS, SCHEMA, None, 4000).splitlines()[-1] == (
        'foreign key shipments(o, p) -> "Order Details"(OrderID, ProductID)'
    )
    assert render_description(BIG, SCHEMA, None, 4000) == 'view "big orders": 1 column\nid  INTEGER'


def test_description_cut_for_wide_tables() -> None:
    """Past the size cap, the column list is cut with a query that lists the rest."""
    wide = Table("w", "table", tuple(Column(f"col_{i:03d}", "TEXT", False, None, 0) for i in range(100)), ())
    text = render_description(wide, Schema((wide,)), (0, True), 500)
    assert text == "\n".join(
        [
            "table w: 0 rows, 100 columns",
            *(f"col_{i:03d}  TEXT" for i in range(19)),
            '[showing 19 of 100 columns; run_query "SELECT name, type FROM '
            "pragma_table_info('w') LIMIT 100 OFFSET 19\" lists the rest]",
        ]
    )
    assert len(text) <= 500


def test_links_outgoing_and_incoming() -> None:
    """foreign_keys lists outgoing links in column order and incoming ones by table."""
    assert render_links(DETAILS, SCHEMA, 4000) == "\n".join(
        [
            'outgoing ("Order Details" -> other tables):',
            '"Order Details".OrderID -> "order".id',
            'incoming (other tables -> "Order Details"):',
            'shipments(o, p) -> "Order Details"(OrderID, ProductID)',
        ]
    )
    assert render_links(LONELY, SCHEMA, 4000) == (
        "outgoing (lonely -> other tables):\nnone\nincoming (other tables -> lonely):\nnone"
    )


def test_links_self_reference_listed_once() -> None:
    """A self link shows as outgoing only."""
    assert render_links(CUSTOMERS, SCHEMA, 4000) == "\n".join(
        [
            "outgoing (Customers -> other tables):",
            "Customers.boss -> Customers.id",
            "incoming (other tables -> Customers):",
            '"order"."customer id" -> Customers.id',
        ]
    )


def test_join_path_text_with_composite_key() -> None:
    """A path prints as FROM/JOIN lines, every name quoted, composite keys joined with AND."""
    steps = shortest_join_path(SCHEMA, "shipments", "Customers")
    assert steps is not None
    assert render_join_path("shipments", steps) == "\n".join(
        [
            'FROM "shipments"',
            'JOIN "Order Details" ON "shipments"."o" = "Order Details"."OrderID" AND '
            '"shipments"."p" = "Order Details"."ProductID"',
            'JOIN "order" ON "Order Details"."OrderID" = "order"."id"',
            'JOIN "Customers" ON "order"."customer id" = "Customers"."id"',
        ]
    )


def test_same_table_and_no_path_texts() -> None:
    """Same table: no join needed (self links offered); no path: both tables' neighbours."""
    assert render_same_table("lonely", SCHEMA) == "table_a and table_b are both lonely; no join is needed"
    assert render_same_table("Customers", SCHEMA) == (
        "table_a and table_b are both Customers; no join is needed; to pair its rows with each other "
        'use its self link:\nFROM "Customers" AS "a" JOIN "Customers" AS "b" ON "a"."boss" = "b"."id"'
    )
    assert render_no_path("lonely", "order", SCHEMA) == "\n".join(
        [
            'no chain of foreign keys links lonely and "order"',
            "lonely is linked to: no other table",
            '"order" is linked to: Customers, "Order Details"',
            "if two columns hold the same values, join on them directly",
        ]
    )

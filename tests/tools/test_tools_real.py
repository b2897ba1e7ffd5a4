"""The tools on the real databases in ../shared/data: Chinook, Northwind, a Django app, Spider dev."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.sqlite import Database, WorkerPool
from agent.tools import ToolSettings
from tests.conftest import SHARED_DATA, SHARED_DBS
from tests.support.weird_database import outcome, run_tool

DBS = SHARED_DBS
SPIDER = SHARED_DATA / "spider_dev" / "database"


def real(path: Path, engine: WorkerPool) -> Database:
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/data is not next to this clone)")
    return Database.unruled(path, engine)


@pytest.fixture
def chinook(engine: WorkerPool) -> Iterator[Database]:
    """The Chinook music store database from ../shared/data."""
    with real(DBS / "Chinook_Sqlite.sqlite", engine) as db:
        yield db


def test_chinook_describe_track(chinook: Database) -> None:
    """Chinook's Track: row count, types, keys and FK targets."""
    assert run_tool(chinook, "describe_table", {"table_name": "track"}) == outcome(
        "table Track: 3,503 rows, 9 columns\n"
        "TrackId       INTEGER        PK NOT NULL\n"
        "Name          NVARCHAR(200)  NOT NULL\n"
        "AlbumId       INTEGER        -> Album.AlbumId\n"
        "MediaTypeId   INTEGER        NOT NULL -> MediaType.MediaTypeId\n"
        "GenreId       INTEGER        -> Genre.GenreId\n"
        "Composer      NVARCHAR(220)\n"
        "Milliseconds  INTEGER        NOT NULL\n"
        "Bytes         INTEGER\n"
        "UnitPrice     NUMERIC(10,2)  NOT NULL",
        ("Track",),
    )


def test_chinook_join_path_and_distinct(chinook: Database) -> None:
    """Track to Customer goes through InvoiceLine and Invoice; Composer's values include NULL."""
    assert run_tool(chinook, "join_path", {"table_a": "Track", "table_b": "Customer"}) == outcome(
        'FROM "Track"\nJOIN "InvoiceLine" ON "Track"."TrackId" = "InvoiceLine"."TrackId"\n'
        'JOIN "Invoice" ON "InvoiceLine"."InvoiceId" = "Invoice"."InvoiceId"\n'
        'JOIN "Customer" ON "Invoice"."CustomerId" = "Customer"."CustomerId"',
        ("Track", "InvoiceLine", "Invoice", "Customer"),
    )
    assert run_tool(
        chinook, "distinct_values", {"table_name": "Track", "column_name": "Composer", "limit": 3}
    ).text == (
        "Track.Composer has 854 distinct values; the 3 most frequent:\n"
        "value          | count\n---------------+------\nNULL           | 977\n'Steve Harris' | 80\n"
        "'U2'           | 44"
    )


def test_northwind_order_details(engine: WorkerPool) -> None:
    """Northwind's "Order Details" works in every tool that takes a table."""
    with real(DBS / "northwind.db", engine) as db:
        assert run_tool(db, "sample_rows", {"table_name": "Order Details", "limit": 2}) == outcome(
            'first 2 rows of "Order Details" (2,155 in total):\n'
            "OrderID | ProductID | UnitPrice | Quantity | Discount\n"
            "--------+-----------+-----------+----------+---------\n"
            "10248   | 11        | 14        | 12       | 0.0\n"
            "10248   | 42        | 9.8       | 10       | 0.0",
            ("Order Details",),
        )
        assert run_tool(db, "join_path", {"table_a": "order details", "table_b": "customers"}).text == (
            'FROM "Order Details"\nJOIN "Orders" ON "Order Details"."OrderID" = "Orders"."OrderID"\n'
            'JOIN "Customers" ON "Orders"."CustomerID" = "Customers"."CustomerID"'
        )
        query = run_tool(db, "run_query", {"sql": 'SELECT count(*) FROM "Order Details"'})
        assert (query.text, query.tables) == ("count(*)\n--------\n2155\n[1 row]", {"Order Details"})


def test_bakerydemo_lists_all_85_tables(engine: WorkerPool) -> None:
    """All 85 tables of a real Django database fit in one list_tables call."""
    with real(DBS / "wagtail_bakerydemo.sqlite", engine) as db:
        lines = run_tool(db, "list_tables", {}).text.splitlines()
    assert (lines[0], len(lines), lines[-1]) == ("85 tables:", 86, "wagtailusers_userprofile")


@pytest.mark.parametrize("db_id", ["concert_singer", "pets_1", "car_1", "world_1", "flight_2"])
def test_spider_databases_every_tool_on_every_table(engine: WorkerPool, db_id: str) -> None:
    """Every tool on every table of Spider dev databases returns ok text within the size cap."""
    with real(SPIDER / db_id / f"{db_id}.sqlite", engine) as db:
        schema = db.schema()
        first = schema.tables[0].name
        for table in schema.tables:
            name = table.name
            column = table.columns[0].name
            for tool, args in [
                ("describe_table", {"table_name": name}),
                ("foreign_keys", {"table_name": name}),
                ("sample_rows", {"table_name": name, "limit": 5}),
                ("distinct_values", {"table_name": name, "column_name": column}),
                ("run_query", {"sql": f'SELECT * FROM "{name}" LIMIT 3'}),
            ]:
                result = run_tool(db, tool, args)
                assert result.ok, (tool, args, result.text)
                assert len(result.text) <= ToolSettings().result_chars
            assert run_tool(db, "join_path", {"table_a": first, "table_b": name}).text

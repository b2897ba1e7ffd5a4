"""The verified libraries' files are checked at start-up; their entries when the state opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import ConfigError
from mcp_server.config.catalog import Catalog, CatalogEntry
from mcp_server.config.libraries import library_paths


def catalog_with(tmp_path: Path, **verified: Path) -> Catalog:
    """A catalog of one database per alias in `verified`, each with that library file."""
    return Catalog(
        tuple(
            CatalogEntry(alias=alias, path=tmp_path / f"{alias}.db", tables=(), views=(), verified=library)
            for alias, library in verified.items()
        )
    )


def test_each_library_file_is_given_by_alias_whether_it_exists_yet_or_not(tmp_path: Path) -> None:
    """A library's file is resolved; one that does not exist yet is served empty, so it is no error."""
    (tmp_path / "sales.jsonl").write_text("", encoding="utf-8")
    catalog = catalog_with(tmp_path, sales=tmp_path / "sales.jsonl", hr=tmp_path / "new.jsonl")
    assert library_paths(catalog) == {"sales": tmp_path / "sales.jsonl", "hr": tmp_path / "new.jsonl"}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("folder", "--verified sales={path}: not a file; give the path of a JSON Lines file"),
        (
            "missing/sales.jsonl",
            "--verified sales={path}: its folder {folder} does not exist; create it or fix the path",
        ),
    ],
    ids=["a folder", "no folder"],
)
def test_a_library_path_that_cannot_be_a_file_stops_start_up(tmp_path: Path, name: str, message: str) -> None:
    """A folder given as the library, or a file in a folder that does not exist, is a ConfigError
    naming the option, before any entry is read."""
    (tmp_path / "folder").mkdir()
    path = tmp_path / name
    with pytest.raises(ConfigError) as info:
        library_paths(catalog_with(tmp_path, sales=path))
    assert str(info.value) == message.format(path=path, folder=path.parent)

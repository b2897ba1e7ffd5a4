"""The verified libraries of the served databases: their files checked at start-up, their entries
when the server's state opens.

A library's path is checked before the server starts (a folder that does not exist, or a path that
is no file, is a ConfigError). Its entries are read and checked once the state opens (on stdio
after the handshake, over HTTP before the server serves), through the server's guarded workers under
its database's hide rules, before any question is answered; every refused entry is logged in one
line naming it. A file that does not exist yet is served empty (`golden add --file` or "Save as
verified" create it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agent import ConfigError, Database, DatabaseBusyError

from .catalog import Catalog

if TYPE_CHECKING:  # loaded when the state opens, and only when a database has a library
    from agent import VerifiedLibrary

logger = logging.getLogger(__name__)


def library_paths(catalog: Catalog) -> dict[str, Path]:
    """The file of each database's verified library, by alias; ConfigError for a bad path."""
    paths = {e.alias: e.verified.resolve() for e in catalog.entries if e.verified is not None}
    for entry in catalog.entries:
        if entry.alias not in paths:
            continue
        path = paths[entry.alias]
        where = f"--verified {entry.alias}={entry.verified}"
        if path.exists() and not path.is_file():
            raise ConfigError(f"{where}: not a file; give the path of a JSON Lines file")
        if not path.parent.is_dir():
            raise ConfigError(f"{where}: its folder {path.parent} does not exist; create it or fix the path")
    return paths


def open_libraries(paths: Mapping[str, Path], databases: Mapping[str, Database]) -> dict[str, VerifiedLibrary]:
    """A VerifiedLibrary per database that has one (`paths`), loaded and checked on its database."""
    if not paths:
        return {}
    from agent import VerifiedLibrary

    libraries: dict[str, VerifiedLibrary] = {}
    for alias, path in paths.items():
        shared = {other for other, other_path in paths.items() if other_path == path and other != alias}
        library = VerifiedLibrary(path, alias, shared_with=shared)
        libraries[alias] = library
        try:
            snapshot = library.current(databases[alias])
        except DatabaseBusyError:  # checked at the database's first question, as it is read then
            logger.warning(
                "database '%s': verified library %s is checked at the database's first "
                "question (another program is writing to the database)",
                alias,
                path,
            )
            continue
        if snapshot.missing:
            logger.warning(
                "database '%s': verified library %s does not exist yet; it is served "
                "empty until entries are added to it",
                alias,
                path,
            )
        else:
            logger.info(
                "database '%s': verified library %s: %d entries served, %d refused",
                alias,
                path,
                len(snapshot.entries),
                len(snapshot.refusals),
            )
    return libraries

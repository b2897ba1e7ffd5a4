"""The verified libraries of the served databases: opened and checked once at start-up.

Each library is checked through a guarded worker under its database's hide rules before the
server serves anything; every refused entry is logged in one line naming it. A file that does
not exist yet is served empty (`golden add --file` or "Save as verified" create it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from agent import ConfigError, Database, DatabaseBusyError, WorkerLimits, WorkerPool

from .catalog import Catalog, checking_engine

if TYPE_CHECKING:  # loaded only when a database has a library: a server without one starts sooner
    from agent import VerifiedLibrary

logger = logging.getLogger(__name__)


def open_libraries(
    catalog: Catalog, limits: WorkerLimits, *, engine: WorkerPool | None = None
) -> Mapping[str, VerifiedLibrary]:
    """A VerifiedLibrary per database that has one, loaded and checked (on `engine` when given);
    ConfigError for a bad path."""
    paths = {e.alias: e.verified.resolve() for e in catalog.entries if e.verified is not None}
    libraries: dict[str, VerifiedLibrary] = {}
    if not paths:
        return libraries
    from agent import VerifiedLibrary

    with checking_engine(limits, engine) as checks:
        for entry in catalog.entries:
            if entry.alias not in paths:
                continue
            path = paths[entry.alias]
            where = f"--verified {entry.alias}={entry.verified}"
            if path.exists() and not path.is_file():
                raise ConfigError(f"{where}: not a file; give the path of a JSON Lines file")
            if not path.parent.is_dir():
                raise ConfigError(
                    f"{where}: its folder {path.parent} does not exist; create it or fix the path"
                )
            shared = {alias for alias, other in paths.items() if other == path and alias != entry.alias}
            library = VerifiedLibrary(path, entry.alias, shared_with=shared)
            libraries[entry.alias] = library
            try:
                snapshot = library.current(Database(entry.path, checks, hide=entry.hide))
            except DatabaseBusyError:  # checked at the database's first question, as it is read then
                logger.warning(
                    "database '%s': verified library %s is checked at the database's first "
                    "question (another program is writing to the database)",
                    entry.alias,
                    path,
                )
                continue
            if snapshot.missing:
                logger.warning(
                    "database '%s': verified library %s does not exist yet; it is served "
                    "empty until entries are added to it",
                    entry.alias,
                    path,
                )
            else:
                logger.info(
                    "database '%s': verified library %s: %d entries served, %d refused",
                    entry.alias,
                    path,
                    len(snapshot.entries),
                    len(snapshot.refusals),
                )
    return libraries

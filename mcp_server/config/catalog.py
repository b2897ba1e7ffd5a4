"""The configured databases: which files, under which aliases, with the tables and hide rules of each."""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from agent import (
    ALIAS_PATTERN,
    DEMO_ALIAS,
    ConfigError,
    Database,
    DatabaseBusyError,
    DatabasePathError,
    HideReport,
    HideRules,
    Notes,
    WorkerLimits,
    WorkerPool,
    default_cache_dir,
    default_config_path,
    ensure_demo_database,
    hiding_findings,
    nearest,
    read_notes,
    shown_path,
    validate_database_path,
)

from .server_settings import ServerSettings
from .settings_parts import AliasFile, DatabaseSpec

logger = logging.getLogger(__name__)

DB_DIR_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def no_database(environ: Mapping[str, str]) -> str:
    """What to do when no database is configured, naming the config file this environment reads."""
    config = shown_path(default_config_path(environ))
    return (
        "no database configured: pass --db ALIAS=PATH (repeatable), --db-dir DIR or --demo, or put "
        f"them in a --config FILE.toml (read without --config from {config})"
    )


@dataclass(frozen=True)
class CatalogEntry:
    """A validated database and the facts the tool description shows."""

    alias: str
    path: Path
    tables: tuple[str, ...]
    views: tuple[str, ...]
    notes: Notes | None = None  # the user's facts about this database's data
    hide: HideRules = field(default_factory=HideRules)  # what the model may not see or read
    hiding: HideReport | None = None  # what those rules hid on this database
    verified: Path | None = None  # its verified library (a golden-question file), if it has one
    # Another program held the file locked (a writer) when the server started: it is served, its
    # tables unknown here; the first question reads them (Database.schema), once the writer is done.
    busy: bool = False


@dataclass(frozen=True)
class Catalog:
    """Every configured database, in the order given."""

    entries: tuple[CatalogEntry, ...]

    @property
    def aliases(self) -> tuple[str, ...]:
        """The aliases clients may pass as `database`."""
        return tuple(e.alias for e in self.entries)

    def entry(self, alias: str) -> CatalogEntry:
        """The entry of a configured alias (KeyError for any other)."""
        for entry in self.entries:
            if entry.alias == alias:
                return entry
        raise KeyError(alias)


def collect_databases(settings: ServerSettings, environ: Mapping[str, str]) -> tuple[DatabaseSpec, ...]:
    """The explicit databases, then --db-dir's files, then the demo; raise ConfigError on clashes."""
    found: dict[str, tuple[DatabaseSpec, str]] = {}

    def add(spec: DatabaseSpec, source: str) -> None:
        if spec.alias in found:
            other = found[spec.alias][1]
            raise ConfigError(
                f"database alias '{spec.alias}' is given twice ({other} and {source}); "
                f"rename one with --db OTHER_ALIAS=PATH"
            )
        found[spec.alias] = (spec, source)

    for spec in settings.databases:
        add(spec, f"--db {spec.alias}={spec.path}")
    if settings.db_dir is not None:
        for spec in scan_db_dir(settings.db_dir, outside_links=settings.db_dir_outside_links):
            add(spec, f"--db-dir file {spec.path.name}")
    if settings.demo:
        cache = default_cache_dir(environ)
        try:
            path = ensure_demo_database(cache)
        except OSError as exc:
            raise ConfigError(
                f"--demo: cannot build the demo database in {cache} ({exc}); "
                "set XDG_CACHE_HOME to a writable folder"
            ) from exc
        add(DatabaseSpec(alias=DEMO_ALIAS, path=path), "--demo")
    if not found:
        raise ConfigError(no_database(environ))
    return tuple(spec for spec, _ in found.values())


def scan_db_dir(folder: Path, *, outside_links: bool = False) -> tuple[DatabaseSpec, ...]:
    """Every SQLite-looking file directly in `folder`, by name; alias = file stem.

    Each entry named like a database that is not served is skipped with a warning saying why: a
    directory, FIFO, device or socket, a broken or looping symlink, a name that is no alias, and
    a symlink to a file outside `folder` unless `outside_links` (--db-dir-outside-links).
    """
    root = folder.expanduser()
    try:
        names = sorted(os.listdir(root))
        resolved_root = root.resolve(strict=True)
    except OSError as exc:
        raise ConfigError(
            f"--db-dir {folder}: cannot list it ({exc.strerror}); give a readable folder"
        ) from exc
    specs = []
    skipped = []
    for name in names:
        path = root / name
        if path.suffix.lower() not in DB_DIR_SUFFIXES:
            continue
        why = _unservable(path, resolved_root, outside_links)
        if why is None and not ALIAS_PATTERN.match(path.stem):
            why = "its name is not a usable alias; rename the file or serve it with --db ALIAS=PATH"
        if why is not None:
            logger.warning("--db-dir %s: skipped %s: %s", folder, name, why)
            skipped.append(name)
            continue
        specs.append(DatabaseSpec(alias=path.stem, path=path, skippable=True))
    if not specs:
        listed = f" (skipped: {', '.join(skipped)})" if skipped else ""
        raise ConfigError(
            f"--db-dir {folder}: no usable *.sqlite, *.sqlite3 or *.db file in it{listed}; check the folder"
        )
    return tuple(specs)


def _unservable(path: Path, folder: Path, outside_links: bool) -> str | None:
    """Why the --db-dir entry `path` is not served as a database file (None: it may be)."""
    link = path.is_symlink()
    try:
        info = os.stat(path)  # through a symlink, as opening it would
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "it is a symlink that loops (or runs through too many links)"
        if link and isinstance(exc, FileNotFoundError):
            return f"it is a symlink to {os.readlink(path)}, which does not exist"
        return f"it cannot be checked ({exc.strerror})"
    if link and not outside_links:
        target = Path(os.path.realpath(path))
        if not target.is_relative_to(folder):
            return (
                f"it is a symlink to {target}, outside the folder; serve it with --db ALIAS=PATH, "
                "or pass --db-dir-outside-links"
            )
    if not stat.S_ISREG(info.st_mode):
        return f"it is {_FILE_KINDS.get(stat.S_IFMT(info.st_mode), 'not a regular file')}, not a database file"
    return None


_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def hide_rules_by_alias(settings: ServerSettings, specs: Sequence[DatabaseSpec]) -> dict[str, HideRules]:
    """The hide rules of each alias; ConfigError for rules about an alias that is not served."""
    aliases = [spec.alias for spec in specs]
    out: dict[str, HideRules] = {}
    for item in settings.hide:
        if item.alias not in aliases:
            raise ConfigError(
                f"--hide {item.alias}=...: no database is served as '{item.alias}'; "
                f"{_aliases_text(item.alias, aliases)}"
            )
        out[item.alias] = HideRules.parse(item.rules)
    return out


STARTUP_BUSY_MS = 500  # how long start-up waits for a writer before it serves the file as busy


def startup_engine(limits: WorkerLimits) -> WorkerPool:
    """The engine the start-up checks of the catalog run on: one worker, which
    waits briefly for a writer (a busy file is served, and read at its first question)."""
    return WorkerPool(
        WorkerLimits(workers=1, query_timeout=limits.query_timeout, busy_timeout_ms=STARTUP_BUSY_MS)
    )


@contextmanager
def checking_engine(limits: WorkerLimits, given: WorkerPool | None) -> Iterator[WorkerPool]:
    """`given` (its owner closes it), else a new start-up engine closed when the block ends."""
    if given is not None:
        yield given
        return
    engine = startup_engine(limits)
    try:
        yield engine
    finally:
        engine.close()


def load_catalog(
    specs: Sequence[DatabaseSpec],
    limits: WorkerLimits,
    hide: Mapping[str, HideRules] | None = None,
    *,
    engine: WorkerPool | None = None,
) -> Catalog:
    """Validate every database and read its table names (on `engine` when given).

    A bad explicit database is a ConfigError naming its alias; a bad --db-dir file is skipped
    with a warning naming it and why. A file another program holds locked (a writer) is not bad:
    it is served as busy, with a warning, and read at its first question.
    """
    hide = hide or {}
    with checking_engine(limits, engine) as checks:
        entries = []
        skipped = []
        for spec in specs:
            try:
                path = validate_database_path(spec.path)
                rules = hide.get(spec.alias, HideRules())
                schema = Database(path, checks, hide=rules).schema()
            except DatabaseBusyError as exc:
                logger.warning(
                    "database '%s': %s; meanwhile it is served without its tables, which its "
                    "first question reads",
                    spec.alias,
                    exc,
                )
                entries.append(
                    CatalogEntry(alias=spec.alias, path=path, tables=(), views=(), hide=rules, busy=True)
                )
                continue
            except DatabasePathError as exc:
                if not spec.skippable:  # named explicitly: the user must fix it
                    raise ConfigError(f"database '{spec.alias}': {exc}") from exc
                logger.warning("--db-dir: skipped %s: %s", spec.path.name, exc)
                skipped.append(spec.path.name)
                continue
            for warning in schema.warnings:
                logger.warning("database '%s': %s", spec.alias, warning)
            empty = schema.no_readable_tables()
            if empty is not None:
                logger.warning(
                    "database '%s': %s; every question on it is answered at once that it has none",
                    spec.alias,
                    empty,
                )
            entries.append(
                CatalogEntry(
                    alias=spec.alias,
                    path=path,
                    tables=tuple(t.name for t in schema.tables if t.kind == "table"),
                    views=tuple(t.name for t in schema.tables if t.kind == "view"),
                    hide=rules,
                    hiding=schema.hiding,
                )
            )
            log_hiding(entries[-1])
        if not entries:
            raise ConfigError(
                f"no usable database: every --db-dir file was skipped ({', '.join(skipped)}); "
                "see the warnings above"
            )
        return Catalog(tuple(entries))


def attach_notes(catalog: Catalog, specs: Sequence[AliasFile], max_chars: int) -> Catalog:
    """The catalog with each --notes file read into its database's entry; ConfigError if bad."""
    by_alias = _files_by_alias(catalog, "--notes", specs)
    entries = []
    for entry in catalog.entries:
        spec = by_alias.get(entry.alias)
        if spec is not None:
            entry = replace(
                entry,
                notes=read_notes(spec.path, max_chars=max_chars, where=f"--notes {spec.alias}={spec.path}"),
            )
        entries.append(entry)
    return Catalog(tuple(entries))


def attach_verified(catalog: Catalog, specs: Sequence[AliasFile]) -> Catalog:
    """The catalog with each --verified library named on its database's entry; ConfigError if bad."""
    by_alias = _files_by_alias(catalog, "--verified", specs)
    return Catalog(
        tuple(
            replace(e, verified=by_alias[e.alias].path.expanduser()) if e.alias in by_alias else e
            for e in catalog.entries
        )
    )


def _files_by_alias(catalog: Catalog, flag: str, specs: Sequence[AliasFile]) -> dict[str, AliasFile]:
    """`specs` by alias; ConfigError naming `flag` for one whose alias is not configured."""
    by_alias = {spec.alias: spec for spec in specs}
    unknown = [alias for alias in by_alias if alias not in catalog.aliases]
    if unknown:
        raise ConfigError(
            f"{flag} {unknown[0]}={by_alias[unknown[0]].path}: no database '{unknown[0]}' is "
            f"configured; {_aliases_text(unknown[0], catalog.aliases)}"
        )
    return by_alias


def _aliases_text(alias: str, aliases: Sequence[str]) -> str:
    """`did you mean 'sales'?` for a mistyped alias, else every alias."""
    near = nearest(alias, aliases)
    return f"did you mean '{near}'?" if near is not None else f"the aliases are {', '.join(aliases)}"


def log_hiding(entry: CatalogEntry) -> None:
    """One line per database with hide rules, and a warning for each rule that hides nothing."""
    if entry.hiding is not None:
        for warning, text in hiding_findings(entry.hiding):
            logger.log(logging.WARNING if warning else logging.INFO, "database '%s': %s", entry.alias, text)

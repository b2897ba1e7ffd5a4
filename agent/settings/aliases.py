"""Database aliases (`chinook` in `--db chinook=PATH`): their form, and `ALIAS=PATH` arguments."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError

# Used with .match; \Z, not $: `$` also matches before a final newline, and a file named "x\n.db" is possible.
ALIAS_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")


def check_alias(alias: str, where: str) -> str:
    """Return `alias` if it is a valid database alias, else raise ConfigError naming `where`."""
    if not ALIAS_PATTERN.match(alias):
        raise ConfigError(
            f"{where}: alias {alias!r} is not usable; use letters, digits, '_', '-' or '.' "
            "(at most 64, not starting with '-' or '.')")
    return alias


def parse_alias_files(items: Sequence[str], flag: str, example: str) -> dict[str, Path]:
    """`ALIAS=PATH` strings of `flag` into a mapping; a later alias replaces an earlier one."""
    out: dict[str, Path] = {}
    for item in items:
        alias, sep, path = item.partition("=")
        if not sep or not path.strip():
            raise ConfigError(f"{flag} {item!r}: write it as ALIAS=PATH, e.g. {example}")
        out[check_alias(alias.strip(), f"{flag} {item!r}")] = Path(path.strip()).expanduser()
    return out


def check_plain_path(db: str, command: str) -> None:
    """Refuse the server's ALIAS=PATH form (when no file has that name): `command` takes a path."""
    alias, sep, path = db.partition("=")
    if sep and path and not Path(db).expanduser().exists() and ALIAS_PATTERN.match(alias):
        raise ConfigError(f"--db {db!r}: `sqale-agent {command}` takes a plain path (--db {path}); "
                          "ALIAS=PATH is how sqale-mcp names its databases")

"""The database options shared by the commands that open one: the file (or the demo), and what to hide."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import ConfigError
from ..sqlite import HideRules


def add_database_arguments(parser: Any) -> None:
    """Add `--db PATH` or `--demo` (one is required) and `--hide`, for the commands that work on one
    database."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--db", metavar="PATH", help="the SQLite database file")
    which.add_argument(
        "--demo",
        action="store_true",
        help="the demo bookshop database `sqale-mcp --demo` serves (built once into the "
        "cache folder, $XDG_CACHE_HOME/sqale-mcp)",
    )
    add_hide_argument(parser)


def database_path(args: argparse.Namespace) -> str:
    """The file --db names, or the demo database (built first when it is not in the cache yet)."""
    if not args.demo:
        return str(args.db)
    from ..demo import default_cache_dir, ensure_demo_database

    cache = default_cache_dir(os.environ)
    try:
        return str(ensure_demo_database(cache))
    except OSError as exc:
        raise ConfigError(
            f"--demo: cannot build the demo database in {cache} ({exc}); set XDG_CACHE_HOME "
            "to a writable folder"
        ) from exc


def add_hide_argument(parser: Any) -> None:
    """Add `--hide TABLE[.COLUMN]` (repeatable)."""
    parser.add_argument(
        "--hide",
        action="append",
        default=[],
        metavar="TABLE[.COLUMN]",
        help="hide a table or column from the model (repeatable; globs such as "
        "'*.password*' allowed, any case)",
    )


def hide_rules(args: argparse.Namespace) -> HideRules:
    """The --hide rules, empty when there are none (ConfigError for a malformed rule)."""
    return HideRules.parse(args.hide)
